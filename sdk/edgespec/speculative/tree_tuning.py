"""Choose the draft tree by measurement: expected tokens/s = tokens per call / cost per call.

Cost model (per verify-and-draft call, on the device at hand):

    t_step(tree) = t_fwd(R + D * m / N) + t_extra

t_fwd(n) is the program's own `forward` over n rows at the tuning context, measured at
n = 1, 2, 4, 8 (`edgespec.runtime.speed.forward_curve`) and interpolated piecewise linearly (extrapolated from the last segment past 8):
the cost curve is not a line (XNNPACK's int4 GEMM runs one kernel for 1 row and an 8-row
kernel for 2 to 8 rows, so rows 2..8 cost about what 2 cost in the linear layers). A call is
R tree rows through all N layers plus D stream rows through the m MSA layers (m = 0 for
heads); t_extra is what the step adds beyond its rows (acceptance, KV compaction, drafting
head), solved from one measurement of the bundle's own `spec_step`
(`edgespec.runtime.speed.step_cost`). Timing every tree
directly would need one program per tree (an export each).

Acceptance model (greedy): a product tree with branching (k_1..k_D) accepts depth d at
position t iff the true token at t+1+i is within the top-k_i of stream i for every i <= d.
So one teacher-forced pass over greedy continuations gives, at every position, the rank of
the true future token in each stream; the decode is then replayed for any tree: from t, a
call emits 1 + (accepted depth) tokens and jumps there. Mean tokens per call is exact for
greedy decoding of those continuations (up to program-vs-eager numerics).

Hybrid drafts (`generate(lookup=N)`: the suffix match's continuation over prompt and output
replaces a chain's draft when the match is at least N tokens) are replayed the same way, call
by call with a `SuffixMatcher` over the continuation (`replay_with_context`), for chains only:
a chain's accepted depth at each position comes from the ranks, the suffix draft's from the
text itself.

`edgespec.harness.tune.tune_bundle` measures and runs all of it for a bundle (`edgespec tune`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from edgespec.speculative.drafters import Drafter
from edgespec.speculative.suffix import SuffixMatcher
from edgespec.speculative.tree import Tree, placeholder_draft
from edgespec.speculative.vocab import restrict_ranks


@torch.no_grad()
def future_ranks(
    model: Drafter,
    sequences: list[tuple[int, list[int]]],
    depth: int,
    vocab: torch.Tensor | None = None,
    features: list[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """For each (prompt_len, ids): [n_positions, depth] rank of the true token t+1+d in stream d
    at every completion position t (from the last prompt row on); with a draft vocabulary
    `vocab` [N] the rank counts only its tokens (logits over those N only, as the drafting
    head computes them), and a token outside it is never drafted. features: the sequences'
    layer-L0 inputs [T, d] when already computed (a `FeatureCache`); streams run only over
    the completion's rows."""
    weight = model.base.output.weight
    head = weight if vocab is None else weight.index_select(0, vocab)
    out = []
    for i, (prompt_len, ids) in enumerate(sequences):
        T = len(ids)
        start = prompt_len - 1
        n = max(0, T - 2 - start)  # a call from row t emits ids[t + 2:]
        h0 = None if features is None else features[i][None].float()
        _, streams = model.forward_train(torch.tensor([ids]), h0, start, max(1, n))  # [1, L, g, d], rows t = start..
        sub = F.linear(streams[0, :n, :depth], head)  # [n, D, N]
        t = torch.arange(start, start + n)
        j = t[:, None] + 2 + torch.arange(depth)  # stream d (0-based) at t predicts token t + 2 + d
        target = torch.tensor(ids + [0] * (depth + 2))[j]  # [n, D]
        ranks = restrict_ranks(sub, target, vocab, weight.shape[0])
        out.append(ranks.masked_fill(j >= T, 10**6))  # past the end: never accepted
    return out


def replay_calls(ranks: torch.Tensor, branching: tuple[int, ...]) -> list[int]:
    """Tokens emitted by each call of greedy tree decoding over one sequence's ranks.

    Row t is the last accepted node; the call emits its accepted drafts and the bonus token,
    1 + (accepted depth) tokens, and the next call starts n rows later."""
    k = torch.tensor(branching)
    ok = (ranks[:, : len(branching)] < k).long().cumprod(1).sum(1).tolist()  # accepted depth per row
    calls, t = [], 0
    while t < len(ok):
        n = min(1 + ok[t], len(ok) - t)  # the sequence ends
        calls.append(n)
        t += n
    return calls


def replay(ranks: list[torch.Tensor], branching: tuple[int, ...]) -> tuple[float, int]:
    """Mean tokens per call over all sequences; (mean, calls)."""
    calls = [n for r in ranks for n in replay_calls(r, branching)]
    return sum(calls) / max(1, len(calls)), len(calls)


def accepted_depths(ranks: torch.Tensor, depth: int) -> list[int]:
    """Per row of `future_ranks` (row p: the call whose root is completion token p): the depth a
    chain of `depth` accepts there, i.e. how many leading depths have the true token as top-1."""
    return (ranks[:, :depth] == 0).long().cumprod(1).sum(1).tolist()


ContextFill = Callable[[SuffixMatcher, list[int], int], tuple[int, int]]
"""(matcher over the context so far, the true continuation, the drafter chain's accepted depth)
-> (accepted drafts, tree rows) of one call: one way of filling a call's tree."""


def replay_with_context(prompt: list[int], completion: list[int], accepted: list[int], fill: ContextFill, depth: int) -> list[tuple[int, int]]:
    """(tokens emitted, tree rows) of each call of greedy decoding over one continuation, as the
    decode loop makes them: the first completion token comes from the prefill, then the call whose
    root is completion[p] verifies drafts of completion[p + 1:] (accepted[p]: what the drafter's
    chain of `depth` accepts there, `accepted_depths`; the first call's draft is the
    placeholder, as no call drafted before it)."""
    m = SuffixMatcher(prompt + completion[:1])
    placeholder = placeholder_draft(depth, 1)[:, 0].tolist()
    calls, p, fed = [], 0, 1
    while p + 1 < len(completion):
        while fed <= p:
            m.extend(completion[fed])
            fed += 1
        truth = completion[p + 1 :]
        drafted = accepted[p] if p else matched_prefix(placeholder, truth)
        a, rows = fill(m, truth, drafted)
        n = min(1 + a, len(truth))
        calls.append((n, rows))
        p += n
    return calls


def matched_prefix(chain: list[int], truth: list[int]) -> int:
    """How many leading tokens of a drafted chain greedy verification accepts."""
    a = 0
    while a < len(chain) and a < len(truth) and chain[a] == truth[a]:
        a += 1
    return a


def hybrid_fill(depth: int, min_match: int) -> ContextFill:
    """`generate(lookup=min_match)` on a chain of `depth`: the suffix match's continuation when
    the match is at least min_match tokens, else the drafter's chain (min_match 0: always).

    A continuation c < depth tokens long fills the first c depths (`with_lookup`), the drafter's
    own tokens the rest: past a fully accepted continuation the chain goes on accepting as far as
    the drafter's own chain does (its depths past c continue its own first c, which equal the
    continuation when the drafter accepts them; a drafter that missed them is taken to miss
    what follows, the one approximation)."""

    def fill(m: SuffixMatcher, truth: list[int], a: int) -> tuple[int, int]:
        chain = m.draft(depth, min_match)[0] if min_match else []
        if not chain:
            return a, 1 + depth
        got = matched_prefix(chain, truth)
        return (max(got, a) if got == len(chain) else got), 1 + depth

    return fill


def replay_lookup(continuations: list[tuple[list[int], list[int]]], ranks: list[torch.Tensor], depth: int, lookups=(0, 1, 2, 3, 4)) -> dict[int, float]:
    """Mean tokens per call of a chain of `depth` with each hybrid draft `lookups` (0: the
    drafter alone) over (prompt, completion) continuations and their `future_ranks`."""
    out = {}
    for n in lookups:
        calls = [
            c
            for (prompt, comp), r in zip(continuations, ranks)
            for c in replay_with_context(prompt, comp, accepted_depths(r, depth), hybrid_fill(depth, n), depth)
        ]
        out[n] = sum(c for c, _ in calls) / max(1, len(calls))
    return out


def candidate_trees(max_depth: int, max_size: int, max_k: int = 4, chains_only: bool = False) -> list[tuple[int, ...]]:
    """Non-increasing branching tuples up to `max_depth` deep with at most `max_size` nodes.

    chains_only: for drafters whose depth j continues the top-1 of depth j - 1 (Hydra,
    eagle), only a chain with top-k at its last depth, (1, ..., 1, k): every node then
    has the parent its draft was made from, so replay stays exact."""
    out = []
    for d in range(1, max_depth + 1):
        for b in itertools.product(range(1, max_k + 1), repeat=d):
            fits = all(k == 1 for k in b[:-1]) if chains_only else list(b) == sorted(b, reverse=True)
            if fits and Tree(b).size <= max_size:
                out.append(b)
    return out


@dataclass(frozen=True)
class StepCostModel:
    """t_step(tree) = t_fwd(R + D * msa_fraction) + t_extra (see module docstring).

    curve: ((rows, seconds), ...) of forward, ascending rows, first at 1 row."""

    curve: tuple[tuple[int, float], ...]
    t_extra: float
    msa_fraction: float

    def rows_cost(self, n: float) -> float:
        """t_fwd(n): the curve interpolated piecewise linearly, extended from its last segment."""
        pts = self.curve
        if len(pts) == 1:
            return pts[0][1]
        i = next((i for i in range(1, len(pts) - 1) if n <= pts[i][0]), len(pts) - 1)  # the segment [i - 1, i]
        (n0, t0), (n1, t1) = pts[i - 1], pts[i]
        return t0 + (t1 - t0) * (n - n0) / (n1 - n0)

    def _rows(self, tree: Tree) -> float:
        return tree.size + len(tree.branching) * self.msa_fraction

    @classmethod
    def calibrate(cls, curve: dict[int, float], t_own: float, own: Tree, msa_fraction: float) -> StepCostModel:
        model = cls(tuple(sorted(curve.items())), 0.0, msa_fraction)
        return cls(model.curve, max(0.0, t_own - model.rows_cost(model._rows(own))), msa_fraction)

    def __call__(self, tree: Tree) -> float:
        return self.rows_cost(self._rows(tree)) + self.t_extra


@dataclass(frozen=True)
class TreeEstimate:
    branching: tuple[int, ...]
    size: int
    tokens_per_call: float
    ms_per_call: float

    @property
    def tokens_per_s(self) -> float:
        return 1000 * self.tokens_per_call / self.ms_per_call


def estimate(ranks: list[torch.Tensor], cost: StepCostModel, trees: list[tuple[int, ...]]) -> list[TreeEstimate]:
    """Expected speed of every tree, best first."""
    out = []
    for b in trees:
        tree = Tree(b)
        tpc, _ = replay(ranks, b)
        out.append(TreeEstimate(b, tree.size, tpc, 1000 * cost(tree)))
    return sorted(out, key=lambda e: -e.tokens_per_s)
