"""Training data of a drafter: sequences read from distillation output or text pairs, the
epoch order and the padded batches with each stream's targets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass
class TrainExample:
    tokens: list[int]
    n_prompt: int
    # the teacher's top-K at each response position (row r predicts tokens[n_prompt + r]):
    # ids [R, K] int, probabilities [R, K]; None for hard labels only
    topk_ids: torch.Tensor | None = None
    topk_p: torch.Tensor | None = None
    cut: bool = False  # a self-distilled row whose response was cut to seq_len


TASK_PREFIX = "task:"  # train.data naming a task's gold training split (edgespec.corpus.task_data)


def load_examples(path: str | Path, tokenizer, seq_len: int, chat_template: bool, split: str = "train", n: int | None = None) -> list[TrainExample]:
    """Self-distilled rows (prompt_ids/response_ids: a JSONL file from `edgespec distill
    --bundle`, or a directory of shards from `edgespec distill --source`) or text pairs
    (prompt/response: a JSONL file, or ``task:NAME``, a split of a task's gold data, built
    now from installed data: `split`, its first `n` items); the prompt in the chat template
    when `chat_template`, as `encode_prompt`.

    A text pair must fit seq_len whole (prompt in its template, response and its end-of-turn
    token: cut, it would teach the model not to stop): one that does not is an error naming
    it and the seq_len that fits all. A self-distilled row (a generation that stopped at a
    token budget, not necessarily at its end) is cut to seq_len and marked `cut`."""
    from edgespec.corpus.distill import read_shards
    from edgespec.corpus.prompts import iter_jsonl
    from edgespec.errors import EdgespecError
    from edgespec.models.tokenizer import encode_prompt

    if str(path).startswith(TASK_PREFIX):
        from edgespec.corpus.task_data import task_examples

        items = task_examples(str(path)[len(TASK_PREFIX) :], split, n)  # type: ignore[arg-type]
        rows = ((k, {"prompt": e.prompt, "response": e.reference}) for k, e in enumerate(items, 1))
    elif Path(path).is_dir():
        rows = ((k, row) for k, row in enumerate(read_shards(path), 1))
    else:
        rows = iter_jsonl(path, skip_torn=True)
    out, too_long = [], []
    for line, row in rows:
        if "prompt_ids" in row:
            prompt, resp = row["prompt_ids"], row["response_ids"]
        elif "prompt" in row and "response" in row:
            prompt = encode_prompt(tokenizer, row["prompt"], chat_template)
            # a gold answer ends with the end of its turn, as distilled ones end with the EOS the
            # model gave: without it a fine-tune never learns to stop
            resp = tokenizer.encode(row["response"]) + list(tokenizer.eos_ids[:1])
        else:
            raise EdgespecError(f"{path}:{line}: expected prompt_ids/response_ids or prompt/response")
        if resp and "prompt" in row and len(prompt) + len(resp) > seq_len:
            too_long.append((line, len(prompt) + len(resp)))
        elif resp:
            tokens = (prompt + resp)[:seq_len]
            n_resp = max(0, len(tokens) - len(prompt))
            topk_ids, topk_p = (row["topk_ids"][:n_resp], row["topk_p"][:n_resp]) if "topk_ids" in row else (None, None)
            out.append(TrainExample(tokens, len(prompt), topk_ids, topk_p, cut=len(prompt) + len(resp) > seq_len))
    if too_long:
        task = str(path).startswith(TASK_PREFIX)
        where, label = ("item", f"'{path}' ({split} split)") if task else ("line", f"'{path}'")
        first = ", ".join(f"{where} {k} ({n} tokens)" for k, n in too_long[:3])
        raise EdgespecError(
            f"training data {label}: {len(too_long)} prompt/response pair(s) do not fit train.seq_len={seq_len} whole "
            f"(prompt in its chat template, response and end-of-turn token): {first}{', ...' if len(too_long) > 3 else ''}; "
            f"set train.seq_len to at least {max(n for _, n in too_long)}, or leave those pairs out"
        )
    if not out:
        raise EdgespecError(f"training data '{path}' holds no usable rows (make it with `edgespec distill`)")
    return out


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


def make_batch(examples: list[TrainExample], feats: list[torch.Tensor], idx: list[int], depth: int):
    """Right-padded tokens [B, T], features [B, T, d], main targets [B, T], the drafting
    rows' targets [B, T, depth] (-100 = ignore), and the teacher's top-K for the main target
    (index 0) and each draft depth's target (index 1 + j): ids and probabilities
    [B, T, 1 + depth, K] (probability 0 where there is none), or None, None when no example
    carries soft labels."""
    T = max(len(examples[i].tokens) for i in idx)
    d = feats[idx[0]].shape[-1]
    B = len(idx)
    tokens = torch.zeros(B, T, dtype=torch.long)
    h0 = torch.zeros(B, T, d)
    main_t = torch.full((B, T), -100, dtype=torch.long)
    stream_t = torch.full((B, T, depth), -100, dtype=torch.long)
    K = next((examples[i].topk_ids.shape[1] for i in idx if examples[i].topk_ids is not None), 0)
    soft_ids = torch.zeros(B, T, 1 + depth, K, dtype=torch.long)
    soft_p = torch.zeros(B, T, 1 + depth, K)
    for b, i in enumerate(idx):
        e = examples[i]
        n = len(e.tokens)
        seq = torch.tensor(e.tokens)
        tokens[b, :n] = seq
        h0[b, :n] = feats[i].float()
        # the main stream at t predicts t+1; draft depth j predicts t+1+j; only response tokens count
        for j in range(depth + 1):
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
