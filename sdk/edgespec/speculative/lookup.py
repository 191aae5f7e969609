"""Prompt lookup: draft by copying what followed the most recent earlier occurrence of the
context's last n-gram (no training, no parameters). Verification is exact, so a lookup draft
never changes the output, only how many tokens a call emits."""

from __future__ import annotations

import torch


def lookup_continuation(context: list[int], length: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """What followed the last earlier occurrence of the context's longest tail n-gram
    (max_ngram down to min_ngram); at most `length` tokens, [] when nothing matches."""
    ctx = torch.tensor(context)
    for n in range(min(max_ngram, len(context) - 1), min_ngram - 1, -1):
        tail = ctx[-n:]
        windows = ctx[:-1].unfold(0, n, 1)  # every earlier n-gram start (excluding the tail itself)
        hits = (windows == tail).all(1).nonzero().flatten()
        hits = hits[hits + n < len(context)]
        if len(hits):
            start = int(hits[-1]) + n
            return context[start : start + length]
    return []


def with_lookup(draft: torch.Tensor, continuation: list[int]) -> torch.Tensor:
    """Put a lookup continuation first at each depth of a [D, k] draft, keeping the draft's
    other candidates after it (distinct per depth, as lossless sampling needs)."""
    out = draft.clone()
    k = draft.shape[1]
    for d, tok in enumerate(continuation[: draft.shape[0]]):
        rest = [t for t in draft[d].tolist() if t != tok]
        out[d] = torch.tensor([tok, *rest][:k])
    return out
