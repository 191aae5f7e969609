"""The draft vocabulary: the streams' lm head over the N most frequent tokens only.

Drafting rows need a cheap lm head more than a complete one (FR-Spec, EAGLE-3): a draft is
a guess the full-vocabulary verification then checks, so restricting the drafts to
frequent tokens never changes an output, it only loses the drafts of rare tokens. The
step's stream rows then multiply against an N-row slice of the tied embedding instead of
the whole [V, d] head, and top-k scans N logits instead of V.
"""

from __future__ import annotations

import torch
from torch import nn

from edgespec.quant import QuantPolicy


def frequent_tokens(counts: torch.Tensor, n: int, always: tuple[int, ...] = ()) -> torch.Tensor:
    """Ids [min(n, V)], ascending, of the n most frequent tokens by counts [V] (ties: lower id
    first); the ids in `always` (e.g. EOS) are included whatever their count."""
    V = counts.shape[0]
    n = min(n, V)
    score = counts.double().clone()
    if always:
        score[list(always)] = float("inf")
    order = torch.sort(-score, stable=True).indices  # most frequent first, lower id on ties
    return order[:n].sort().values


def draft_vocabulary(src, n: int) -> torch.Tensor | None:
    """The draft vocabulary of n tokens for a model source `src` (None for n = 0): the most
    frequent tokens of the training corpus's prompts and references, then the lowest ids
    (BPE merge order) for tokens the corpus never shows; EOS always included."""
    if not n:
        return None
    from edgespec.corpus.counts import corpus_token_counts
    from edgespec.models.load import tokenizer_of

    counts = corpus_token_counts(tokenizer_of(src).encode, src.args.vocab_size)
    return frequent_tokens(counts, n, tuple(src.eos_ids))


class DraftHead(nn.Module):
    """lm head rows `ids` [N] of `head` [V, d] as a Linear of its own (quantized like the base
    model's linears), with the id map to full-vocabulary tokens."""

    # a slice of the lm head that only drafts: 4-bit whatever the head's precision (a cheaper
    # draft; verification uses the full head)
    quant_policy = QuantPolicy(head_bits=4)

    def __init__(self, head: torch.Tensor, ids: torch.Tensor):
        super().__init__()
        self.output = nn.Linear(head.shape[1], ids.shape[0], bias=False)
        with torch.no_grad():
            self.output.weight.copy_(head.detach().index_select(0, ids))
        self.register_buffer("ids", ids.clone(), persistent=False)

    def topk(self, hidden: torch.Tensor, k: int) -> torch.Tensor:
        """Full-vocabulary ids [D, k] of the k best draft-vocabulary tokens per row of hidden [D, d]."""
        logits = self.output(hidden)  # [D, N]
        local = logits.argmax(-1, keepdim=True) if k == 1 else logits.topk(k, -1).indices  # argmax: cheaper scan
        return self.ids.index_select(0, local.reshape(-1)).reshape(local.shape)


def restrict_ranks(sub: torch.Tensor, target: torch.Tensor, ids: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """Rank of each target token (0 = the argmax) among the logits a drafting head computes:
    sub [..., N] over the draft vocabulary `ids` [N] (or over all `vocab_size` tokens when ids
    is None); a target outside the draft vocabulary gets a rank no tree accepts."""
    if ids is None:
        return (sub > sub.gather(-1, target[..., None])).sum(-1)
    local = torch.full((vocab_size,), -1, dtype=torch.long)
    local[ids] = torch.arange(len(ids))
    at = local[target]  # the target's index in the draft vocabulary, -1 outside
    own = sub.gather(-1, at.clamp(min=0)[..., None])  # its own logit, from the same product
    return torch.where(at >= 0, (sub > own).sum(-1), torch.full_like(target, 10**6))
