"""What every drafter shares: the frozen base layers it trains over, the positions of its
drafting rows in teacher forcing, its parameter count, and `NoDrafter`, the drafting model
of a program whose draft the host fills (prompt or suffix lookup).

The drafters themselves live one per module: `edgespec.speculative.streams` (Speculative
Streaming), `edgespec.speculative.medusa` (Medusa and Hydra heads), `edgespec.speculative.eagle`
(an EAGLE-style draft layer); `edgespec.speculative.drafters` builds and loads them.
"""

from __future__ import annotations

import torch
from torch import nn

from edgespec.models.llama import Transformer


def draft_positions(start: int | torch.Tensor, batch: int, T: int, length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions [B, L] of the drafting rows in teacher forcing when sequence b's rows start
    at start_b (an int for all, or [B]), L = `length` or T - min(start), clamped to T - 1;
    and which of them are not clamped repeats [B, L]."""
    starts = torch.as_tensor(start).expand(batch)
    L = length if length is not None else T - int(starts.min())
    rows = starts[:, None] + torch.arange(L)
    return rows.clamp(max=T - 1), rows <= T - 1


@torch.no_grad()
def frozen_layers(base: Transformer, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Base layers [start, stop) over teacher-forced rows x [B, T, d], no adapters, no cache."""
    cos, sin = base.rope(torch.arange(x.shape[1]))
    return base.run_layers(x, start, stop, 0, cos, sin, kvs=base.new_kvs(x.shape[0], cos.dtype))


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


class NoDrafter(nn.Module):
    """The drafting model of plain tree verification: nothing drafted in the program, the
    host fills every draft (prompt lookup, suffix matches). A
    `edgespec.speculative.drafters.Drafter` without parameters; the base model untouched."""

    params = None
    cfg = None
    draft_layers = 0
    chains_only = False

    def __init__(self, base: Transformer):
        super().__init__()
        self.base = base
        self.first = base.args.n_layers
        self.taps = (self.first,)  # the top layer's output: features nothing reads

    def main_lora(self, i: int) -> None:
        return None  # the main stream is the untouched base model

    def prefill(self, feats, tokens, input_pos, start_pos) -> None:
        return None

    def draft(self, v, depth: int, head) -> None:
        return None  # the host drafts
