"""The torch side of edgespec's kernels: op schemas for `torch.export`, a shape function for
tracing and a plain-PyTorch reference (eager calls). The runtime kernels are C++
(`attention.cpp`, loaded by `edgespec.kernels.library.load`).

`edgespec::attention(q [1, T, H, D], k_cache [1, S, Hkv, D], v_cache, start_pos, mask)`:
mask None = causal (row t sees keys [0, start_pos + t]); else an additive fp32 mask [T, N]
over keys [0, N), -inf = not visible. Per-row arithmetic independent of T: see attention.cpp.

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

`edgespec::argmax_rows(x [R, N]) -> [R] int64`: `x.argmax(-1)` (glue.cpp; the portable
kernel's scalar scan took 0.19 ms of a speculative step over [4, 49152] logits);
export/fusion.py swaps it in for a block-kernel program's argmaxes.
"""

from __future__ import annotations

import torch

HEAD_SIZES = (16, 32, 48, 64, 96, 128, 256)  # what attention.cpp is compiled for

_lib = torch.library.Library("edgespec", "DEF")
_lib.define("attention(Tensor q, Tensor k_cache, Tensor v_cache, SymInt start_pos, Tensor? mask=None) -> Tensor")
PROLOGUES = {"none": 0, "rms_norm": 1, "swiglu": 2}  # block_linear.cpp's Prologue
_BLOCK_LINEAR_ARGS = "Tensor x, Tensor weight, int format, int out_features, int prologue=0, Tensor? norm_weight=None, float eps=0.0, Tensor? residual=None"
_lib.define(f"block_linear({_BLOCK_LINEAR_ARGS}) -> Tensor")
_lib.define(f"block_linear.out({_BLOCK_LINEAR_ARGS}, *, Tensor(a!) out) -> Tensor(a!)")
_lib.define("attention.out(Tensor q, Tensor k_cache, Tensor v_cache, SymInt start_pos, Tensor? mask=None, *, Tensor(a!) out) -> Tensor(a!)")


def reference_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, start_pos: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """What the kernel computes, in PyTorch (up to rounding)."""
    T, H, D = q.shape[1:]
    if mask is None:
        n = start_pos + T
        visible = torch.arange(n)[None, :] <= (start_pos + torch.arange(T))[:, None]
        mask = torch.zeros(T, n).masked_fill(~visible, float("-inf"))
    n = mask.shape[1]
    k, v = k_cache[0, :n].transpose(0, 1), v_cache[0, :n].transpose(0, 1)  # [Hkv, n, D]
    group = H // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)  # [H, n, D]
    scores = q[0].transpose(0, 1) @ k.transpose(1, 2) / D**0.5 + mask  # [H, T, n]
    return (scores.softmax(-1) @ v).transpose(0, 1)[None]  # [1, T, H, D]


@torch.library.impl(_lib, "attention", "CompositeExplicitAutograd")
def _attention(q, k_cache, v_cache, start_pos, mask=None):
    return reference_attention(q, k_cache, v_cache, start_pos, mask)


@torch.library.impl(_lib, "attention.out", "CompositeExplicitAutograd")
def _attention_out(q, k_cache, v_cache, start_pos, mask=None, *, out):
    out.copy_(reference_attention(q, k_cache, v_cache, start_pos, mask))
    return out


@torch.library.register_fake("edgespec::attention")
def _attention_fake(q, k_cache, v_cache, start_pos, mask=None):
    return torch.empty_like(q)


@torch.library.register_fake("edgespec::attention.out")
def _attention_out_fake(q, k_cache, v_cache, start_pos, mask=None, *, out):
    return out


def _block_linear_eager(x, weight, format, out_features, prologue=0, norm_weight=None, eps=0.0, residual=None):
    from edgespec.kernels.block_linear import FORMAT_IDS, reference_block_linear, unpack

    if prologue == PROLOGUES["rms_norm"]:
        x = reference_rms_norm(x, norm_weight, eps)
    elif prologue == PROLOGUES["swiglu"]:
        x = reference_silu_mul(*x.chunk(2, -1))
    name = {v: k for k, v in FORMAT_IDS.items()}[format]
    y = reference_block_linear(x, unpack(weight, name, out_features, x.shape[-1]))
    return y if residual is None else residual + y


@torch.library.impl(_lib, "block_linear", "CompositeExplicitAutograd")
def _block_linear(x, weight, format, out_features, prologue=0, norm_weight=None, eps=0.0, residual=None):
    return _block_linear_eager(x, weight, format, out_features, prologue, norm_weight, eps, residual)


@torch.library.impl(_lib, "block_linear.out", "CompositeExplicitAutograd")
def _block_linear_out(x, weight, format, out_features, prologue=0, norm_weight=None, eps=0.0, residual=None, *, out):
    out.copy_(_block_linear_eager(x, weight, format, out_features, prologue, norm_weight, eps, residual))
    return out


@torch.library.register_fake("edgespec::block_linear")
def _block_linear_fake(x, weight, format, out_features, prologue=0, norm_weight=None, eps=0.0, residual=None):
    return x.new_empty((*x.shape[:-1], out_features))


@torch.library.register_fake("edgespec::block_linear.out")
def _block_linear_out_fake(x, weight, format, out_features, prologue=0, norm_weight=None, eps=0.0, residual=None, *, out):
    return out


_lib.define("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor")
_lib.define("rms_norm.out(Tensor x, Tensor weight, float eps, *, Tensor(a!) out) -> Tensor(a!)")
_lib.define("rope(Tensor x, Tensor cos, Tensor sin) -> Tensor")
_lib.define("rope.out(Tensor x, Tensor cos, Tensor sin, *, Tensor(a!) out) -> Tensor(a!)")
_lib.define("silu_mul(Tensor a, Tensor b) -> Tensor")
_lib.define("silu_mul.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)")


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def reference_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x0, x1 = x[..., 0::2], x[..., 1::2]
    swapped = torch.stack([-x1, x0], -1).flatten(-2)
    return x * cos[None, :, None] + swapped * sin[None, :, None]


def reference_silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(a) * b


def _glue(name: str, ref) -> None:
    torch.library.impl(_lib, name, "CompositeExplicitAutograd")(ref)

    def out_variant(*args, out):
        out.copy_(ref(*args))
        return out

    torch.library.impl(_lib, f"{name}.out", "CompositeExplicitAutograd")(out_variant)
    torch.library.register_fake(f"edgespec::{name}")(lambda x, *rest: torch.empty_like(x))
    torch.library.register_fake(f"edgespec::{name}.out")(lambda *args, out: out)


_lib.define("argmax_rows(Tensor x) -> Tensor")
_lib.define("argmax_rows.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")


@torch.library.impl(_lib, "argmax_rows", "CompositeExplicitAutograd")
def _argmax_rows(x):
    return x.argmax(-1)


@torch.library.impl(_lib, "argmax_rows.out", "CompositeExplicitAutograd")
def _argmax_rows_out(x, *, out):
    out.copy_(x.argmax(-1))
    return out


torch.library.register_fake("edgespec::argmax_rows")(lambda x: x.new_empty(x.shape[:-1], dtype=torch.long))
torch.library.register_fake("edgespec::argmax_rows.out")(lambda x, *, out: out)


for _name, _ref in (("rms_norm", reference_rms_norm), ("rope", reference_rope), ("silu_mul", reference_silu_mul)):
    _glue(_name, _ref)


_BLOCK_ARGMAX_ARGS = "Tensor x, Tensor weight, int format, int out_features, Tensor? screen=None"
_lib.define(f"block_argmax({_BLOCK_ARGMAX_ARGS}) -> Tensor")
_lib.define(f"block_argmax.out({_BLOCK_ARGMAX_ARGS}, *, Tensor(a!) out) -> Tensor(a!)")


def _block_argmax_eager(x, weight, format, out_features, screen=None):
    return _block_linear_eager(x, weight, format, out_features).argmax(-1)  # the screen changes which outputs are read, not the index


@torch.library.impl(_lib, "block_argmax", "CompositeExplicitAutograd")
def _block_argmax(x, weight, format, out_features, screen=None):
    return _block_argmax_eager(x, weight, format, out_features, screen)


@torch.library.impl(_lib, "block_argmax.out", "CompositeExplicitAutograd")
def _block_argmax_out(x, weight, format, out_features, screen=None, *, out):
    out.copy_(_block_argmax_eager(x, weight, format, out_features, screen))
    return out


torch.library.register_fake("edgespec::block_argmax")(lambda x, *rest, **kw: x.new_empty(x.shape[:-1], dtype=torch.long))
torch.library.register_fake("edgespec::block_argmax.out")(lambda *args, out, **kw: out)
