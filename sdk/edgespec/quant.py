"""Quantization of a model for its program: torchao tensors, and GGUF blocks carried over.

`quantize_model_(model, cfg, blocks)` is the one entry point. For the weight-quantized schemes
(8da4w, 8da8w) every linear gets torchao's `IntxUnpackedToInt8Tensor` with dynamic int8
activations per token, the form XNNPACK lowers to its qd8 GEMMs. Where that tensor's codes
and scales come from:

- carried over (``quant.carry_blocks``, on by default): a linear whose source weight is a
  GGUF Q4_0/Q4_1 matrix (`edgespec.models.blocks`) keeps the file's own 4-bit codes and block
  scales, so the program computes with the model's weights, not a second rounding of them.
  Q4_1's asymmetric part becomes `BlockOffsetLinear`: y = W_sym x + C S(x), S(x) the sums of
  x over each block of 32, C = m + 8d [out, in/32] (two small fp32 linears: ~3% of the
  layer's multiply-adds, but three more XNNPACK ops per linear, ~15-20% of a token's time). XNNPACK stores block scales as bf16: the scales are rounded to
  bf16 here already, so eager code computes what the program does.
- rounded (everything else: fp32 sources, other GGUF types, `carry_blocks: false`): codes and
  scales chosen from the dequantized weights, max-abs per block (torchao's default) or the
  scale minimising each block's squared error (``quant.rounding: mse``).

The lm head has its own precision (``quant.head_bits``): it is 17% of the weights every token
reads and where a 4-bit rounding costs the most fidelity (docs/quantization.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from edgespec.config import QuantConfig
from edgespec.models.blocks import BLOCK, BlockWeights


@dataclass
class QuantSummary:
    """What quantization did, layer by layer: how each linear's weights were obtained."""

    carried: list[str] = field(default_factory=list)  # GGUF blocks kept (codes and scales of the file)
    rounded: list[str] = field(default_factory=list)  # codes and scales chosen here
    unquantized: list[str] = field(default_factory=list)  # left in the float dtype

    def as_dict(self) -> dict:
        return {"carried": len(self.carried), "rounded": len(self.rounded), "unquantized": len(self.unquantized), "rounded_layers": self.rounded[:8]}


class BlockOffsetLinear(nn.Module):
    """A linear with a per-block offset: y = linear(x) + offsets S(x).

    offsets [out, G]; S(x) [.., G] the sums of x over its G blocks of `BLOCK`, computed as a
    product with a constant 0/1 matrix so XNNPACK takes it (it has no sum op)."""

    def __init__(self, linear: nn.Module, offsets: torch.Tensor):
        super().__init__()
        self.linear = linear
        out, g = offsets.shape
        self.register_buffer("offsets", offsets.float().contiguous())
        self.register_buffer("block_sum", torch.eye(g).repeat_interleave(BLOCK, dim=1))  # [G, G * BLOCK]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + F.linear(F.linear(x, self.block_sum), self.offsets)


def mse_scales(w: torch.Tensor, bits: int, block: int, candidates: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric codes int8 [out, in] and scales [out, in / block] for w [out, in]: per block
    the scale, among `candidates` from 0.6 to 1.0 of max-abs / qmax, with the least squared
    error. 4-bit scales are rounded to bf16 first, the format XNNPACK keeps them in."""
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    out, n = w.shape
    wb = w.float().view(out, n // block, block)
    amax = wb.abs().amax(-1).clamp_min(1e-12)
    best_s, best_err = None, None
    for f in torch.linspace(0.6, 1.0, candidates):
        s = amax * f / qmax
        s = s.to(torch.bfloat16).float() if bits == 4 else s
        err = ((wb / s[..., None]).round().clamp(qmin, qmax) * s[..., None] - wb).pow(2).sum(-1)
        better = err < best_err if best_err is not None else torch.ones_like(err, dtype=torch.bool)
        best_s = s if best_s is None else torch.where(better, s, best_s)
        best_err = err if best_err is None else torch.where(better, err, best_err)
    return (wb / best_s[..., None]).round().clamp(qmin, qmax).to(torch.int8).view(out, n), best_s


def _quantize_linear(linear: nn.Linear, bits: int, block: int, blocks: BlockWeights | None, cfg: QuantConfig) -> tuple[nn.Module, bool]:
    """`linear` with int weights (in place where it can); True when the source blocks were kept."""
    from torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor import (
        IntxUnpackedToInt8Tensor,
        IntxUnpackedToInt8TensorActivationQuantization,
    )

    per_token = IntxUnpackedToInt8TensorActivationQuantization.INT8_ASYM_PER_TOKEN
    dtype = getattr(torch, f"int{bits}")
    carry = cfg.carry_blocks and blocks is not None and blocks.bits == bits == 4 and block == BLOCK
    if carry or cfg.rounding == "mse":
        codes, scales = (blocks.codes, blocks.scales.to(torch.bfloat16).float()) if carry else mse_scales(linear.weight.detach(), bits, block)
        zeros = torch.zeros(scales.shape, dtype=torch.int8)
        weight = IntxUnpackedToInt8Tensor(codes.contiguous(), scales.contiguous(), zeros, dtype, (1, block), torch.float32, per_token)
    else:  # torchao's own max-abs rounding
        weight = IntxUnpackedToInt8Tensor.from_hp(linear.weight.detach(), (1, block), dtype, activation_quantization=per_token)
    linear.weight = nn.Parameter(weight, requires_grad=False)
    if carry and blocks.offsets is not None:
        return BlockOffsetLinear(linear, blocks.offsets), True
    return linear, carry


def _weight_format(name: str, linear: nn.Linear, cfg: QuantConfig) -> tuple[int, int] | None:
    """(bits, block) of a linear's weights under the scheme; None leaves it in float. A block of
    `in_features` is one scale per output channel."""
    n = linear.in_features
    head = name == "output" or name.endswith(".output")
    if cfg.scheme == "8da8w" or (head and cfg.head_bits == 8):
        return 8, n
    if cfg.scheme == "8da4w":
        return (4, cfg.group_size) if n % cfg.group_size == 0 else None
    return None


def _untie_output_(model: nn.Module) -> None:
    """Give the lm head its own weight, so it and the embedding can be quantized differently."""
    out, emb = getattr(model, "output", None), getattr(model, "tok_embeddings", None)
    if out is not None and emb is not None and out.weight is emb.weight:
        out.weight = nn.Parameter(emb.weight.detach().clone(), requires_grad=False)


def _quantize_linears_(model: nn.Module, cfg: QuantConfig, blocks: Mapping[str, BlockWeights], summary: QuantSummary) -> None:
    _untie_output_(model)
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    for name, linear in targets:
        fmt = _weight_format(name, linear, cfg)
        if fmt is None:
            summary.unquantized.append(name)
            continue
        new, carried = _quantize_linear(linear, *fmt, blocks.get(f"{name}.weight"), cfg)
        (summary.carried if carried else summary.rounded).append(name)
        if new is not linear:
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, new)


def _quantize_embedding_(model: nn.Module, cfg: QuantConfig) -> None:
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    _untie_output_(model)
    quantize_(
        model,
        IntxWeightOnlyConfig(weight_dtype=getattr(torch, f"int{cfg.embedding_bits}"), granularity=PerGroup(cfg.group_size)),
        filter_fn=lambda m, fqn: isinstance(m, nn.Embedding),
    )


def _fp16(model: nn.Module, cfg: QuantConfig, blocks, summary: QuantSummary) -> None:
    model.to_half_()


SCHEMES: dict[str, Callable[[nn.Module, QuantConfig, Mapping[str, BlockWeights], QuantSummary], None]] = {
    "fp32": lambda *a: None,
    "fp16": _fp16,
    "8da4w": _quantize_linears_,
    "8da8w": _quantize_linears_,
}


def quantize_model_(model: nn.Module, cfg: QuantConfig, blocks: Mapping[str, BlockWeights] | None = None) -> QuantSummary:
    """Quantize `model` in place according to `cfg`. blocks: the source file's block-quantized
    weights by parameter name (`ModelSource.blocks`), carried over where the scheme allows."""
    summary = QuantSummary()
    if cfg.embedding_bits:
        _quantize_embedding_(model, cfg)
    SCHEMES[cfg.scheme](model, cfg, blocks or {}, summary)
    return summary
