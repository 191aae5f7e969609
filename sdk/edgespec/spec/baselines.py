"""Baselines that draft through the same tree verifier as the streams.

- Medusa-1-style heads: on the frozen base model's final hidden state h, head j predicts
  the token j+1 steps after the next one as lm_head(h + SiLU(W_j h + b_j)) (a residual
  block per head). The lm head is the base model's, frozen and shared by the heads (the
  original Medusa-1 gives each head its own trainable copy: 49152 x 576 = 28.3M parameters
  per head for this model; both counts are reported).
- Prompt lookup: no training; the draft continues the most recent earlier occurrence of
  the context's last n-gram (n = 3, 2, 1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgespec.models.llama import Transformer
from edgespec.spec.msa import MSAConfig, SpecModel, frozen_layers, topk_draft
from edgespec.spec.tree import Tree


class MedusaHeads(nn.Module):
    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.cfg = MSAConfig(gamma=n_heads, n_layers=0, lora_rank=0)
        self.blocks = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_heads))
        for b in self.blocks:
            nn.init.zeros_(b.weight)
            nn.init.zeros_(b.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """[..., d] -> [..., n_heads, d] (inputs of the shared lm head)."""
        return torch.stack([h + F.silu(b(h)) for b in self.blocks], -2)


class MedusaModel(nn.Module):
    """Frozen base + heads, with the training interface of `SpecModel`.

    Features are cached at the same layer L0 as the streams' (so both baselines train from
    one feature cache); a step runs the frozen top layers without gradients, then the heads.
    """

    def __init__(self, base: Transformer, heads: MedusaHeads, n_top_layers: int = 4):
        super().__init__()
        self.base, self.params, self.cfg = base, heads, heads.cfg
        self.first = max(0, base.args.n_layers - n_top_layers)

    def lower_hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        return frozen_layers(self.base, self.base.tok_embeddings(tokens), 0, self.first)

    def forward_train(self, tokens: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            h = self.base.norm(frozen_layers(self.base, h0, self.first, self.base.args.n_layers))
        return h, self.params(h)

    def drafter(self):
        def draft(main_h, stream_h, context, tree: Tree):
            return topk_draft(self.base, self.params(main_h), tree)

        return draft

    def verifier(self) -> SpecModel:
        return SpecModel(self.base, None)


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


def prompt_lookup_drafter(max_ngram: int = 3):
    """Draft by copying what followed the last earlier occurrence of the context's tail."""

    def draft(main_h, stream_h, context: list[int], tree: Tree) -> torch.Tensor:
        g, k = len(tree.branching), max(tree.branching)
        found = lookup_continuation(context, g, max_ngram)
        found = found + [context[-1]] * (g - len(found))
        return torch.tensor(found)[:, None].expand(g, k).clone()

    return draft


def medusa_parameter_count(dim: int, vocab: int, n_heads: int, own_lm_head: bool) -> int:
    per_head = dim * dim + dim + (dim * vocab if own_lm_head else 0)
    return n_heads * per_head


def with_lookup(draft: torch.Tensor, continuation: list[int]) -> torch.Tensor:
    """Put a lookup continuation first at each depth of a [D, k] draft, keeping the draft's
    other candidates after it (distinct per depth, as lossless sampling needs)."""
    out = draft.clone()
    k = draft.shape[1]
    for d, tok in enumerate(continuation[: draft.shape[0]]):
        rest = [t for t in draft[d].tolist() if t != tok]
        out[d] = torch.tensor([tok, *rest][:k])
    return out
