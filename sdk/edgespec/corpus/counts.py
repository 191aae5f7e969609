"""Token frequencies of the training corpus (for the streams' draft vocabulary)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from edgespec.corpus.prompts import mixed_prompts


def corpus_token_counts(encode: Callable[[str], list[int]], vocab_size: int, n_prompts: int = 3000) -> torch.Tensor:
    """Counts [V] of every token in the training split's prompts and reference answers
    (`mixed_prompts("train", n_prompts)`): deterministic, read from the installed packages."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for p in mixed_prompts("train", n_prompts):
        text = p.text if p.reference is None else f"{p.text}\n{p.reference}"
        ids = torch.tensor(encode(text), dtype=torch.long)
        counts += torch.bincount(ids, minlength=vocab_size)[:vocab_size]
    return counts
