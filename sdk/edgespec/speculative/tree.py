"""Static draft trees: shape, ancestor mask, depth offsets.

A tree is fixed by its branching per depth, ``branching = (k_1, ..., k_g)``: the root is
the last verified token; each node at depth d-1 has k_d children, the top-k_d candidates
of speculative stream d. Node count: 1 + sum_d prod_{i<=d} k_i (the paper's 1 + sum k^g
when all k_d are equal). Nodes are numbered breadth-first, so parents precede children.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch


@dataclass(frozen=True)
class Tree:
    branching: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.branching or any(k < 1 for k in self.branching):
            raise ValueError(f"tree branching must be a non-empty tuple of positive ints, got {self.branching}")

    @cached_property
    def parents(self) -> tuple[int, ...]:
        """parents[i] = index of node i's parent (-1 for the root)."""
        parents = [-1]
        level = [0]
        for k in self.branching:
            nxt = []
            for p in level:
                for _ in range(k):
                    parents.append(p)
                    nxt.append(len(parents) - 1)
            level = nxt
        return tuple(parents)

    @property
    def size(self) -> int:
        return len(self.parents)

    @cached_property
    def depth(self) -> tuple[int, ...]:
        d = [0] * self.size
        for i in range(1, self.size):
            d[i] = d[self.parents[i]] + 1
        return tuple(d)

    @cached_property
    def rank(self) -> tuple[int, ...]:
        """Which top-k slot of its stream each node takes (0 for the root)."""
        r = [0] * self.size
        seen: dict[int, int] = {}
        for i in range(1, self.size):
            p = self.parents[i]
            r[i] = seen.get(p, 0)
            seen[p] = r[i] + 1
        return tuple(r)

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        ch: list[list[int]] = [[] for _ in range(self.size)]
        for i in range(1, self.size):
            ch[self.parents[i]].append(i)
        return tuple(tuple(c) for c in ch)

    def ancestor_mask(self) -> torch.Tensor:
        """[n, n] bool: mask[i, j] is True when j is i or an ancestor of i."""
        n = self.size
        m = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            j = i
            while j >= 0:
                m[i, j] = True
                j = self.parents[j]
        return m

    @property
    def k_max(self) -> int:
        return max(self.branching)

    @property
    def is_chain(self) -> bool:
        """One candidate per depth: the tree is a line and plain causal attention verifies it."""
        return all(k == 1 for k in self.branching)

    def children_table(self) -> tuple[torch.Tensor, torch.Tensor]:
        """([n, k_max] child node ids, padded with 0; [n, k_max] bool valid) for tensor code."""
        table = torch.zeros(self.size, self.k_max, dtype=torch.long)
        valid = torch.zeros(self.size, self.k_max, dtype=torch.bool)
        for i, ch in enumerate(self.children):
            table[i, : len(ch)] = torch.tensor(ch, dtype=torch.long) if ch else table[i, :0]
            valid[i, : len(ch)] = True
        return table, valid

    def fill_index(self) -> torch.Tensor:
        """[n - 1] flat indices into a [g, k_max] candidate table for nodes 1..n-1: node i takes
        candidate `rank[i]` of stream `depth[i]` (the step's tree rows are the root, then
        `draft.reshape(-1)[fill_index]`)."""
        return torch.tensor([(self.depth[i] - 1) * self.k_max + self.rank[i] for i in range(1, self.size)], dtype=torch.long)


def placeholder_draft(depth: int, topk: int) -> torch.Tensor:
    """A [depth, topk] draft for the first step after a prefill: distinct ids per depth
    (lossless sampling needs distinct siblings); verification rejects what does not fit."""
    return torch.arange(topk, dtype=torch.long).repeat(depth, 1)
