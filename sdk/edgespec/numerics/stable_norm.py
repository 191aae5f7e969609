"""Norm layers that stay finite and normal in low precision, and the transform that swaps
them into a loaded model (speculative-stream layers share the base layers' norms, so they
are covered too).

`StableNorm` computes, in the dtype of its input (no upcast):

    c   = x - mean(x)            (LayerNorm)   or   c = x   (RMSNorm)
    s   = 2^(round(log2 M_q(c)) + log2_k)       (q = inf: max |c|; q = 1: mean |c|)
        | 2^log2_k                              (constant, calibrated)
        | 1                                     (none)
    xs  = c / s                                 (exact: s is a power of two)
    y   = xs * ((1/d) sum |xs|^p + eps / s^p)^(-1/p) * weight (+ bias)

The length-d work (|xs|^p and its sum) runs in the input's dtype -- that is where overflow
and underflow live; the one scalar per row (eps / s^p, the root) is computed in fp32.

which equals the layer's fp32 output up to rounding (eps rescaled, see prenorm.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

Prenorm = Literal["none", "const", "l1", "linf"]


@dataclass(frozen=True)
class NormChoice:
    """What the search picked for one norm layer."""

    prenorm: Prenorm
    log2_k: int = 0


class StableNorm(nn.Module):
    def __init__(
        self,
        weight: torch.Tensor,
        eps: float,
        p: float = 2.0,
        choice: NormChoice = NormChoice("none"),
        zero_mean: bool = False,
        bias: torch.Tensor | None = None,
    ):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.eps, self.p, self.choice, self.zero_mean = eps, p, choice, zero_mean

    def log2_scale(self, c: torch.Tensor) -> torch.Tensor | None:
        """log2 of the pre-normalizer s per row ([..., 1], fp32), or None for none."""
        kind = self.choice.prenorm
        if kind == "none":
            return None
        if kind == "const":
            return torch.full_like(c[..., :1], float(self.choice.log2_k), dtype=torch.float32)
        a = c.abs()
        # q = 1 as a sum of a / d: every partial sum stays <= max |c|, so it cannot overflow
        m = a.amax(-1, keepdim=True) if kind == "linf" else (a / c.shape[-1]).sum(-1, keepdim=True)
        m = m.float()
        return torch.round(torch.log2(torch.where(m > 0, m, torch.ones_like(m)))) + self.choice.log2_k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x - x.mean(-1, keepdim=True) if self.zero_mean else x
        e = self.log2_scale(c)
        if e is None:
            xs, eps = c, torch.full_like(c[..., :1], self.eps, dtype=torch.float32)
        else:
            # c / s as two multiplications by powers of two that are each representable in
            # the input's format (s itself, or 1 / s, may not be); exact but for subnormals
            e1 = torch.floor(-e / 2)
            xs = c * torch.pow(2.0, e1).to(c.dtype) * torch.pow(2.0, -e - e1).to(c.dtype)
            eps = self.eps * torch.pow(2.0, -self.p * e)  # eps / s^p, kept in fp32
        t = xs * xs if self.p == 2 else xs.abs() ** self.p
        # the d-length reduction runs in the input's format; the per-row scalar in fp32
        factor = torch.pow(t.mean(-1, keepdim=True).float() + eps, -1.0 / self.p)
        y = xs * factor.to(xs.dtype) * self.weight
        return y if self.bias is None else y + self.bias


def stabilize_norms_(model: nn.Module, choices: dict[str, NormChoice] | NormChoice) -> nn.Module:
    """Replace every RMSNorm / LayerNorm of `model` (in place) by a StableNorm.

    choices: one NormChoice for all layers, or one per module name (as in named_modules).
    """
    from edgespec.models.llama import RMSNorm

    targets = [(n, m) for n, m in model.named_modules() if isinstance(m, (RMSNorm, nn.LayerNorm))]
    for name, mod in targets:
        choice = choices if isinstance(choices, NormChoice) else choices.get(name, NormChoice("none"))
        if isinstance(mod, RMSNorm):
            new = StableNorm(mod.weight, mod.eps, 2.0, choice)
        else:
            new = StableNorm(mod.weight, mod.eps, 2.0, choice, zero_mean=True, bias=mod.bias)
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, new)
    return model
