"""Many prompts decoded together through one program's `decode_rows` (continuous batching:
FastSeq's batched generation, on a device).

Each prompt runs the one decode loop (`edgespec.runtime.generate.decoding`) in a cache slot
of its own, and the loops' feeds are answered by batched program calls: every call carries
the next token of every running sequence and, in the rows it has left (`call_rows`), prompt
chunks of sequences that took a free slot, prefilled beside the others. A sequence that ends
(EOS, its budget, an error) frees its slot for the next prompt at once.

A sequence gets the tokens it gets alone: its rows' logits are the bits of its own decoding
(the block kernel's and the exact attention's rows are their own: `Transformer.decode_rows`),
and its sampler, n-gram bans and prefix reuse are its own (`decoding`'s per-sequence state;
one `CacheState` per slot).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from edgespec.errors import EdgespecError
from edgespec.runtime.generate import CacheState, Decoding, Feed, GenerationResult, decoding

Tag = TypeVar("Tag")
DecodeRowsFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""decode_rows(tokens [1, T], slots [T], positions [T], emit [E]) -> logits [E, V]."""


@dataclass
class _Running(Generic[Tag]):
    tag: Tag
    loop: Decoding
    feed: Feed
    fed: int = 0  # tokens of `feed` already fed (a prompt longer than a call's rows goes in chunks)


def decode_batch(
    decode_rows: DecodeRowsFn,
    requests: Iterable[tuple[Tag, list[int], dict]],
    *,
    slots: int,
    call_rows: int,
    reuse_prefix: bool = True,
    **options,
) -> Iterator[tuple[Tag, GenerationResult | EdgespecError]]:
    """Decode every request (tag, prompt ids, its own options of `decoding`, e.g. seed), up to
    `slots` at a time, at most `call_rows` rows per program call; yields (tag, result) as each
    sequence ends, or (tag, the EdgespecError) for a request that cannot be decoded (e.g. a
    prompt longer than the context). `options` are every request's `decoding` options;
    reuse_prefix: a slot's next prompt prefills only where it differs from what the slot holds."""
    if call_rows < slots:
        raise EdgespecError(f"a batched call of {call_rows} rows cannot carry a token of each of {slots} slots")
    pending = iter(requests)
    running: dict[int, _Running[Tag]] = {}
    caches = [CacheState() if reuse_prefix else None for _ in range(slots)]
    finished: list[tuple[Tag, GenerationResult | EdgespecError]] = []
    exhausted = False

    def start(slot: int) -> bool:
        """Give the slot the next request that starts; False when none is left."""
        nonlocal exhausted
        while not exhausted:
            try:
                tag, ids, own = next(pending)
            except StopIteration:
                exhausted = True
                return False
            loop = decoding(ids, cache=caches[slot], **(options | own))
            try:
                running[slot] = _Running(tag, loop, next(loop))
                return True
            except EdgespecError as e:  # refused before its first call (e.g. too long)
                finished.append((tag, e))
        return False

    for slot in range(slots):
        if not start(slot):
            break
    while running or finished:
        yield from finished
        finished.clear()
        if not running:
            break
        # the call: one row per sequence past its prompt, then prompt chunks in the rows left
        rows: list[int] = []
        where: list[tuple[int, int]] = []  # (slot, position) per row
        answered: list[tuple[int, int]] = []  # (slot, row whose logits answer its feed)
        budget = call_rows - sum(1 for r in running.values() if len(r.feed.tokens) - r.fed == 1)
        for slot, r in sorted(running.items(), key=lambda kv: len(kv[1].feed.tokens) - kv[1].fed > 1):
            left = len(r.feed.tokens) - r.fed
            take = 1 if left == 1 else min(left, budget)
            if take <= 0:
                continue
            budget -= take if left > 1 else 0
            rows += r.feed.tokens[r.fed : r.fed + take]
            where += [(slot, r.feed.pos + r.fed + i) for i in range(take)]
            r.fed += take
            if r.fed == len(r.feed.tokens):
                answered.append((slot, len(rows) - 1))
        logits = decode_rows(
            torch.tensor([rows], dtype=torch.long),
            torch.tensor([s for s, _ in where], dtype=torch.long),
            torch.tensor([p for _, p in where], dtype=torch.long),
            torch.tensor([row for _, row in answered] or [len(rows) - 1], dtype=torch.long),  # (a call of prompt chunks only: one row, unused)
        )
        for (slot, _), out in zip(answered, logits):
            r = running[slot]
            try:
                r.feed, r.fed = r.loop.send(out), 0
            except StopIteration as done:
                finished.append((r.tag, done.value))
                del running[slot]
                start(slot)
