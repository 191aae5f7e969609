"""Training of speculative streams: L = -a0 * next-token - sum_j a_j * (t+1+j)-token.

- Lossless mode trains only stream parameters (P_j, f, stream-only LoRA); the main stream
  is frozen, so its next-token term is constant and is skipped (a0 is used in shared mode).
- Frozen features: the input of layer L0 for every training sequence is computed once
  (`FeatureCache`) and reused every epoch; a step costs only the top n_layers + lm head.
- Multi-process: under `torchrun` the trainer is wrapped in DistributedDataParallel
  (gloo on CPU, nccl on GPU), each rank taking every world_size-th batch.
- Checkpoints (`ckpt.pt`, atomic) hold stream weights, optimizer, step, the loss log and a
  fingerprint of what determines the weights (base model, data, stream and training
  settings); `train_streams` resumes from one only when the fingerprint matches, and the
  feature cache is reused only for the same base model and data.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from edgespec.config import TrainConfig
from edgespec.speculative.streams import SpecModel, stream_positions


@dataclass
class Example:
    tokens: list[int]
    n_prompt: int
    # the teacher's top-K at each response position (row r predicts tokens[n_prompt + r]):
    # ids [R, K] int, probabilities [R, K]; None for hard labels only
    topk_ids: torch.Tensor | None = None
    topk_p: torch.Tensor | None = None


def tensors_digest(module: nn.Module) -> str:
    """SHA-256 over a module's state (names, dtypes, shapes, bytes)."""
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        t = t.detach().contiguous().cpu()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def examples_digest(examples: list[Example]) -> str:
    """SHA-256 of the training sequences' content (tokens and prompt lengths, in order)."""
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([e.n_prompt, e.tokens], separators=(",", ":")).encode())
        for t in (e.topk_ids, e.topk_p):
            if t is not None:
                h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def run_fingerprint(model: SpecModel, examples: list[Example], hp: TrainConfig, draft_ids: torch.Tensor | None = None) -> str:
    """What decides the trained weights: base model, stream settings, draft vocabulary, data
    content and the training settings (not where they are written nor how often)."""
    settings = {k: v for k, v in asdict(hp).items() if k not in ("data", "out_dir", "checkpoint_every")}
    vocab = None if draft_ids is None else hashlib.sha256(draft_ids.to(torch.int64).numpy().tobytes()).hexdigest()
    blob = {"base": tensors_digest(model.base), "streams": repr(model.cfg), "vocab": vocab, "data": examples_digest(examples), "train": settings}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


class FeatureCache:
    """Layer-L0 inputs of every example, computed once (bf16 in memory, optional file).

    Examples are run in batches of similar lengths (right padding: causal attention keeps
    real rows exact) of about `batch_tokens` tokens; bf16 runs the frozen layers under bf16
    autocast (about 3x faster on a CPU with bf16 matrix units; the features are stored in
    bf16 either way). The file is reused only when the base model's weights, the layer L0,
    the precision and the examples' content are the same; otherwise it is rebuilt."""

    def __init__(
        self,
        model: SpecModel,
        examples: list[Example],
        path: Path | None = None,
        on_progress: Callable[[int], None] = lambda n: None,
        bf16: bool = False,
        batch_tokens: int = 8192,
    ):
        key = {"base": tensors_digest(model.base), "first": model.first, "bf16": bf16, "data": examples_digest(examples)}
        if path is not None and path.is_file():
            blob = torch.load(path)
            if blob.get("key") == key:
                self.h = blob["h"]
                return
        h: list[torch.Tensor | None] = [None] * len(examples)
        order = sorted(range(len(examples)), key=lambda i: len(examples[i].tokens))
        i = 0
        while i < len(order):
            n = 1
            while i + n < len(order) and (n + 1) * len(examples[order[i + n]].tokens) <= batch_tokens:
                n += 1
            idx = order[i : i + n]
            T = len(examples[idx[-1]].tokens)  # the longest of the batch (sorted)
            tokens = torch.zeros(n, T, dtype=torch.long)
            for b, k in enumerate(idx):
                tokens[b, : len(examples[k].tokens)] = torch.tensor(examples[k].tokens)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = model.lower_hidden(tokens)
            for b, k in enumerate(idx):
                h[k] = out[b, : len(examples[k].tokens)].to(torch.bfloat16).clone()
                on_progress(1)
            i += n
        self.h = h
        if path is not None:
            tmp = path.with_suffix(".tmp")
            torch.save({"key": key, "h": self.h}, tmp)
            tmp.replace(path)


def epoch_order(lengths: list[int], batch_size: int, window: int, gen: torch.Generator) -> list[int]:
    """One epoch's example order: a random permutation cut into windows of `window` batches,
    each window sorted by `lengths` so that a batch holds similar lengths (padding costs as
    much as real tokens), the window's batches then shuffled. window 1: plain random order."""
    perm = torch.randperm(len(lengths), generator=gen).tolist()
    if window <= 1:
        return perm
    out: list[int] = []
    w = batch_size * window
    for i in range(0, len(perm), w):
        chunk = sorted(perm[i : i + w], key=lambda k: lengths[k])
        batches = [chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size)]
        for b in torch.randperm(len(batches), generator=gen).tolist():
            out += batches[b]
    return out


def make_batch(examples: list[Example], feats: list[torch.Tensor], idx: list[int], gamma: int):
    """Right-padded tokens [B, T], features [B, T, d], main targets [B, T], stream targets
    [B, T, g] (-100 = ignore), and the teacher's top-K for the main target (index 0) and each
    stream target (index 1 + j): ids and probabilities [B, T, 1 + g, K] (probability 0 where
    there is none), or None, None when no example carries soft labels."""
    T = max(len(examples[i].tokens) for i in idx)
    d = feats[idx[0]].shape[-1]
    B = len(idx)
    tokens = torch.zeros(B, T, dtype=torch.long)
    h0 = torch.zeros(B, T, d)
    main_t = torch.full((B, T), -100, dtype=torch.long)
    stream_t = torch.full((B, T, gamma), -100, dtype=torch.long)
    K = next((examples[i].topk_ids.shape[1] for i in idx if examples[i].topk_ids is not None), 0)
    soft_ids = torch.zeros(B, T, 1 + gamma, K, dtype=torch.long)
    soft_p = torch.zeros(B, T, 1 + gamma, K)
    for b, i in enumerate(idx):
        e = examples[i]
        n = len(e.tokens)
        seq = torch.tensor(e.tokens)
        tokens[b, :n] = seq
        h0[b, :n] = feats[i].float()
        # the main stream at t predicts t+1; stream j predicts t+1+j; only response tokens count
        for j in range(gamma + 1):
            lo = max(0, e.n_prompt - 1 - j)
            if n - 1 - j > lo:
                tgt = seq[lo + 1 + j : n]
                (main_t[b, lo : n - 1 - j] if j == 0 else stream_t[b, lo : n - 1 - j, j - 1]).copy_(tgt)
                if K and e.topk_ids is not None:  # target s = t + 1 + j is response row s - n_prompt
                    r0, r1 = lo + 1 + j - e.n_prompt, n - e.n_prompt
                    soft_ids[b, lo : n - 1 - j, j] = e.topk_ids[r0:r1].long()
                    soft_p[b, lo : n - 1 - j, j] = e.topk_p[r0:r1].float()
    if not K:
        return tokens, h0, main_t, stream_t, None, None
    return tokens, h0, main_t, stream_t, soft_ids, soft_p


class StreamLoss(nn.Module):
    """forward(batch) -> (loss, per-stream losses, per-stream top-1 accuracy); the module DDP wraps.

    A stream's loss is (1 - b) * CE(hard target) + b * CE(teacher's top-K, renormalized),
    b = `soft_weight`, the second term only where the batch carries soft labels; in shared mode
    the main stream's next-token loss (weight a0) is mixed the same way, its top-K term a KL
    to the original model truncated to K tokens. With a draft
    vocabulary (`draft_ids`, the program's drafting head) the streams' logits cover only those
    tokens, as in the program: a target outside it is left out of the loss and counts as a
    miss in the accuracy. bf16: the MSA layers and the lm head run under bf16 autocast."""

    def __init__(self, model: SpecModel, hp: TrainConfig, draft_ids: torch.Tensor | None = None):
        super().__init__()
        self.model = model
        self.hp = hp
        self.draft_ids = draft_ids
        if draft_ids is not None:  # full-vocabulary id -> draft-vocabulary index (-100 outside)
            local = torch.full((model.base.output.weight.shape[0],), -100, dtype=torch.long)
            local[draft_ids] = torch.arange(len(draft_ids))
            self.register_buffer("local", local, persistent=False)
            # the base lm head is frozen in both modes: slice (and cast) it once, not every step
            head = model.base.output.weight.detach().index_select(0, draft_ids)
            self.register_buffer("head", head.to(torch.bfloat16) if hp.bf16 else head, persistent=False)

    def _autocast(self, device: torch.device):
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.hp.bf16)

    def _ce(self, h: torch.Tensor, targets: torch.Tensor, soft_ids=None, soft_p=None, head: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and top-1 accuracy of hidden rows h [..., d] against targets [...] (-100:
        none) through `head` [N, d] (None: the model's lm head; else a draft-vocabulary
        slice, targets and soft labels mapped into it)."""
        keep = targets != -100
        rows, tgt = h[keep], targets[keep]  # only rows with a target reach the lm head
        with self._autocast(rows.device):
            logits = (self.model.base.output(rows) if head is None else F.linear(rows, head)).float()
        if head is not None:
            tgt = self.local[tgt]
        inside = tgt != -100
        acc = ((logits.argmax(-1) == tgt) & inside).float().mean()
        loss = F.cross_entropy(logits, tgt, ignore_index=-100) if inside.any() else logits.sum() * 0
        if soft_ids is not None and self.hp.soft_weight > 0:
            p, ids = soft_p[keep], soft_ids[keep]  # [N, K]
            if head is not None:
                ids = self.local[ids]
                p = torch.where(ids == -100, torch.zeros_like(p), p)
                ids = ids.clamp(min=0)
            has = p.sum(-1) > 0
            p = p[has] / p[has].sum(-1, keepdim=True)
            logq = torch.log_softmax(logits[has], -1).gather(1, ids[has])  # [N', K]
            soft = -(p * logq).sum(-1).mean() if len(p) else logits.sum() * 0
            loss = (1 - self.hp.soft_weight) * loss + self.hp.soft_weight * soft
        return loss, acc

    def forward(self, tokens, h0, main_t, stream_t, soft_ids=None, soft_p=None):
        # stream rows only over each sequence's positions with a target (its response)
        B, T, _ = stream_t.shape
        has = (stream_t != -100).any(-1)  # [B, T]
        starts = torch.where(has.any(1), has.float().argmax(1), T - 1)
        ends = T - has.flip(1).float().argmax(1)  # one past the last position with a target
        length = max(1, int((ends - starts).max()))
        rows, fresh = stream_positions(starts, B, T, length)  # [B, L]

        def at_rows(x: torch.Tensor) -> torch.Tensor:
            return x.gather(1, rows.view(B, -1, *([1] * (x.dim() - 2))).expand(B, rows.shape[1], *x.shape[2:]))

        stream_t = at_rows(stream_t).masked_fill(~fresh[..., None], -100)
        main_soft = (None, None)
        if soft_ids is not None:  # index 0: the main target (every position); 1 + j: stream j (at the stream rows)
            main_soft = (soft_ids[:, :, 0], soft_p[:, :, 0])
            soft_ids, soft_p = at_rows(soft_ids[:, :, 1:]), at_rows(soft_p[:, :, 1:])
        with self._autocast(tokens.device):
            main_h, stream_h = self.model.forward_train(tokens, h0, starts, length)
        head = None if self.draft_ids is None else self.head
        g = stream_h.shape[2]
        w = self.hp.stream_weights
        losses, accs = [], []
        total = torch.zeros(())
        for j in range(g):
            sj = (None, None) if soft_ids is None else (soft_ids[:, :, j], soft_p[:, :, j])
            lj, aj = self._ce(stream_h[:, :, j], stream_t[:, :, j], *sj, head=head)
            total = total + w[j] * lj
            losses.append(lj.detach())
            accs.append(aj.detach())
        if self.model.cfg.mode == "shared":
            # the teacher's top-K is the original model's distribution truncated to K tokens: its
            # CE term is the KL to it up to a constant (the tail outside the top K is not kept)
            l0, _ = self._ce(main_h, main_t, *main_soft)
            total = total + self.hp.main_weight * l0
        return total, torch.stack(losses), torch.stack(accs)


@dataclass
class TrainLog:
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    stream_acc: list[list[float]] = field(default_factory=list)
    tokens_seen: list[int] = field(default_factory=list)
    seconds: float = 0.0


def _dist() -> tuple[int, int]:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def train_streams(
    model: SpecModel,
    examples: list[Example],
    feats: list[torch.Tensor],
    hp: TrainConfig,
    out_dir: str | Path,
    on_step: Callable[[int, float], None] = lambda step, loss: None,
    draft_ids: torch.Tensor | None = None,
) -> TrainLog:
    """Train model.params on examples with `hp` (steps, lr, loss weights, ...; its data, out_dir
    and drafter are the caller's); the streams' loss over the draft vocabulary `draft_ids` when
    given (`StreamLoss`). Resumable from out_dir/ckpt.pt when that checkpoint was made with
    the same `run_fingerprint` (else EdgespecError). Returns the loss log."""
    from edgespec.errors import EdgespecError

    rank, world = _dist()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / "ckpt.pt"
    params = model.params
    if model.cfg.mode == "shared":
        params.requires_grad_(True)
    trainable = [p for p in params.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=hp.lr, weight_decay=0.0)
    log, step = TrainLog(), 0
    fingerprint = run_fingerprint(model, examples, hp, draft_ids)
    if ckpt_path.is_file():
        blob = torch.load(ckpt_path, weights_only=False)
        if blob.get("fingerprint") != fingerprint:
            raise EdgespecError(
                f"{ckpt_path} was written by a run with another base model, data or stream/training settings; "
                "resuming it would mix two runs. Delete it to start over, or set train.out_dir to a new directory"
            )
        params.load_state_dict(blob["params"])
        opt.load_state_dict(blob["opt"])
        step, log = blob["step"], TrainLog(**blob["log"])

    loss_mod: nn.Module = StreamLoss(model, hp, draft_ids)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        loss_mod = DistributedDataParallel(loss_mod)

    def lr_at(s: int) -> float:  # linear warm-up, then linear decay to 0
        if s < hp.warmup_steps:
            return hp.lr * (s + 1) / hp.warmup_steps
        return hp.lr * max(0.0, (hp.steps - s) / max(1, hp.steps - hp.warmup_steps))

    gen = torch.Generator().manual_seed(hp.seed)
    order: list[int] = []
    epoch = 0
    t0 = time.perf_counter()
    seen = log.tokens_seen[-1] if log.tokens_seen else 0
    while step < hp.steps:
        # the batch order is a function of (seed, epoch), so resuming replays the same stream
        need = (step + 1) * hp.batch_size * world
        while len(order) < need:
            # bucketed by response length (what the stream rows cover) for the global batch, so
            # the ranks of a step share one batch of similar lengths
            order += epoch_order([len(e.tokens) - e.n_prompt for e in examples], hp.batch_size * world, hp.length_window, gen)
            epoch += 1
        start = (step * world + rank) * hp.batch_size
        idx = order[start : start + hp.batch_size]
        tokens, h0, main_t, stream_t, soft_ids, soft_p = make_batch(examples, feats, idx, model.cfg.gamma)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss, per_stream, accs = loss_mod(tokens, h0, main_t, stream_t, soft_ids, soft_p)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        step += 1
        seen += int((stream_t[..., 0] != -100).sum()) * world
        log.steps.append(step)
        loss_value = float(loss.detach())
        log.loss.append(loss_value)
        log.stream_acc.append([round(float(a), 4) for a in accs])
        log.tokens_seen.append(seen)
        on_step(step, loss_value)
        if rank == 0 and (step % hp.checkpoint_every == 0 or step == hp.steps):
            log.seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            tmp = ckpt_path.with_suffix(".tmp")
            torch.save(
                {"params": params.state_dict(), "opt": opt.state_dict(), "step": step, "log": asdict(log), "hp": asdict(hp), "fingerprint": fingerprint}, tmp
            )
            tmp.replace(ckpt_path)
            (out / "log.json").write_text(json.dumps(asdict(log)))
    return log


def load_examples(path: str | Path, tokenizer, seq_len: int) -> list[Example]:
    """Self-distilled rows (prompt_ids/response_ids: a JSONL file from `edgespec distill
    --bundle`, or a directory of shards from `edgespec distill --source`) or text pairs
    (prompt/response)."""
    from edgespec.corpus.distill import read_shards
    from edgespec.corpus.prompts import iter_jsonl
    from edgespec.errors import EdgespecError

    if Path(path).is_dir():
        rows = ((n, row) for n, row in enumerate(read_shards(path), 1))
    else:
        rows = iter_jsonl(path, skip_torn=True)
    out = []
    for n, row in rows:
        if "prompt_ids" in row:
            prompt, resp = row["prompt_ids"], row["response_ids"]
        elif "prompt" in row and "response" in row:
            prompt = tokenizer.encode(tokenizer.apply_chat_template(row["prompt"]) if tokenizer.chat_template else row["prompt"])
            resp = tokenizer.encode(row["response"])
        else:
            raise EdgespecError(f"{path}:{n}: expected prompt_ids/response_ids or prompt/response")
        if resp:
            tokens = (prompt + resp)[:seq_len]
            n_resp = max(0, len(tokens) - len(prompt))
            topk_ids, topk_p = (row["topk_ids"][:n_resp], row["topk_p"][:n_resp]) if "topk_ids" in row else (None, None)
            out.append(Example(tokens, len(prompt), topk_ids, topk_p))
    if not out:
        raise EdgespecError(f"training data '{path}' holds no usable rows (make it with `edgespec distill`)")
    return out


def train_from_recipe(recipe, on_status: Callable[[str], None] = lambda s: None, on_step: Callable[[int, float], None] = lambda s, l: None) -> dict:
    """`edgespec train`: base model -> features -> stream training -> streams.pt in out_dir."""
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.speculative.drafters import new_drafter, save_drafter
    from edgespec.speculative.streams import count_parameters

    s, t = recipe.streams, recipe.train
    torch.manual_seed(t.seed)
    src = read_source(recipe.model.source, max(recipe.model.max_seq_len, t.seq_len + s.gamma + 1))
    base = build_model(src)
    tok = tokenizer_of(src)
    model = new_drafter(base, s)
    params = model.params
    out = Path(t.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    on_status("data")
    examples = load_examples(t.data, tok, t.seq_len)
    if t.soft_weight > 0 and not any(e.topk_ids is not None for e in examples):
        from edgespec.errors import EdgespecError

        raise EdgespecError(f"train.soft_weight={t.soft_weight} needs soft labels, and '{t.data}' has none (make it with `edgespec distill --source ...`)")
    on_status(f"features ({len(examples)} sequences)")
    feats = FeatureCache(model, examples, out / "features.pt", bf16=t.bf16).h
    on_status("train")
    from edgespec.speculative.vocab import draft_vocabulary

    draft_ids = draft_vocabulary(src, s.draft_vocab)  # the program drafts through it, streams or heads
    log = train_streams(model, examples, feats, t, out, on_step=on_step, draft_ids=draft_ids)
    save_drafter(out / f"{s.drafter}.pt", params, model.cfg, draft_ids)  # with the vocabulary it was trained over
    _plot_log(log, out / "loss.png")
    return {
        "weights": str(out / f"{s.drafter}.pt"),
        "sequences": len(examples),
        "response_tokens_seen": log.tokens_seen[-1] if log.tokens_seen else 0,
        "steps": log.steps[-1] if log.steps else 0,
        "final_loss": round(sum(log.loss[-20:]) / max(1, len(log.loss[-20:])), 4),
        "final_stream_acc": log.stream_acc[-1] if log.stream_acc else [],
        "trained_parameters": count_parameters(params),
        "train_seconds": round(log.seconds, 1),
    }


def _plot_log(log: TrainLog, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    a.plot(log.tokens_seen, log.loss)
    a.set_xlabel("response tokens seen")
    a.set_ylabel("loss")
    for j in range(len(log.stream_acc[0]) if log.stream_acc else 0):
        b.plot(log.tokens_seen, [x[j] for x in log.stream_acc], label=f"stream {j + 1}")
    b.set_xlabel("response tokens seen")
    b.set_ylabel("top-1 accuracy (batch)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
