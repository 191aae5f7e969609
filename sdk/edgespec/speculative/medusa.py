"""Medusa-1 heads: the baseline drafter that goes through the same tree verifier as the streams.

- Medusa-1-style heads: on the frozen base model's final hidden state h, head j predicts
  the token j+1 steps after the next one as lm_head(h + SiLU(W_j h + b_j)) (a residual
  block per head). The lm head is the base model's, frozen and shared by the heads (the
  original Medusa-1 gives each head its own trainable copy: 49152 x 576 = 28.3M parameters
  per head for this model; both counts are reported).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgespec.config import StreamsConfig
from edgespec.models.llama import Transformer
from edgespec.speculative.streams import frozen_layers, stream_positions


class MedusaHeads(nn.Module):
    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.blocks = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_heads))
        for b in self.blocks:
            nn.init.zeros_(b.weight)
            nn.init.zeros_(b.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """[..., d] -> [..., n_heads, d] (inputs of the shared lm head)."""
        return torch.stack([h + F.silu(b(h)) for b in self.blocks], -2)


class MedusaModel(nn.Module):
    """Frozen base + heads, with the training interface of `SpecModel` and the drafting
    interface of `edgespec.speculative.step.SpecProgram` (so the heads decode through the same
    step and tree verifier as the streams).

    Features are cached at the same layer L0 as the streams' (so both baselines train from
    one feature cache); a step runs the frozen top layers without gradients, then the heads.
    """

    def __init__(self, base: Transformer, heads: MedusaHeads, n_top_layers: int = 4):
        super().__init__()
        n_top_layers = min(n_top_layers, base.args.n_layers)
        self.base, self.params = base, heads
        # gamma heads over features cached at the streams' layer L0 (no adapters, chain drafts)
        self.cfg = StreamsConfig(gamma=heads.n_heads, n_layers=n_top_layers, lora_rank=0, tree=(1,) * heads.n_heads)
        self.first = base.args.n_layers - n_top_layers

    def lower_hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        return frozen_layers(self.base, self.base.tok_embeddings(tokens), 0, self.first)

    def forward_train(
        self, tokens: torch.Tensor, h0: torch.Tensor | None = None, start: int | torch.Tensor = 0, length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(main final hidden [B, T, d], head inputs [B, L, g, d] at `stream_positions`); see `SpecModel`."""
        if h0 is None:
            h0 = self.lower_hidden(tokens)
        with torch.no_grad():
            h = self.base.norm(frozen_layers(self.base, h0, self.first, self.base.args.n_layers))
        rows, _ = stream_positions(start, *tokens.shape, length)
        return h, self.params(h.gather(1, rows[:, :, None].expand(*rows.shape, h.shape[-1])))

    def main_lora(self, i: int) -> None:
        return None  # the main stream is the untouched base model

    def draft_hidden(self, h0: torch.Tensor, h: torch.Tensor, last: torch.Tensor, start_pos, depth: int) -> torch.Tensor:
        """Inputs of the shared lm head for depths 1..depth from the final hidden state of
        row `last` [1] of h [R, d]: [depth, d]."""
        return self.params(h.index_select(0, last)[0])[:depth]


def medusa_parameter_count(dim: int, vocab: int, n_heads: int, own_lm_head: bool) -> int:
    per_head = dim * dim + dim + (dim * vocab if own_lm_head else 0)
    return n_heads * per_head
