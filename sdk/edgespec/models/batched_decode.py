"""Batched eager decoding: greedy generation of many sequences at once that also returns the
top-K next-token probabilities at every response position (the teacher of self-distillation,
`edgespec.corpus.distill`: its soft labels).

Self-distillation needs many responses; one sequence at a time through the program is
~2,000 tokens/min here. `generate_stream` runs the eager model (bf16 on CPUs with AVX-512
BF16) over B sequences at once with continuous batching:

- every row of the static cache `BatchKV` holds one sequence from slot 0, at its own position
  (per-row RoPE angles and cache writes); no padding;
- a new prompt is prefilled alone (causal attention over its own keys) into a free row, so
  rows that finish (EOS or their budget) are refilled at once and a decode step always
  carries B sequences until the prompts run out; a prefix every prompt shares (the chat
  template's system turn) is computed once;
- decode attention is two dense batched matmuls per layer over the whole cache
  (`GroupedSDPA`), the mask hiding each row's unused slots.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from edgespec.models.llama import SDPA, Attention, GrowingKV, Transformer


@dataclass
class TeacherResponse:
    response_ids: list[int]  # greedy tokens; ends with the EOS id when the model stopped
    stopped: bool
    topk_ids: torch.Tensor  # [R, K] int32: the K most likely tokens at each response position
    topk_p: torch.Tensor  # [R, K] float16: their probabilities


class BatchKV:
    """A static cache for a batch, stored [B, Hkv, S, D] per k and v. `update` writes the rows
    of x at slots start_pos.. (an int for all rows, or a tensor [B] of per-row slots for one new
    row each) and returns the whole cache as [B, S, Hkv, D] views (the `kv` contract of
    `Attention.forward`); the mask decides which slots count. Attending over all S slots keeps
    every operand dense: CPU bf16 batched matmuls copy a strided prefix [0, n) first, which
    costs more than reading the unused slots."""

    def __init__(self, batch: int, max_len: int, n_kv_heads: int, head_dim: int, dtype: torch.dtype):
        self.k = torch.zeros(batch, n_kv_heads, max_len, head_dim, dtype=dtype)
        self.v = torch.zeros_like(self.k)

    @property
    def dtype(self) -> torch.dtype:
        return self.k.dtype

    def update(self, start_pos: int | torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(start_pos, torch.Tensor):  # one row per sequence at its own slot
            rows = torch.arange(k.shape[0])
            self.k[rows, :, start_pos] = k[:, 0]
            self.v[rows, :, start_pos] = v[:, 0]
        else:
            n = start_pos + k.shape[1]
            self.k[:, :, start_pos:n] = k.transpose(1, 2)
            self.v[:, :, start_pos:n] = v.transpose(1, 2)
        return self.k.transpose(1, 2), self.v.transpose(1, 2)

    def load_row_(self, b: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Row b's slots [0, T) = k, v [1, T, Hkv, D] (a prefilled prompt)."""
        T = k.shape[1]
        self.k[b, :, :T] = k[0].transpose(0, 1)
        self.v[b, :, :T] = v[0].transpose(0, 1)


class GroupedSDPA(SDPA):
    """Attention as two batched matmuls per layer, grouped query heads over their shared K/V
    head, with a per-sequence mask [B, 1, T, n] (bool or additive, the `SDPA` contract); softmax in fp32. For a
    few query rows per sequence this is several times faster on CPU than the fused kernel
    with a mask, and it reads `BatchKV`'s keys in place when the mask spans the whole cache.
    Without a mask (a prompt's causal prefill) it is `SDPA`."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is None:
            return super().forward(q, k, v, start_pos, None)
        B, T, H, D = q.shape
        n, Hkv = mask.shape[-1], k.shape[2]
        g = H // Hkv
        q = q.view(B, T, Hkv, g, D).permute(0, 2, 3, 1, 4).reshape(B * Hkv, g * T, D)
        # [B * Hkv, n, D]: views of `BatchKV`'s storage when n is its length
        k, v = (x[:, :n].transpose(1, 2).reshape(B * Hkv, n, D) for x in (k, v))
        # (k q^T)^T: k in its stored layout as the left operand (q k^T reads k transposed,
        # which CPU bf16 kernels copy first)
        scores = torch.bmm(k, q.transpose(1, 2)).transpose(1, 2).float() * D**-0.5  # [B * Hkv, g*T, n]
        bias = mask if mask.is_floating_point() else torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))  # [B, 1, T, n]
        scores = scores.view(B, Hkv, g, T, n) + bias[:, :, None]
        y = torch.bmm(torch.softmax(scores, -1).to(v.dtype).view(B * Hkv, g * T, n), v)  # [B * Hkv, g*T, D]
        return y.view(B, Hkv, g, T, D).permute(0, 3, 1, 2, 4).reshape(B, T, H, D)


def as_teacher_(model: Transformer, dtype: torch.dtype = torch.bfloat16) -> Transformer:
    """In place: weights in `dtype` (`Transformer.to_half_`: RoPE stays fp32) and `GroupedSDPA`
    for every attention, ready for `generate_stream`."""
    model.to_half_(dtype)
    for m in model.modules():
        if isinstance(m, Attention):
            m.sdpa = GroupedSDPA()
    return model


@contextmanager
def grouped_attention(model: Transformer) -> Iterator[Transformer]:
    """`model` with `GroupedSDPA` in every attention for the duration (ready for
    `generate_stream` in its own dtype), then its own attention again: a model that serves
    other passes after (the harness's fp32 reference)."""
    attentions = [m for m in model.modules() if isinstance(m, Attention)]
    own = [m.sdpa for m in attentions]
    for m in attentions:
        m.sdpa = GroupedSDPA()
    try:
        yield model
    finally:
        for m, sdpa in zip(attentions, own):
            m.sdpa = sdpa


def _logits(model: Transformer, tokens: torch.Tensor, start, cos, sin, mask, kvs) -> torch.Tensor:
    """Next-token logits [B, V] of rows tokens [B, T] (the last row of each), K/V in `kvs`."""
    x = model.run_layers(model.embed(tokens), 0, model.args.n_layers, start, cos, sin, mask=mask, kvs=kvs)
    return model.output(model.norm(x[:, -1])).float()  # [B, V]


def common_prefix(prompts: Iterable[list[int]]) -> list[int]:
    """The longest token prefix all prompts share, one token short of the shortest prompt."""
    out: list[int] | None = None
    for p in prompts:
        if out is None:
            out = list(p[:-1])
        n = 0
        while n < min(len(out), len(p) - 1) and out[n] == p[n]:
            n += 1
        del out[n:]
    return out or []


@torch.inference_mode()
def generate_stream(
    model: Transformer,
    prompts: Iterable[tuple[Hashable, list[int]]],
    *,
    batch: int,
    max_new_tokens: int,
    eos_ids: tuple[int, ...],
    max_len: int | None = None,
    prefix: list[int] | tuple[int, ...] = (),
    top_k: int = 8,
    on_step: Callable[[int], None] = lambda live: None,
) -> Iterator[tuple[Hashable, TeacherResponse]]:
    """Greedy responses of `model` (eager, prepared by `as_teacher_`) to (key, prompt ids)
    pairs, `batch` sequences decoding at once; yields (key, response) as each finishes (not in
    input order). max_len: cache slots per sequence (default the model's max_seq_len; every
    decode step attends over all of them, so keep it near the longest prompt + max_new_tokens);
    a prompt longer than max_len - max_new_tokens is a ValueError. prefix: leading tokens every
    prompt starts with, prefilled once (`common_prefix`)."""
    a = model.args
    S = min(max_len or a.max_seq_len, a.max_seq_len)
    cdt = model.output.weight.dtype
    cdt = torch.float32 if cdt == torch.float16 else cdt
    kvs = [BatchKV(batch, S, a.n_kv_heads, a.head_dim, cdt) for _ in range(a.n_layers)]
    slots = torch.arange(S)
    eos = set(eos_ids)
    queue = iter(prompts)
    key: list[Hashable | None] = [None] * batch  # None: a free row
    pos = torch.zeros(batch, dtype=torch.long)  # slot of each row's last token
    last = torch.zeros(batch, dtype=torch.long)  # each row's last token
    budget = [0] * batch
    ids: list[list[int]] = [[] for _ in range(batch)]
    top: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(batch)]
    P = len(prefix)
    shared = model.new_kvs(1, cdt)
    if P:
        _logits(model, torch.tensor([list(prefix)]), 0, *model.rope(torch.arange(P)), None, shared)

    def emit(b: int, p: torch.Tensor, i: torch.Tensor) -> bool:
        """Record row b's next token from its top-K probabilities p and ids i [K]; True when
        the row is finished."""
        tok = int(i[0])
        ids[b].append(tok)
        top[b].append((i.to(torch.int32), p.to(torch.float16)))
        last[b] = tok
        return tok in eos or len(ids[b]) >= budget[b]

    def finish(b: int) -> tuple[Hashable, TeacherResponse]:
        r = TeacherResponse(ids[b], ids[b][-1] in eos, torch.stack([i for i, _ in top[b]]), torch.stack([p for _, p in top[b]]))
        key[b], ids[b], top[b] = None, [], []
        return r

    while True:
        for b in range(batch):  # refill free rows: prefill each new prompt alone
            while key[b] is None:
                nxt = next(queue, None)
                if nxt is None:
                    break
                k_, prompt = nxt
                if len(prompt) + max_new_tokens > S:
                    raise ValueError(f"prompt {k_!r}: {len(prompt)} + {max_new_tokens} new tokens > max_len {S}")
                if list(prompt[:P]) != list(prefix) or len(prompt) == P:
                    raise ValueError(f"prompt {k_!r} does not extend the shared prefix")
                T = len(prompt)
                grow = [GrowingKV(g.k, g.v) for g in shared]
                logits = _logits(model, torch.tensor([prompt[P:]]), P, *model.rope(torch.arange(P, T)), None, grow)
                for kv, g in zip(kvs, grow):
                    kv.load_row_(b, g.k, g.v)
                key[b], budget[b], pos[b] = k_, max_new_tokens, T
                p, i = torch.softmax(logits[0], -1).topk(top_k)
                if emit(b, p, i):
                    yield k_, finish(b)
        live = [b for b in range(batch) if key[b] is not None]
        if not live:
            return
        on_step(len(live))
        # one decode step for every row (free rows compute on stale state, ignored)
        mask = torch.zeros(batch, 1, 1, S).masked_fill_((slots[None, :] > pos[:, None])[:, None, None], float("-inf"))  # additive, all layers
        cos, sin = model.rope(pos)  # [B, D]: each row at its own position
        logits = _logits(model, last[:, None], pos, cos[:, None], sin[:, None], mask, kvs)
        p, i = torch.softmax(logits, -1).topk(top_k)  # [B, K] each
        for b in live:
            if emit(b, p[b], i[b]):
                yield key[b], finish(b)
        pos.add_(1).clamp_(max=S - 1)  # (a free row's stale position stays in range)
