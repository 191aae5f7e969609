"""The torch side of edgespec's kernels: op schemas for `torch.export`, a shape function for
tracing and a plain-PyTorch reference (eager calls). The runtime kernels are C++
(`attention.cpp`, loaded by `edgespec.kernels.library.load`).

`edgespec::attention(q [1, T, H, D], k_cache [1, S, Hkv, D], v_cache, start_pos, mask)`:
mask None = causal (row t sees keys [0, start_pos + t]); else an additive fp32 mask [T, N]
over keys [0, N), -inf = not visible. Per-row arithmetic independent of T: see attention.cpp.
`edgespec::attention_ranges(q, k_cache, v_cache, first [T], count [T])`: row t sees the cache
rows [first[t], first[t] + count[t]) (the rows of a batched call, each in its own sequence's
slot), with the arithmetic of `attention`'s causal rows over the same keys.

`edgespec::block_linear(x [..., K], weight uint8, format, out_features, prologue=0,
norm_weight=None, eps=0, residual=None) -> [..., N]`: a linear over packed GGUF-style blocks
(`edgespec.kernels.block_linear`, block_linear.h); per-row arithmetic independent of the row
count, bitwise equal to `reference_block_linear`. `prologue` (`PROLOGUES`) makes its input of x
first: "rms_norm" rms_norm(x, norm_weight, eps), "swiglu" silu_mul of x's halves [gate | up];
`residual` is added to its output. Models call it plain; export/fusion.py folds the glue ops
into it (block_linear.cpp computes the prologue with the glue op's own arithmetic).

`edgespec::rms_norm(x, weight, eps)`, `edgespec::rope(x [B, T, H, D], cos [T, D], sin [T, D])`,
`edgespec::silu_mul(a, b)`: the glue between a block-kernel program's linears (glue.cpp),
each what `edgespec.models.llama`'s RMSNorm, `apply_rope` and SwiGLU gate compute.

`edgespec::block_argmax(x [..., K], weight uint8, format, out_features, screen=None) -> [...]
int64`: `block_linear(x, weight, format, out_features).argmax(-1)`, the same index (first
largest, first NaN); with an S8H weight's `screen` (`block_linear.pack_screen`) it reads the
screen and re-scores only the outputs that could be the largest (block_linear/screen.h).

`edgespec::block_embedding(ids [...] int64, weight uint8, format, out_features, in_features) ->
[..., in_features]`: the rows `ids` of a packed block matrix, dequantized (block_embedding.cpp):
an embedding table read from the blocks its tied lm head computes with, stored once.

`edgespec::argmax_rows(x [R, N]) -> [R] int64`: `x.argmax(-1)` (glue.cpp; the portable
kernel's scalar scan took 0.19 ms of a speculative step over [4, 49152] logits);
export/fusion.py swaps it in for a block-kernel program's argmaxes.
"""

from __future__ import annotations

import torch

HEAD_SIZES = (16, 32, 48, 64, 96, 128, 256)  # what attention.cpp is compiled for

_lib = torch.library.Library("edgespec", "DEF")


def _op(name: str, args: str, ref, fake=None) -> None:
    """Define `edgespec::name(args) -> Tensor` and its out variant, `ref` the eager
    implementation of both, `fake` their shape function for tracing (default: like the first
    input)."""
    _lib.define(f"{name}({args}) -> Tensor")
    _lib.define(f"{name}.out({args}, *, Tensor(a!) out) -> Tensor(a!)")
    torch.library.impl(_lib, name, "CompositeExplicitAutograd")(ref)

    def out_variant(*args, out, **kwargs):
        out.copy_(ref(*args, **kwargs))
        return out

    torch.library.impl(_lib, f"{name}.out", "CompositeExplicitAutograd")(out_variant)
    torch.library.register_fake(f"edgespec::{name}")(fake or (lambda x, *rest, **kw: torch.empty_like(x)))
    torch.library.register_fake(f"edgespec::{name}.out")(lambda *args, out, **kw: out)


PROLOGUES = {"none": 0, "rms_norm": 1, "swiglu": 2}  # block_ops.h's Prologue


def reference_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, start_pos: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """What the kernel computes, in PyTorch (up to rounding)."""
    T, H, D = q.shape[1:]
    if mask is None:
        n = start_pos + T
        visible = torch.arange(n)[None, :] <= (start_pos + torch.arange(T))[:, None]
        mask = torch.zeros(T, n).masked_fill(~visible, float("-inf"))
    n = mask.shape[1]
    k, v = k_cache[0, :n].float().transpose(0, 1), v_cache[0, :n].float().transpose(0, 1)  # [Hkv, n, D] (an fp16 cache widened)
    group = H // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)  # [H, n, D]
    scores = q[0].transpose(0, 1) @ k.transpose(1, 2) / D**0.5 + mask  # [H, T, n]
    return (scores.softmax(-1) @ v).transpose(0, 1)[None]  # [1, T, H, D]


_op("attention", "Tensor q, Tensor k_cache, Tensor v_cache, SymInt start_pos, Tensor? mask=None", reference_attention)


def reference_attention_ranges(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, first: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """`reference_attention` where row t sees the cache rows [first[t], first[t] + count[t])."""
    keys = torch.arange(k_cache.shape[1])[None, :]
    visible = (keys >= first[:, None]) & (keys < (first + count)[:, None])  # [T, S]
    return reference_attention(q, k_cache, v_cache, 0, torch.zeros(visible.shape).masked_fill(~visible, float("-inf")))


_op("attention_ranges", "Tensor q, Tensor k_cache, Tensor v_cache, Tensor first, Tensor count", reference_attention_ranges)


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def reference_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x0, x1 = x[..., 0::2], x[..., 1::2]
    swapped = torch.stack([-x1, x0], -1).flatten(-2)
    return x * cos[None, :, None] + swapped * sin[None, :, None]


def reference_silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(a) * b


def _block_linear_eager(x, weight, format, out_features, prologue=0, norm_weight=None, eps=0.0, residual=None):
    from edgespec.kernels.block_linear import FORMAT_IDS, reference_block_linear, unpack

    if prologue == PROLOGUES["rms_norm"]:
        x = reference_rms_norm(x, norm_weight, eps)
    elif prologue == PROLOGUES["swiglu"]:
        x = reference_silu_mul(*x.chunk(2, -1))
    name = {v: k for k, v in FORMAT_IDS.items()}[format]
    y = reference_block_linear(x, unpack(weight, name, out_features, x.shape[-1]))
    return y if residual is None else residual + y


_BLOCK_LINEAR_ARGS = "Tensor x, Tensor weight, int format, int out_features, int prologue=0, Tensor? norm_weight=None, float eps=0.0, Tensor? residual=None"
_op("block_linear", _BLOCK_LINEAR_ARGS, _block_linear_eager, lambda x, weight, format, out_features, *rest, **kw: x.new_empty((*x.shape[:-1], out_features)))
_op("rms_norm", "Tensor x, Tensor weight, float eps", reference_rms_norm)
_op("rope", "Tensor x, Tensor cos, Tensor sin", reference_rope)
_op("silu_mul", "Tensor a, Tensor b", reference_silu_mul)


def _block_embedding_eager(ids, weight, format, out_features, in_features):
    from edgespec.kernels.block_linear import FORMAT_IDS, unpack

    name = {v: k for k, v in FORMAT_IDS.items()}[format]
    return unpack(weight, name, out_features, in_features).rows(ids)


_op(
    "block_embedding",
    "Tensor ids, Tensor weight, int format, int out_features, int in_features",
    _block_embedding_eager,
    lambda ids, weight, format, out_features, in_features: ids.new_empty((*ids.shape, in_features), dtype=torch.float32),
)


def _rows_index(x, *rest, **kw):  # an index per row of x [..., N]: [...] int64
    return x.new_empty(x.shape[:-1], dtype=torch.long)


_op("argmax_rows", "Tensor x", lambda x: x.argmax(-1), _rows_index)


def _block_argmax_eager(x, weight, format, out_features, screen=None):
    return _block_linear_eager(x, weight, format, out_features).argmax(-1)  # the screen changes which outputs are read, not the index


_op("block_argmax", "Tensor x, Tensor weight, int format, int out_features, Tensor? screen=None", _block_argmax_eager, _rows_index)
