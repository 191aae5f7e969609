"""The torch side of edgespec's kernels: op schemas for `torch.export`, a shape function for
tracing and a plain-PyTorch reference (eager calls). The runtime kernels are C++
(`attention.cpp`, loaded by `edgespec.kernels.library.load`).

`edgespec::attention(q [1, T, H, D], k_cache [1, S, Hkv, D], v_cache, start_pos, mask)`:
mask None = causal (row t sees keys [0, start_pos + t]); else an additive fp32 mask [T, N]
over keys [0, N), -inf = not visible. Per-row arithmetic independent of T: see attention.cpp.
"""

from __future__ import annotations

import torch

HEAD_SIZES = (16, 32, 48, 64, 96, 128, 256)  # what attention.cpp is compiled for

_lib = torch.library.Library("edgespec", "DEF")
_lib.define("attention(Tensor q, Tensor k_cache, Tensor v_cache, SymInt start_pos, Tensor? mask=None) -> Tensor")
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
