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

With ``quant.kernel: edgespec`` every such linear is instead a `BlockLinear`: edgespec's own
op over GGUF-style blocks with int8 activations per block of 32 (llama.cpp's arithmetic).
Q4_0/Q4_1/Q4_K/Q6_K/Q8_0 blocks of the file are carried exactly, the 4-bit mins included (no extra
ops); weights without blocks are rounded here to Q4_1-style blocks (fp16 scale and min per
32, min/max or least squared error) or Q8_0-style ones (8 bits).

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
from edgespec.kernels.block_linear import BlockCodes, BlockLinear
from edgespec.models.blocks import BLOCK, BlockWeights


@dataclass
class QuantSummary:
    """What quantization did, layer by layer: how each linear's weights were obtained."""

    carried: list[str] = field(default_factory=list)  # GGUF blocks kept (codes and scales of the file)
    rounded: list[str] = field(default_factory=list)  # codes and scales chosen here
    unquantized: list[str] = field(default_factory=list)  # left in the float dtype
    rounded_from: dict[str, int] = field(default_factory=dict)  # rounded layers by the file's storage type (Q6_K, F32, ...)

    def as_dict(self) -> dict:
        return {
            "carried": len(self.carried),
            "rounded": len(self.rounded),
            "unquantized": len(self.unquantized),
            "rounded_layers": self.rounded[:8],
            "rounded_from": dict(sorted(self.rounded_from.items())),
        }


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
    carry = cfg.carry_blocks and blocks is not None and blocks.format in ("Q4_0", "Q4_1") and bits == 4 and block == BLOCK
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


def asymmetric_blocks(w: torch.Tensor, rounding: str = "maxabs", candidates: int = 20) -> BlockCodes:
    """Q4_1-style blocks for w [out, in]: per block of 32, w ~ d q + m with q in 0..15 and d, m
    fp16. ``maxabs``: the block's min and max span the grid; ``mse``: among `candidates`
    shrinkings of that span (centred), the one with the least squared error."""
    out, n = w.shape
    wb = w.float().view(out, n // BLOCK, BLOCK)
    lo, hi = wb.amin(-1), wb.amax(-1)
    best = None
    for f in torch.linspace(1.0, 0.7, candidates if rounding == "mse" else 1):
        span = (hi - lo) * f
        d = (span / 15).half().float()
        m = (lo + (hi - lo - span) / 2).half().float()
        safe = torch.where(d > 0, d, torch.ones_like(d))
        q = ((wb - m[..., None]) / safe[..., None]).round().clamp(0, 15)
        err = (q * d[..., None] + m[..., None] - wb).pow(2).sum(-1)
        if best is None:
            best = [q, d, m, err]
        else:
            better = err < best[3]
            best = [torch.where(better[..., None], q, best[0]), torch.where(better, d, best[1]), torch.where(better, m, best[2]), torch.minimum(err, best[3])]
    q, d, m, _ = best
    return BlockCodes("U4H", q.to(torch.int8).view(out, n), d, m)


def symmetric8_blocks(w: torch.Tensor) -> BlockCodes:
    """Q8_0-style blocks for w [out, in]: per block of 32, w ~ d q, q in -127..127, d fp16."""
    out, n = w.shape
    wb = w.float().view(out, n // BLOCK, BLOCK)
    d = (wb.abs().amax(-1) / 127).half().float()
    q = (wb / torch.where(d > 0, d, torch.ones_like(d))[..., None]).round().clamp(-127, 127)
    return BlockCodes("S8H", q.to(torch.int8).view(out, n), d)


def carried_codes(blocks: BlockWeights) -> BlockCodes:
    """A file's Q4_0 / Q4_1 / Q4_K / Q6_K / Q8_0 blocks in the kernel's terms, exactly
    (`BlockWeights` writes 4-bit codes centred, q - 8): fp16 scales as U4H, Q4_K's products
    d sc as U4F, Q6_K's scale per 16 as S8F."""
    if blocks.format == "Q6_K":
        return BlockCodes("S8F", blocks.codes, blocks.scales)
    if blocks.bits == 8:
        return BlockCodes("S8H", blocks.codes, blocks.scales)
    m = blocks.mins if blocks.mins is not None else -8 * blocks.scales
    fp16 = bool((blocks.scales.half().float() == blocks.scales).all() and (m.half().float() == m).all())
    return BlockCodes("U4H" if fp16 else "U4F", (blocks.codes + 8).to(torch.int8), blocks.scales, m)


def _block_linear(linear: nn.Linear, bits: int, block: int, blocks: BlockWeights | None, cfg: QuantConfig) -> tuple[nn.Module, bool]:
    """`linear` as a `BlockLinear` (edgespec's kernel, blocks of 32); True when the source
    blocks were kept: a file's blocks are kept whatever the scheme's bits (the kernel computes
    every carried format as it is)."""
    if cfg.carry_blocks and blocks is not None:
        return BlockLinear(carried_codes(blocks)), True
    w = linear.weight.detach()
    return BlockLinear(asymmetric_blocks(w, cfg.rounding) if bits == 4 else symmetric8_blocks(w)), False


def _weight_format(name: str, linear: nn.Linear, cfg: QuantConfig) -> tuple[int, int] | None:
    """(bits, block) of a linear's weights under the scheme; None leaves it in float. A block of
    `in_features` is one scale per output channel."""
    n = linear.in_features
    if cfg.block_kernel and (linear.bias is not None or n % BLOCK):
        return None  # the block kernel has no bias and needs whole blocks
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


def _quantize_linears_(model: nn.Module, cfg: QuantConfig, blocks: Mapping[str, BlockWeights], summary: QuantSummary, file_types: Mapping[str, str]) -> None:
    _untie_output_(model)
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    for name, linear in targets:
        fmt = _weight_format(name, linear, cfg)
        if fmt is None:
            summary.unquantized.append(name)
            continue
        quantize = _block_linear if cfg.block_kernel else _quantize_linear
        new, carried = quantize(linear, *fmt, blocks.get(f"{name}.weight"), cfg)
        (summary.carried if carried else summary.rounded).append(name)
        if not carried and f"{name}.weight" in file_types:
            t = file_types[f"{name}.weight"]
            summary.rounded_from[t] = summary.rounded_from.get(t, 0) + 1
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


def _fp16(model: nn.Module, cfg: QuantConfig, blocks, summary: QuantSummary, file_types) -> None:
    model.to_half_()


SCHEMES: dict[str, Callable[[nn.Module, QuantConfig, Mapping[str, BlockWeights], QuantSummary, Mapping[str, str]], None]] = {
    "fp32": lambda *a: None,
    "fp16": _fp16,
    "8da4w": _quantize_linears_,
    "8da8w": _quantize_linears_,
}


def quantize_model_(
    model: nn.Module, cfg: QuantConfig, blocks: Mapping[str, BlockWeights] | None = None, file_types: Mapping[str, str] | None = None
) -> QuantSummary:
    """Quantize `model` in place according to `cfg`. blocks: the source file's block-quantized
    weights by parameter name (`ModelSource.blocks`), carried over where the scheme allows;
    file_types: the file's storage type of each weight (`ModelSource.file_types`), which the
    summary counts the rounded layers by."""
    summary = QuantSummary()
    if cfg.embedding_bits:
        _quantize_embedding_(model, cfg)
    SCHEMES[cfg.scheme](model, cfg, blocks or {}, summary, file_types or {})
    return summary
