"""The drafter's training loss: L = a0 * CE(next token) + sum_j a_j * CE(token t+1+j), with
a_j = `train.depth_weights[j - 1]` (draft depth j) and a0 = `train.main_weight`.

Lossless mode trains only drafting parameters; the main stream is frozen, so its
next-token term is constant and is skipped (a0 counts in shared mode only).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgespec.config import TrainConfig
from edgespec.speculative.common import draft_positions
from edgespec.speculative.drafters import Drafter


class DraftLoss(nn.Module):
    """forward(batch) -> (loss, main stream's CE, per-depth losses, per-depth top-1 accuracy);
    the module DDP wraps. The main stream's CE is its next-token loss in shared mode (NaN in
    lossless mode, where the main stream is the frozen base and is not trained).

    A stream's loss is (1 - b) * CE(hard target) + b * CE(teacher's top-K, renormalized),
    b = `soft_weight`, the second term only where the batch carries soft labels; in shared mode
    the main stream's next-token loss (weight a0) is mixed the same way, its top-K term a KL
    to the original model truncated to K tokens. With a draft
    vocabulary (`draft_ids`, the program's drafting head) the streams' logits cover only those
    tokens, as in the program: a target outside it is left out of the loss and counts as a
    miss in the accuracy. bf16: the MSA layers and the lm head run under bf16 autocast."""

    def __init__(self, model: Drafter, hp: TrainConfig, draft_ids: torch.Tensor | None = None):
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

    def forward(self, tokens, h0, main_t, stream_t, soft_ids=None, soft_p=None, depth_scale: float = 1.0):
        """depth_scale multiplies every depth weight (`train.depth_ramp_steps`)."""
        # stream rows only over each sequence's positions with a target (its response)
        B, T, _ = stream_t.shape
        has = (stream_t != -100).any(-1)  # [B, T]
        starts = torch.where(has.any(1), has.float().argmax(1), T - 1)
        ends = T - has.flip(1).float().argmax(1)  # one past the last position with a target
        length = max(1, int((ends - starts).max()))
        rows, fresh = draft_positions(starts, B, T, length)  # [B, L]

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
        w = self.hp.depth_weights
        losses, accs = [], []
        total = torch.zeros(())
        for j in range(g):
            sj = (None, None) if soft_ids is None else (soft_ids[:, :, j], soft_p[:, :, j])
            lj, aj = self._ce(stream_h[:, :, j], stream_t[:, :, j], *sj, head=head)
            total = total + depth_scale * w[j] * lj
            losses.append(lj.detach())
            accs.append(aj.detach())
        main = torch.full((), float("nan"))
        if self.model.cfg.mode == "shared":
            # the teacher's top-K is the original model's distribution truncated to K tokens: its
            # CE term is the KL to it up to a constant (the tail outside the top K is not kept)
            l0, _ = self._ce(main_h, main_t, *main_soft)
            total = total + self.hp.main_weight * l0
            main = l0.detach()
        return total, main, torch.stack(losses), torch.stack(accs)
