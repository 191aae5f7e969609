"""Training of a drafter (streams or heads; `edgespec train`): the loop, checkpoints, resume.

- Frozen features: the input of layer L0 of every training sequence is computed once
  (`edgespec.speculative.features.FeatureCache`) and reused every epoch; a step costs only
  the top n_layers + lm head (`edgespec.speculative.loss.DraftLoss`).
- Multi-process: under `torchrun` the loss module is wrapped in DistributedDataParallel
  (gloo on CPU, nccl on GPU), each rank taking every world_size-th batch.
- A dev split (task data: units kept out of training) is scored at each checkpoint: the
  training loss, the main stream's next-token loss (shared mode) and each depth's top-1. The
  weights that scored best are kept (`best.pt`) and become the run's drafter, so a run that
  starts to memorize its training templates stops where it was best. Best means, in shared
  mode, the lowest main-stream loss (the fine-tune is the product; ties go to the higher mean
  draft top-1), in lossless mode the lowest training loss.
- Learning rates: the adapters at `train.lr`, the streams' entry (P_j, f) at `train.entry_lr`
  (two parameter groups); warm-up, then a linear decay to `train.lr_floor` of the peak.
- Checkpoints (`ckpt.pt`, atomic) hold the drafter's weights, optimizer, step, the loss log
  and a fingerprint of what determines the weights (base model, data, drafter and training
  settings, `run_fingerprint`); `train_drafter` resumes from one only when the fingerprint
  matches (and reads it with weights_only: a crafted ckpt.pt runs no code), and the feature
  cache is reused only for the same base model and data.
- Beside it, `resume.pt`: the same checkpoint with every floating tensor but scalars in bf16
  (weights and Adam's moments: half the bytes), small enough to commit for a long run, so it
  resumes on another machine (the exact `ckpt.pt` stays local). A run resumes from `resume.pt`
  only where `ckpt.pt` is absent; the bf16 rounding of its state is the only difference.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from edgespec.config import TrainConfig
from edgespec.output_dir import claim_dir, written_names
from edgespec.speculative.common import count_parameters
from edgespec.speculative.drafters import Drafter, new_drafter, save_drafter, warm_start_
from edgespec.speculative.features import FeatureCache, load_saved, run_fingerprint
from edgespec.speculative.loss import DraftLoss
from edgespec.speculative.train_data import TrainExample, epoch_order, load_examples, make_batch


@dataclass
class TrainLog:
    """Per step: the loss, the main stream's next-token loss (shared mode; empty in lossless
    mode), each draft depth's top-1 accuracy (of the batch), response tokens seen; per
    checkpoint with a dev split: the same three there."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    main_loss: list[float] = field(default_factory=list)
    depth_acc: list[list[float]] = field(default_factory=list)
    tokens_seen: list[int] = field(default_factory=list)
    seconds: float = 0.0
    dev_steps: list[int] = field(default_factory=list)
    dev_loss: list[float] = field(default_factory=list)
    dev_main_loss: list[float] = field(default_factory=list)
    dev_depth_acc: list[list[float]] = field(default_factory=list)


_OLD_LOG_FIELDS = {"stream_acc": "depth_acc", "dev_stream_acc": "dev_depth_acc"}  # as earlier versions named them


def read_log(data: dict) -> TrainLog:
    """A checkpoint's loss log (`asdict(TrainLog)`), also as checkpoints of earlier versions wrote it."""
    return TrainLog(**{_OLD_LOG_FIELDS.get(k, k): v for k, v in data.items()})


@dataclass
class DevSet:
    """Examples kept out of training, scored at each checkpoint, and their frozen features."""

    examples: list[TrainExample]
    feats: list[torch.Tensor]


@dataclass(frozen=True)
class DevScore:
    """A checkpoint's score on the dev split: the training loss, the main stream's next-token
    loss (NaN in lossless mode) and each draft depth's top-1 accuracy."""

    loss: float
    main_loss: float
    depth_acc: list[float]

    def rank(self, mode: str) -> tuple[float, ...]:
        """Smaller is better: shared mode by the main stream's loss (to 4 decimals), ties by the
        mean draft top-1; lossless mode by the training loss (the main stream is the base)."""
        if mode == "shared":
            main = self.main_loss if self.main_loss == self.main_loss else float("inf")  # NaN: not logged (an earlier version's)
            return (round(main, 4), -sum(self.depth_acc) / max(1, len(self.depth_acc)))
        return (self.loss,)


def dev_score(loss_mod: nn.Module, dev: DevSet, depth: int, batch_size: int) -> DevScore:
    """The dev set's `DevScore` (no gradient), batches weighted by their response tokens."""
    total, main, accs, weight = 0.0, 0.0, None, 0
    with torch.no_grad():
        for i in range(0, len(dev.examples), batch_size):
            idx = list(range(i, min(i + batch_size, len(dev.examples))))
            batch = make_batch(dev.examples, dev.feats, idx, depth)
            loss, main_loss, _, acc = loss_mod(*batch)
            w = int((batch[2] != -100).sum())  # main targets: the batch's response tokens
            total += float(loss) * w
            main += float(main_loss) * w
            accs = acc * w if accs is None else accs + acc * w
            weight += w
    n = max(1, weight)
    return DevScore(total / n, main / n, [round(float(a) / n, 4) for a in accs])


def logged_dev_scores(log: TrainLog) -> list[DevScore]:
    """The dev scores a log holds, one per scored checkpoint (main loss NaN where not logged)."""
    mains = [float("nan")] * (len(log.dev_loss) - len(log.dev_main_loss)) + log.dev_main_loss
    return [DevScore(lo, m, a) for lo, m, a in zip(log.dev_loss, mains, log.dev_depth_acc)]


def lr_factor(step: int, hp: TrainConfig) -> float:
    """The learning rate at `step` as a fraction of its peak: linear warm-up over
    `warmup_steps`, then a linear decay to `lr_floor` at the last step."""
    if step < hp.warmup_steps:
        return (step + 1) / hp.warmup_steps
    left = max(0.0, (hp.steps - step) / max(1, hp.steps - hp.warmup_steps))
    return hp.lr_floor + (1.0 - hp.lr_floor) * left


def param_groups(params: nn.Module, hp: TrainConfig) -> list[dict]:
    """The optimizer's groups of trainable parameters, each with its peak `lr`: the streams'
    entry at `entry_lr` (when set and the drafter has one), the rest at `lr`."""
    trainable = [p for p in params.parameters() if p.requires_grad]
    entry = getattr(params, "entry_parameters", list)() if hp.entry_lr is not None else []
    ids = {id(p) for p in entry}
    rest = [p for p in trainable if id(p) not in ids]
    groups = [{"params": rest, "lr": hp.lr}]
    if entry:
        groups.append({"params": [p for p in entry if p.requires_grad], "lr": hp.entry_lr})
    return groups


def _dist() -> tuple[int, int]:
    """(rank, world size): a process group under torchrun, else (0, 1)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def train_drafter(
    model: Drafter,
    examples: list[TrainExample],
    feats: list[torch.Tensor],
    hp: TrainConfig,
    out_dir: str | Path,
    on_step: Callable[[int, TrainLog], None] = lambda step, log: None,
    draft_ids: torch.Tensor | None = None,
    dev: DevSet | None = None,
) -> TrainLog:
    """Train model.params on examples with `hp` (steps, lr, loss weights, ...; its data, out_dir
    and drafter are the caller's); the drafting rows' loss over the draft vocabulary `draft_ids` when
    given (`DraftLoss`). Resumable from out_dir/ckpt.pt when that checkpoint was made with
    the same `run_fingerprint` (else EdgespecError). on_step(step, log) after each step, the
    log holding that step's loss and tokens seen. With `dev`, each checkpoint scores it and
    the best-scoring weights are written to out_dir/best.pt. Returns the loss log."""
    from edgespec.errors import EdgespecError

    rank, world = _dist()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path, portable_path = out / "ckpt.pt", out / PORTABLE
    params = model.params
    if model.cfg.mode == "shared":
        params.requires_grad_(True)
    trainable = [p for p in params.parameters() if p.requires_grad]
    groups = param_groups(params, hp)
    peaks = [g["lr"] for g in groups]
    opt = torch.optim.AdamW(groups, weight_decay=0.0)
    log, step = TrainLog(), 0
    fingerprint = run_fingerprint(model, examples, hp, draft_ids)
    resume_from = ckpt_path if ckpt_path.is_file() else portable_path if portable_path.is_file() else None
    if resume_from is not None:
        fresh = "delete it to start over, or set train.out_dir to a new directory"
        blob = load_saved(resume_from)
        if blob is None:
            raise EdgespecError(
                f"{resume_from} is damaged or holds more than tensors, numbers and strings (loading it could run code), so it is not read; {fresh}"
            )
        if blob.get("fingerprint") != fingerprint:
            raise EdgespecError(
                f"{resume_from} was written by a run with another base model, data or drafter/training settings; resuming it would mix two runs: {fresh}"
            )
        params.load_state_dict(blob["params"])
        opt.load_state_dict(blob["opt"])
        step, log = blob["step"], read_log(blob["log"])

    loss_mod: nn.Module = DraftLoss(model, hp, draft_ids)
    dev_loss_mod = loss_mod  # scored on rank 0 only: never through DDP's collectives
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        loss_mod = DistributedDataParallel(loss_mod)

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
        tokens, h0, main_t, stream_t, soft_ids, soft_p = make_batch(examples, feats, idx, model.cfg.draft_depth)
        for group, peak in zip(opt.param_groups, peaks):
            group["lr"] = peak * lr_factor(step, hp)
        ramp = min(1.0, (step + 1) / hp.depth_ramp_steps) if hp.depth_ramp_steps else 1.0
        loss, main_loss, _, accs = loss_mod(tokens, h0, main_t, stream_t, soft_ids, soft_p, ramp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        step += 1
        seen += int((stream_t[..., 0] != -100).sum()) * world
        log.steps.append(step)
        loss_value = float(loss.detach())
        log.loss.append(loss_value)
        if model.cfg.mode == "shared":
            log.main_loss.append(round(float(main_loss), 5))
        log.depth_acc.append([round(float(a), 4) for a in accs])
        log.tokens_seen.append(seen)
        on_step(step, log)
        if rank == 0 and (step % hp.checkpoint_every == 0 or step == hp.steps):
            if dev is not None:
                score = dev_score(dev_loss_mod, dev, model.cfg.draft_depth, hp.batch_size)
                mode = model.cfg.mode
                if not log.dev_loss or score.rank(mode) < min(d.rank(mode) for d in logged_dev_scores(log)):
                    blob = {"params": params.state_dict(), "step": step, "dev_loss": score.loss, "dev_main_loss": score.main_loss}
                    _save_atomic(blob, out / "best.pt")
                log.dev_steps.append(step)
                log.dev_loss.append(round(score.loss, 5))
                if mode == "shared":
                    log.dev_main_loss.append(round(score.main_loss, 5))
                log.dev_depth_acc.append(score.depth_acc)
            log.seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            blob = {"params": params.state_dict(), "opt": opt.state_dict(), "step": step, "log": asdict(log), "hp": asdict(hp), "fingerprint": fingerprint}
            _save_atomic(blob, ckpt_path)
            _save_atomic(_in_bf16(blob), portable_path)
            (out / "log.json").write_text(json.dumps(asdict(log)))
    return log


PORTABLE = "resume.pt"  # the checkpoint in bf16 (module docstring)


def _in_bf16(x):
    """x with every floating tensor of one or more dimensions in bf16 (scalars, such as Adam's
    step counts, and integers as they are)."""
    if isinstance(x, dict):
        return {k: _in_bf16(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_in_bf16(v) for v in x)
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() > 0:
        return x.to(torch.bfloat16)
    return x


def _save_atomic(blob: dict, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(blob, tmp)
    tmp.replace(path)


def best_weights(out_dir: Path) -> dict | None:
    """The best dev-scoring weights a run kept (out_dir/best.pt: params, step, dev_loss), or None."""
    path = Path(out_dir) / "best.pt"
    return load_saved(path) if path.is_file() else None


# what a training run writes in train.out_dir (checkpoint, log, features, the drafter, the curve)
RUN_FILES = written_names("*.pt", "*.tmp", "log.json", "loss.png")


def train_from_recipe(recipe, on_status: Callable[[str], None] = lambda s: None, on_step: Callable[[int, TrainLog], None] = lambda step, log: None) -> dict:
    """`edgespec train`: base model -> features -> drafter training -> <drafter>.pt in out_dir
    (text-pair data in the chat template as the recipe's `model.chat_template` says)."""
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.speculative.vocab import draft_vocabulary

    s, t = recipe.drafter, recipe.train
    out = claim_dir(t.out_dir, RUN_FILES, "train.out_dir")  # before the model loads
    torch.manual_seed(t.seed)
    src = read_source(recipe.model.source, max(recipe.model.max_seq_len, t.seq_len + s.draft_depth + 1))
    base = build_model(src)
    tok = tokenizer_of(src)
    model = new_drafter(base, s)
    params = model.params
    if t.init:  # before a checkpoint of this run (if any) is resumed over it
        copied, fresh = warm_start_(params, t.init, s)
        on_status(f"init: {len(copied)} tensors from {t.init}, {len(fresh)} fresh")
    on_status("data")
    examples = load_examples(t.data, tok, t.seq_len, recipe.model.chat_template)
    if t.soft_weight > 0 and not any(e.topk_ids is not None for e in examples):
        from edgespec.errors import EdgespecError

        raise EdgespecError(f"train.soft_weight={t.soft_weight} needs soft labels, and '{t.data}' has none (make it with `edgespec distill --source ...`)")
    on_status(f"features ({len(examples)} sequences)")
    feats = FeatureCache(model, examples, out / "features.pt", bf16=t.bf16).h
    dev = _dev_set(t, tok, recipe.model.chat_template, model, out)
    on_status("train")
    draft_ids = draft_vocabulary(src, s.draft_vocab)  # the program drafts through it, streams or heads
    log = train_drafter(model, examples, feats, t, out, on_step=on_step, draft_ids=draft_ids, dev=dev)
    best = best_weights(out) if dev is not None else None
    if best is not None:  # the run's drafter: the checkpoint that scored best on the dev split
        params.load_state_dict(best["params"])
    save_drafter(out / f"{s.kind}.pt", params, model.cfg, draft_ids)  # with the vocabulary it was trained over
    _plot_log(log, out / "loss.png")
    dev_row = {}
    if best:
        at = log.dev_steps.index(best["step"]) if best["step"] in log.dev_steps else -1
        dev_row = {
            "dev": {
                "items": len(dev.examples),
                "best_step": best["step"],
                "best_loss": round(float(best["dev_loss"]), 4),
                "best_main_loss": logged_dev_scores(log)[at].main_loss if log.dev_main_loss else None,
                "best_depth_acc": log.dev_depth_acc[at],
                "last_loss": log.dev_loss[-1],
            }
        }
    return dev_row | {
        "weights": str(out / f"{s.kind}.pt"),
        "sequences": len(examples),
        "response_tokens_seen": log.tokens_seen[-1] if log.tokens_seen else 0,
        "steps": log.steps[-1] if log.steps else 0,
        "final_loss": round(sum(log.loss[-20:]) / max(1, len(log.loss[-20:])), 4),
        "final_main_loss": round(sum(log.main_loss[-20:]) / len(log.main_loss[-20:]), 4) if log.main_loss else None,
        "cut_sequences": sum(e.cut for e in examples),
        "final_depth_acc": log.depth_acc[-1] if log.depth_acc else [],
        "trained_parameters": count_parameters(params),
        "train_seconds": round(log.seconds, 1),
    }


def _dev_set(t: TrainConfig, tok, chat_template: bool, model: Drafter, out: Path) -> DevSet | None:
    """The dev split's first t.dev_items items with frozen features: `t.dev_data` (a JSONL of
    pairs) when set, else the task's dev split; None with dev_items 0, or data that is not a
    task's, or a task without a dev split."""
    from edgespec.corpus.task_data import task_examples
    from edgespec.speculative.train_data import TASK_PREFIX

    if t.dev_items == 0:
        return None
    if t.dev_data:
        examples = load_examples(t.dev_data, tok, t.seq_len, chat_template)[: t.dev_items]
    elif t.data.startswith(TASK_PREFIX) and task_examples(t.data[len(TASK_PREFIX) :], "dev", 1):
        examples = load_examples(t.data, tok, t.seq_len, chat_template, split="dev", n=t.dev_items)
    else:
        return None
    return DevSet(examples, FeatureCache(model, examples, out / "dev_features.pt", bf16=t.bf16).h)


def _plot_log(log: TrainLog, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    a.plot(log.tokens_seen, log.loss, label="train (batch)")
    if log.main_loss:
        a.plot(log.tokens_seen[-len(log.main_loss) :], log.main_loss, label="train, main stream")
    if log.dev_loss:  # tokens seen by the end of each scored step
        at = [log.tokens_seen[s - 1] for s in log.dev_steps]
        a.plot(at, log.dev_loss, "o-", label="dev")
        if log.dev_main_loss and len(log.dev_main_loss) == len(at):
            a.plot(at, log.dev_main_loss, "s-", label="dev, main stream")
    a.legend()
    a.set_xlabel("response tokens seen")
    a.set_ylabel("loss")
    for j in range(len(log.depth_acc[0]) if log.depth_acc else 0):
        b.plot(log.tokens_seen, [x[j] for x in log.depth_acc], label=f"depth {j + 1}")
    b.set_xlabel("response tokens seen")
    b.set_ylabel("top-1 accuracy (batch)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
