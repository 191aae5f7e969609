"""Context drafts (prompt lookup) in the step's draft: the continuation an earlier occurrence
of the context's suffix suggests (`edgespec.speculative.suffix`), put first at each depth.
Verification is exact, so a lookup draft never changes the output, only how many tokens a
call emits."""

from __future__ import annotations

import torch


def with_lookup(draft: torch.Tensor, continuation: list[int]) -> torch.Tensor:
    """Put a lookup continuation first at each depth of a [D, k] draft, keeping the draft's
    other candidates after it (distinct per depth, as lossless sampling needs)."""
    out = draft.clone()
    k = draft.shape[1]
    for d, tok in enumerate(continuation[: draft.shape[0]]):
        rest = [t for t in draft[d].tolist() if t != tok]
        out[d] = torch.tensor([tok, *rest][:k])
    return out
