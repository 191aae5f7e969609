"""Reference speculative decode loop (eager): one verify-and-draft call per step, with stats.

Drafts come from a `Drafter`: the model's own speculative streams, Medusa heads, or prompt
lookup. All go through the same tree verifier, so their accepted-per-call compare directly.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

from edgespec.errors import EdgespecError
from edgespec.speculative.streams import SpecModel, topk_draft
from edgespec.speculative.tree import Tree
from edgespec.speculative.accept import accept_greedy, accept_sampling


class Drafter(Protocol):
    def __call__(self, main_h: torch.Tensor, stream_h: torch.Tensor | None, context: list[int], tree: Tree) -> torch.Tensor:
        """Candidates per depth: [len(tree.branching), max(tree.branching)] token ids."""


def stream_drafter(model: SpecModel) -> Drafter:
    """Top-k of each speculative stream at the last accepted node."""

    def draft(main_h, stream_h, context, tree):
        return topk_draft(model.base, stream_h, tree)

    return draft


@dataclass
class SpecStats:
    calls: int = 0
    tokens_per_call: list[int] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def mean_accepted(self) -> float:
        """Mean tokens emitted per verify call (accepted drafts + the target's own token)."""
        return sum(self.tokens_per_call) / max(1, len(self.tokens_per_call))

    def histogram(self) -> dict[int, int]:
        return dict(sorted(Counter(self.tokens_per_call).items()))

    def merge(self, other: "SpecStats") -> "SpecStats":
        return SpecStats(self.calls + other.calls, self.tokens_per_call + other.tokens_per_call, self.wall_s + other.wall_s)


@dataclass
class SpecResult:
    prompt_ids: list[int]
    completion_ids: list[int]
    stopped_by_eos: bool
    stats: SpecStats


@torch.no_grad()
def spec_generate(
    model: SpecModel,
    tree: Tree,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    eos_ids: tuple[int, ...],
    drafter: Drafter | None = None,
    temperature: float = 0.0,
    seed: int = 0,
    on_tokens: Callable[[list[int]], None] | None = None,
) -> SpecResult:
    """Generate with tree speculation; greedy output equals autoregressive greedy decoding."""
    base = model.base
    max_seq_len = base.args.max_seq_len
    if not prompt_ids:
        raise EdgespecError("the prompt is empty")
    if len(prompt_ids) + tree.size + 1 > max_seq_len:
        raise EdgespecError(f"the prompt has {len(prompt_ids)} tokens; with a {tree.size}-node tree the context of {max_seq_len} is exceeded")
    drafter = drafter or stream_drafter(model)
    gen = torch.Generator().manual_seed(seed)
    mask, depth = tree.ancestor_mask(), torch.tensor(tree.depth)
    t0 = time.perf_counter()

    def pick(logits: torch.Tensor) -> int:
        if temperature <= 0:
            return int(logits.argmax())
        return int(torch.multinomial(torch.softmax(logits.double() / temperature, -1), 1, generator=gen))

    main_h, stream_h = model.prefill(torch.tensor([prompt_ids]))
    x = pick(base.output(main_h))
    pos = len(prompt_ids)  # position of x, the last emitted (not yet cached) token
    out = [x]
    stats = SpecStats()
    stopped = x in eos_ids
    while not stopped and len(out) < max_new_tokens and pos + tree.size < max_seq_len:
        cand = drafter(main_h, stream_h, prompt_ids + out, tree)
        node_tokens = tree.fill(x, cand)
        mh, sh = model.forward_tree(node_tokens[None], pos, mask, depth)
        logits = base.output(mh)  # [R, V]
        acc = accept_greedy(tree, node_tokens, logits) if temperature <= 0 else accept_sampling(tree, node_tokens, logits, temperature, gen)
        model.compact_cache_(pos, acc.path)
        stats.calls += 1
        new = acc.tokens
        for i, t in enumerate(new):
            if t in eos_ids:
                new, stopped = new[:i + 1], True
                break
        new = new[: max_new_tokens - len(out)]
        stats.tokens_per_call.append(len(new))
        out.extend(new)
        if on_tokens:
            on_tokens(new)
        last = acc.path[-1]
        main_h, stream_h = mh[last], (sh[last] if sh is not None else None)
        pos += len(acc.path)
        x = acc.tokens[-1]
    stats.wall_s = time.perf_counter() - t0
    if out and out[-1] in eos_ids:
        return SpecResult(prompt_ids, out[:-1], True, stats)
    return SpecResult(prompt_ids, out, stopped, stats)
