"""Acceptance of a draft tree against the target's own predictions at every node.

Greedy: walk from the root, following the child whose token equals the target's argmax;
emit the accepted tokens plus the target's token after the last accepted node.

Sampling (temperature > 0): multi-candidate rejection sampling for deterministic drafts.
At a node with target distribution p and candidate children c_1..c_m (distinct tokens):
accept c_i with probability p'(c_i), where p' is p with the earlier rejected candidates
zeroed and renormalized; on acceptance descend into c_i, otherwise try c_{i+1}; when all are
rejected emit a sample from the final residual p'. The emitted token is distributed exactly
as p: P(c_1) = p(c_1), and after rejecting c_1 the process samples from p restricted to the
other tokens, renormalized -- by induction the output distribution is p. Each step applies
this to the distribution conditioned on the accepted prefix, so the whole sequence is
distributed as plain autoregressive sampling from the target.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from edgespec.spec.tree import Tree


@dataclass
class Acceptance:
    path: list[int]  # accepted tree rows, root first (root = the already-verified token)
    tokens: list[int]  # new tokens: accepted draft tokens then the target's next token

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


def accept_greedy(tree: Tree, node_tokens: torch.Tensor, target_logits: torch.Tensor) -> Acceptance:
    """node_tokens [R]; target_logits [R, V] (prediction after each node)."""
    best = target_logits.argmax(-1).tolist()
    toks = node_tokens.tolist()
    node, path, out = 0, [0], []
    while True:
        nxt = best[node]
        child = next((c for c in tree.children[node] if toks[c] == nxt), None)
        out.append(nxt)
        if child is None:
            return Acceptance(path, out)
        node = child
        path.append(child)


def accept_sampling(
    tree: Tree, node_tokens: torch.Tensor, target_logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None
) -> Acceptance:
    """Lossless tree rejection sampling (see module docstring)."""
    probs = torch.softmax(target_logits.double() / temperature, -1)  # [R, V]
    toks = node_tokens.tolist()
    node, path, out = 0, [0], []
    while True:
        p = probs[node].clone()
        chosen = None
        tried: set[int] = set()
        for c in tree.children[node]:
            t = toks[c]
            if t in tried:  # duplicate candidate: already rejected, p(t) is 0 now
                continue
            tried.add(t)
            if torch.rand((), generator=generator, dtype=torch.float64) < p[t]:
                chosen = c
                break
            p[t] = 0.0
            p = p / p.sum()
        if chosen is None:
            out.append(int(torch.multinomial(p, 1, generator=generator)))
            return Acceptance(path, out)
        out.append(toks[chosen])
        path.append(chosen)
        node = chosen
