"""Heads on the final hidden state: the Medusa-1 baseline and sequentially dependent
(Hydra-style) heads; both go through the same trainer, replay and tree verifier as the streams.

- Medusa-1 heads: on the frozen base model's final hidden state h, head j predicts the
  token j+1 steps after the next one as lm_head(h + SiLU(W_j h + b_j)) (a residual block
  per head, all heads independent). The lm head is the base model's, frozen and shared by
  the heads (the original Medusa-1 gives each head its own trainable copy: 49152 x 576 =
  28.3M parameters per head for this model; both counts are reported).
- Hydra heads (Ankner et al., 2024: draft heads that see the tokens drafted before them):
  a state starts at s_0 = h and takes one token per depth,

      s_{j+1} = s_j + SiLU(W_j [s_j ; e(x_{j+1})] + b_j)        logits_j = lm_head(s_{j+1})

  where x_1 is the token the main model emits at that position (known when drafting: the
  call's last emitted token) and x_{j+1} for j >= 1 the head's own previous draft (in
  training, teacher forcing: the true tokens). e is the base model's (frozen) embedding.
  Head 1 thus knows the next token instead of guessing it, and each head the draft it
  continues. Drafting runs the heads one after the other (D tiny blocks and D one-row
  drafting-head calls); for a chain tree teacher-forced replay is exact, since a depth is
  only reached when every draft before it was the true token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgespec.config import DrafterConfig
from edgespec.models.llama import Transformer
from edgespec.quant import QuantPolicy
from edgespec.speculative.common import draft_positions, frozen_layers


class MedusaHeads(nn.Module):
    quant_policy = QuantPolicy(weights="float")  # small blocks on the hidden state: they follow the activations' dtype

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


class HydraHeads(nn.Module):
    quant_policy = QuantPolicy(weights="int8")  # 8-bit blocks where the model is 8da (drafts only: verification stays exact)

    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.blocks = nn.ModuleList(nn.Linear(2 * dim, dim) for _ in range(n_heads))
        for b in self.blocks:  # zero: every head starts as the main model's own prediction
            nn.init.zeros_(b.weight)
            nn.init.zeros_(b.bias)

    def step(self, j: int, s: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """s_{j+1} from state s [..., d] and the embedding e [..., d] of token x_{j+1}."""
        return s + F.silu(self.blocks[j](torch.cat([s, e], -1)))

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """h [..., d], e [..., n_heads, d] (embeddings of x_1..x_g) -> [..., n_heads, d]."""
        s, out = h, []
        for j in range(self.n_heads):
            s = self.step(j, s, e[..., j, :])
            out.append(s)
        return torch.stack(out, -2)


class MedusaModel(nn.Module):
    """Frozen base + Medusa-1 heads, a `edgespec.speculative.drafters.Drafter`: the training
    interface of the streams' `StreamsModel` and the drafting interface of
    `edgespec.speculative.step.SpecProgram` (so the heads decode through the same step and
    tree verifier as the streams).

    Features are cached at the same layer L0 as the streams' (so both baselines train from
    one feature cache); a step runs the frozen top layers without gradients, then the heads.
    """

    DRAFTER = "medusa"
    chains_only = False  # tune: every tree's acceptance is replayed exactly

    def __init__(self, base: Transformer, heads: nn.Module, n_top_layers: int = 4):
        super().__init__()
        n_top_layers = min(n_top_layers, base.args.n_layers)
        self.base, self.params = base, heads
        # draft_depth heads over features cached at the streams' layer L0 (no adapters, chain drafts)
        self.cfg = DrafterConfig(kind=self.DRAFTER, draft_depth=heads.n_heads, n_layers=n_top_layers, lora_rank=0, tree=(1,) * heads.n_heads)
        self.first = base.args.n_layers - n_top_layers
        self.taps = (self.first,)
        self.draft_layers = 0  # a head is one block on the final hidden state, no decoder layers

    def lower_hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        return frozen_layers(self.base, self.base.embed(tokens), 0, self.first)

    def forward_train(
        self, tokens: torch.Tensor, h0: torch.Tensor | None = None, start: int | torch.Tensor = 0, length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(main final hidden [B, T, d], head inputs [B, L, g, d] at `draft_positions`); see `StreamsModel.forward_train`."""
        if h0 is None:
            h0 = self.lower_hidden(tokens)
        with torch.no_grad():
            h = self.base.norm(frozen_layers(self.base, h0, self.first, self.base.args.n_layers))
        rows, _ = draft_positions(start, *tokens.shape, length)
        return h, self.head_inputs(h.gather(1, rows[:, :, None].expand(*rows.shape, h.shape[-1])), tokens, rows)

    def head_inputs(self, h_rows: torch.Tensor, tokens: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Inputs of the shared lm head [B, L, g, d] from the final hidden states at rows [B, L]."""
        return self.params(h_rows)

    def main_lora(self, i: int) -> None:
        return None  # the main stream is the untouched base model

    def draft_hidden(self, h0: torch.Tensor, h: torch.Tensor, last: torch.Tensor, start_pos, depth: int) -> torch.Tensor:
        """Inputs of the shared lm head for depths 1..depth from the final hidden state of
        row `last` [1] of h [R, d]: [depth, d]."""
        return self.params(h.index_select(0, last)[0])[:depth]

    def prefill(self, feats, tokens, input_pos, start_pos) -> None:
        return None  # heads keep no state between calls

    def draft(self, v, depth: int, head) -> torch.Tensor:
        """The next draft [depth, k] (`edgespec.speculative.step.Verified` v): the program's
        drafting `head` over the heads' outputs."""
        return head(self.draft_hidden(v.feats, v.h, v.last, v.start_pos, depth))


class HydraModel(MedusaModel):
    """Frozen base + Hydra heads: Medusa's training and drafting interface, each head also
    fed the token before its target (`HydraHeads`)."""

    DRAFTER = "hydra"
    chains_only = True  # a depth's draft continues the top-1 of the depth before

    def head_inputs(self, h_rows: torch.Tensor, tokens: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        # head j at row t continues x_1..x_{j+1} = tokens t+1..t+1+j (past the end: the last
        # token; those rows have no target)
        g, T = self.params.n_heads, tokens.shape[1]
        idx = (rows[:, :, None] + 1 + torch.arange(g)).clamp(max=T - 1)  # [B, L, g]
        with torch.no_grad():
            e = self.base.embed(tokens.gather(1, idx.flatten(1)).view(idx.shape))  # [B, L, g, d]
        return self.params(h_rows, e.to(h_rows.dtype))

    def draft_hidden(self, h0, h, last, start_pos, depth):
        raise NotImplementedError("Hydra heads draft one depth after the other: use draft()")

    def draft(self, v, depth: int, head) -> torch.Tensor:
        """The next draft [depth, k], depth after depth: each head continues the drafting
        head's top-1 of the one before (the first, the emitted token `v.bonus` [1])."""
        s, tok, out = v.h.index_select(0, v.last), v.bonus, []  # [1, d], [1]
        for j in range(depth):
            s = self.params.step(j, s, self.base.embed(tok))
            ids = head(s)  # [1, k]
            out.append(ids)
            tok = ids[:, 0]
        return torch.cat(out, 0)


def medusa_parameter_count(dim: int, vocab: int, n_heads: int, own_lm_head: bool) -> int:
    per_head = dim * dim + dim + (dim * vocab if own_lm_head else 0)
    return n_heads * per_head
