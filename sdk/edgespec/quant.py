"""Quantization of a program as one pass: a plan of what each module gets, applied in place.

`plan_quantization(program, cfg, blocks, file_types, base)` computes the `QuantPlan` of a
program (the base model, and its drafter when it has one) from the recipe's `QuantConfig`,
the source file's blocks and the `QuantPolicy` each other part of the program declares (its
class's ``quant_policy``: a drafter's parameters, the draft head). `quantize_(program, plan)`
applies it, torchao-style (the ``_``: in place), and returns what the manifest records
(`QuantSummary`: the base model's linears). A module's weight is:

- carried (`Carried`; ``quant.carry_blocks``, on by default): a linear whose source weight is
  GGUF blocks (`edgespec.models.blocks`) keeps the file's own codes and scales, so the program
  computes with the model's weights, not a second rounding of them.
- rounded (`Rounded`; everything else in 8da4w / 8da8w: fp32 sources, other GGUF types,
  ``carry_blocks: false``, the drafter's linears; the embedding with ``quant.embedding_bits``):
  codes and scales chosen here from the float weights.
- left in float (`Unquantized`: a linear the kernel cannot take; no rule: fp32 and fp16
  programs, parts whose policy keeps them float). In an fp16 program every part is then cast
  to fp16 (`QuantPlan.half`).

With ``quant.kernel: xnnpack`` a linear's weight becomes torchao's `IntxUnpackedToInt8Tensor`
with dynamic int8 activations per token, the form XNNPACK lowers to its qd8 GEMMs. Carried:
GGUF Q4_0/Q4_1 only, the scales rounded to bf16 (XNNPACK stores block scales as bf16, so eager
code computes what the program does); Q4_1's asymmetric part becomes `BlockOffsetLinear`:
y = W_sym x + C S(x), S(x) the sums of x over each block of 32, C = m + 8d [out, in/32] (two
small fp32 linears: ~3% of the layer's multiply-adds, but three more XNNPACK ops per linear,
~15-20% of a token's time). Rounded: max-abs per block (torchao's default) or the scale
minimising each block's squared error (``quant.rounding: mse``).

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
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from edgespec.config import QuantConfig
from edgespec.kernels.block_formats import BLOCK, GGUF_TYPES
from edgespec.kernels.block_linear import BlockCodes, BlockEmbedding, BlockLinear
from edgespec.models.blocks import BlockWeights
from edgespec.models.llama import half_kv_cache_

Reader = Literal["edgespec", "xnnpack", "lookup"]
"""What computes with a weight: a linear kernel (edgespec's block kernel, XNNPACK's GEMMs) or,
for an embedding table, a lookup of rows (no activations to quantize)."""
XNNPACK_CARRIED = tuple(
    t.name for t in GGUF_TYPES.values() if t.xnnpack
)  # the file's block types an XNNPACK program carries (4-bit, symmetric codes + offsets)


@dataclass
class QuantSummary:
    """What quantization did, layer by layer: how each linear's weights were obtained (every
    linear of the base model is in exactly one of carried, rounded, unquantized)."""

    carried: list[str] = field(default_factory=list)  # GGUF blocks kept (codes and scales of the file)
    rounded: list[str] = field(default_factory=list)  # codes and scales chosen here
    unquantized: list[str] = field(default_factory=list)  # left in the float dtype
    rounded_from: dict[str, int] = field(default_factory=dict)  # rounded layers by the file's storage type (Q6_K, F32, ...)
    # what rounding again cost, by the file's storage type: ||W' - W|| / ||W|| over those layers (W the file's weights)
    rounding_error: dict[str, float] = field(default_factory=dict)
    formats: dict[str, int] = field(default_factory=dict)  # linears by the weight format the program computes with (`Rule.label`)
    head: str = "float"  # the lm head's format (`Rule.label`)
    embedding: str = "float"  # the embedding table's
    screened_head: bool = False  # the head's 5-bit screen is stored (quant.head_screen)

    def as_dict(self) -> dict:
        return {
            "carried": len(self.carried),
            "rounded": len(self.rounded),
            "unquantized": len(self.unquantized),
            "rounded_layers": list(self.rounded),
            "unquantized_layers": list(self.unquantized),
            "rounded_from": dict(sorted(self.rounded_from.items())),
            "rounding_error": {k: round(v, 5) for k, v in sorted(self.rounding_error.items())},
            "formats": dict(sorted(self.formats.items(), key=lambda kv: -kv[1])),
            "head": self.head,
            "embedding": self.embedding,
            "screened_head": self.screened_head,
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


# a file's block type -> the kernel format that computes its blocks exactly: every type
# edgespec's kernel carries (U4: U4H where the scales and mins are fp16 values, else U4F)
KERNEL_CARRIED = {t.name: t.kernel for t in GGUF_TYPES.values()}


@dataclass(frozen=True)
class ProgramKernels:
    """What a program's linears and embedding compute with under one `QuantConfig`: the
    consequences of ``quant.kernel``, decided by `program_kernels` only (the quantization plan,
    the export's swaps and the manifest read them).

    linears: ``edgespec`` (`BlockLinear`, edgespec's block kernel), ``xnnpack`` (torchao's
    tensors lowered to XNNPACK) or ``float`` (fp32 and fp16 programs); carried: the file's
    block types its linears keep as they are (``quant.carry_blocks``); table_from_blocks: an
    embedding table stored in a carried type is read from its blocks (`BlockEmbedding`), with
    ``quant.embedding_bits: 0``; glue: the norms, rotations and gates between the linears are
    edgespec's ops too (the program needs edgespec's library anyway)."""

    linears: Literal["edgespec", "xnnpack", "float"]
    carried: tuple[str, ...] = ()
    table_from_blocks: bool = False

    @property
    def glue(self) -> bool:
        return self.linears == "edgespec"


def program_kernels(cfg: QuantConfig) -> ProgramKernels:
    """`ProgramKernels` of a program quantized by `cfg`."""
    if not cfg.int8_activations:
        return ProgramKernels("float")
    if cfg.kernel == "xnnpack":
        return ProgramKernels("xnnpack", XNNPACK_CARRIED if cfg.carry_blocks else ())
    carried = tuple(KERNEL_CARRIED) if cfg.carry_blocks else ()
    return ProgramKernels("edgespec", carried, table_from_blocks=bool(carried) and cfg.embedding_bits == 0)


def carried_codes(b: BlockWeights) -> BlockCodes:
    """A file's blocks in the kernel's terms, exactly (`KERNEL_CARRIED`). `BlockWeights` writes
    codes centred; formats with a min take them unsigned, q = code + 2^(bits-1), with
    w = d q + m (Q4_0's m = -8 d)."""
    kind = KERNEL_CARRIED[b.format]
    if kind in ("S8H", "S8F"):
        return BlockCodes(kind, b.codes, b.scales)
    half = 2 ** (b.bits - 1)
    m = b.mins if b.mins is not None else -half * b.scales
    if kind == "U4":
        kind = "U4H" if bool((b.scales.half().float() == b.scales).all() and (m.half().float() == m).all()) else "U4F"
    return BlockCodes(kind, (b.codes + half).to(torch.int8), b.scales, m)


@dataclass(frozen=True)
class QuantPolicy:
    """How a part of a program is quantized, relative to the recipe's `QuantConfig`: a module
    class declares it as its ``quant_policy`` (a drafter's parameters, the draft head); the base
    model follows the recipe as it is (``QuantPolicy()``).

    weights: ``scheme``, its linears and embeddings quantized by the recipe's scheme like the
    base model's (no source blocks: those name the base model's weights); ``int8``, its linears
    with 8-bit weights under an 8da scheme (8da8w's rounding: Q8_0-style blocks on edgespec's
    kernel), float in a float program; ``float``, left in float, in the activations' dtype (fp16
    in an fp16 program). head_bits: the bits of its lm head (a linear named ``output``) whatever
    ``quant.head_bits``; None: the recipe's."""

    weights: Literal["scheme", "int8", "float"] = "scheme"
    head_bits: int | None = None

    def __post_init__(self) -> None:
        if self.weights not in ("scheme", "int8", "float"):
            raise ValueError(f"QuantPolicy.weights must be 'scheme', 'int8' or 'float', got {self.weights!r}")
        if self.head_bits not in (None, 4, 8):
            raise ValueError(f"QuantPolicy.head_bits must be None, 4 or 8, got {self.head_bits!r}")


def _torchao_intx():
    """torchao's int tensor type and its dynamic int8 activations per token (the form XNNPACK
    lowers to its qd8 GEMMs); imported when used, torchao is heavy."""
    from torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor import (
        IntxUnpackedToInt8Tensor,
        IntxUnpackedToInt8TensorActivationQuantization,
    )

    return IntxUnpackedToInt8Tensor, IntxUnpackedToInt8TensorActivationQuantization.INT8_ASYM_PER_TOKEN


def _intx_weight(codes: torch.Tensor, scales: torch.Tensor, bits: int, block: int) -> nn.Parameter:
    """torchao's int tensor of symmetric codes [out, in] and scales [out, in / block], with
    dynamic int8 activations per token."""
    intx, per_token = _torchao_intx()
    zeros = torch.zeros(scales.shape, dtype=torch.int8)
    weight = intx(codes.contiguous(), scales.contiguous(), zeros, getattr(torch, f"int{bits}"), (1, block), torch.float32, per_token)
    return nn.Parameter(weight, requires_grad=False)


CARRIED_LABEL = "(the file's blocks)"  # how a carried weight's format ends (`Carried.label`), e.g. "Q8_0 (the file's blocks)"


@dataclass(frozen=True)
class Carried:
    """A weight that keeps the source file's blocks: the file's codes and scales, no second
    rounding. format: the file's block type (Q4_0, Q4_1; with edgespec's kernel every type of
    `KERNEL_CARRIED`). reader ``lookup``: an embedding table whose rows are read from the
    blocks (`BlockEmbedding`, a program of edgespec's kernel; a tied head carries the same
    bytes, stored once)."""

    format: str
    reader: Reader
    blocks: BlockWeights = field(compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.format != self.blocks.format:
            raise ValueError(f"Carried: format {self.format} but blocks of {self.blocks.format}")
        carries = {"edgespec": KERNEL_CARRIED, "lookup": KERNEL_CARRIED, "xnnpack": XNNPACK_CARRIED}.get(self.reader, ())
        if self.format not in carries:
            raise ValueError(f"Carried: {self.reader!r} does not carry {self.format} blocks")

    def label(self) -> str:
        """The weight format, as `edgespec info` names it."""
        return f"{self.format} {CARRIED_LABEL}"

    def apply(self, linear: nn.Module) -> nn.Module:
        """The linear (or embedding) computing with the file's blocks (in place where it can)."""
        b = self.blocks
        if self.reader == "lookup":
            return BlockEmbedding(carried_codes(b))
        if self.reader == "edgespec":
            return BlockLinear(carried_codes(b), linear.bias)
        linear.weight = _intx_weight(b.codes, b.scales.to(torch.bfloat16).float(), b.bits, BLOCK)
        return linear if b.offsets is None else BlockOffsetLinear(linear, b.offsets)


@dataclass(frozen=True)
class Rounded:
    """A weight whose codes and scales are chosen here from its float values: `bits`-bit codes
    with a scale per `block` input elements (a linear's in_features: one per output channel),
    for `reader`. rounding: ``maxabs`` or ``mse`` (least squared error per block); source: the
    file's storage type of the weight (F32, Q6_K, ...), None when it is not the file's."""

    bits: int
    block: int
    reader: Reader
    rounding: Literal["maxabs", "mse"] = "maxabs"
    source: str | None = None

    def __post_init__(self) -> None:
        if self.bits not in (4, 8) or self.block <= 0:
            raise ValueError(f"Rounded: {self.bits} bits per {self.block} elements (4 or 8 bits, a positive block)")
        if self.reader not in _ROUNDERS or self.rounding not in ("maxabs", "mse"):
            raise ValueError(f"Rounded: unknown reader {self.reader!r} or rounding {self.rounding!r}")
        if self.reader == "edgespec" and self.block != BLOCK:
            raise ValueError(f"Rounded: edgespec's kernel rounds blocks of {BLOCK}, not {self.block}")
        if self.rounding == "mse" and (self.reader == "lookup" or (self.reader == "edgespec" and self.bits == 8)):
            raise ValueError(f"Rounded: no mse rounding for {self.bits}-bit {self.reader} weights")

    def label(self) -> str:
        """The weight format, as `edgespec info` names it."""
        form = {4: "Q4_1-style", 8: "Q8_0-style"}[self.bits] if self.reader == "edgespec" else f"int{self.bits} per {self.block}"
        return f"{form} (rounded from {self.source or 'float'})"

    def apply(self, module: nn.Module) -> nn.Module:
        """The module with its weight rounded (in place where it can)."""
        return _ROUNDERS[self.reader](module, self)


def _round_xnnpack(linear: nn.Linear, r: Rounded) -> nn.Module:
    w = linear.weight.detach()
    if r.rounding == "mse":
        linear.weight = _intx_weight(*mse_scales(w, r.bits, r.block), r.bits, r.block)
    else:  # torchao's own max-abs rounding
        intx, per_token = _torchao_intx()
        linear.weight = nn.Parameter(intx.from_hp(w, (1, r.block), getattr(torch, f"int{r.bits}"), activation_quantization=per_token), requires_grad=False)
    return linear


def _round_edgespec(linear: nn.Linear, r: Rounded) -> nn.Module:
    w = linear.weight.detach()
    return BlockLinear(asymmetric_blocks(w, r.rounding) if r.bits == 4 else symmetric8_blocks(w), linear.bias)


def _round_lookup(embedding: nn.Embedding, r: Rounded) -> nn.Module:
    """torchao's weight-only int tensor, max-abs per block (what `quantize_` of torchao's
    `IntxWeightOnlyConfig` makes)."""
    intx, _ = _torchao_intx()
    embedding.weight = nn.Parameter(intx.from_hp(embedding.weight.detach(), (1, r.block), getattr(torch, f"int{r.bits}")), requires_grad=False)
    return embedding


_ROUNDERS: dict[str, Callable[[nn.Module, Rounded], nn.Module]] = {"xnnpack": _round_xnnpack, "edgespec": _round_edgespec, "lookup": _round_lookup}


@dataclass(frozen=True)
class Unquantized:
    """A linear the scheme leaves in float: edgespec's kernel takes no bias and only whole
    blocks of 32; 8da4w needs in_features a multiple of group_size."""

    def label(self) -> str:
        return "float"

    def apply(self, module: nn.Module) -> nn.Module:
        return module


Rule = Carried | Rounded | Unquantized


@dataclass(frozen=True)
class QuantPlan:
    """What quantization does to each module of a program (`plan_quantization`, applied by
    `quantize_`). rules: module name -> its weight's rule, in the program's module order;
    half: the parts cast to fp16 after the rules (an fp16 program), each by its own
    ``to_half_`` where it has one (a Transformer keeps RoPE and its KV cache fp32), else
    `nn.Module.half`; base: the base model's name in the program ("" the program itself),
    whose linears the summary counts; screened: the lm heads (S8H block linears) given a
    5-bit screen after the rules (``quant.head_screen``, `BlockLinear.add_screen_`);
    fp16_kv_cache: the models whose KV caches are then stored in fp16 (``quant.kv_cache``,
    `edgespec.models.llama.half_kv_cache_`)."""

    rules: Mapping[str, Rule]
    half: tuple[str, ...] = ()
    base: str = ""
    screened: tuple[str, ...] = ()  # the lm heads whose 5-bit screen the program stores (quant.head_screen)
    fp16_kv_cache: tuple[str, ...] = ()  # the models whose attention caches are stored in fp16 (quant.kv_cache)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", MappingProxyType(dict(self.rules)))  # frozen all the way down
        bad = [n for n, r in self.rules.items() if not isinstance(r, Rule)]
        if bad:
            raise ValueError(f"QuantPlan: {bad[0]} has no rule of quant ({self.rules[bad[0]]!r})")

    def summary(self) -> QuantSummary:
        """The base model's linears (names within it) by how their weights are obtained: what
        the manifest records."""
        prefix = f"{self.base}." if self.base else ""
        s = QuantSummary(screened_head=f"{prefix}output" in self.screened)
        for name, rule in self.rules.items():
            if not name.startswith(prefix):
                continue  # another part's
            local = name[len(prefix) :]
            if getattr(rule, "reader", None) == "lookup":  # the embedding (not a linear)
                s.embedding = rule.label()
                continue
            s.formats[rule.label()] = s.formats.get(rule.label(), 0) + 1
            if local == "output":
                s.head = rule.label()
            if isinstance(rule, Carried):
                s.carried.append(local)
            elif isinstance(rule, Unquantized):
                s.unquantized.append(local)
            else:
                s.rounded.append(local)
                if rule.source is not None:
                    s.rounded_from[rule.source] = s.rounded_from.get(rule.source, 0) + 1
        return s


def _linear_rule(name: str, linear: nn.Linear, cfg: QuantConfig, head_bits: int, blocks: BlockWeights | None, source: str | None) -> Rule | None:
    """The rule of one linear under an 8da4w / 8da8w scheme (None: fp32 and fp16 keep linears
    float). blocks, source: the file's blocks and storage type of its weight (None: not the file's)."""
    kernels = program_kernels(cfg)
    if kernels.linears == "float":
        return None
    n = linear.in_features
    if kernels.linears == "edgespec" and n % BLOCK:
        return Unquantized()
    head = name == "output" or name.endswith(".output")
    if cfg.scheme == "8da8w" or (head and head_bits == 8):
        bits, block = 8, n  # one scale per output channel
    elif n % cfg.group_size:
        return Unquantized()
    else:
        bits, block = 4, cfg.group_size
    carried = blocks is not None and blocks.format in kernels.carried
    if kernels.linears == "edgespec":  # a file's blocks are kept whatever the bits: the kernel computes each carried format as it is
        if carried:
            return Carried(blocks.format, "edgespec", blocks)
        return Rounded(bits, BLOCK, "edgespec", cfg.rounding if bits == 4 else "maxabs", source)  # 8 bits: Q8_0-style max-abs
    if carried and (bits, block) == (4, BLOCK):
        return Carried(blocks.format, "xnnpack", blocks)
    return Rounded(bits, block, "xnnpack", cfg.rounding, source)


def _embedding_rule(cfg: QuantConfig, blocks: BlockWeights | None, source: str | None) -> Rule | None:
    """The rule of an embedding table: rounded to ``quant.embedding_bits``; else (0) as the file
    stores it: its blocks where edgespec's kernel carries them (a program of the block kernel with
    ``carry_blocks``), fp32 otherwise (None)."""
    if cfg.embedding_bits:
        return Rounded(cfg.embedding_bits, cfg.group_size, "lookup", "maxabs", source)
    kernels = program_kernels(cfg)
    if kernels.table_from_blocks and blocks is not None and blocks.format in kernels.carried:
        return Carried(blocks.format, "lookup", blocks)
    return None


def _name_in(program: nn.Module, module: nn.Module) -> str:
    for name, m in program.named_modules():
        if m is module:
            return name
    raise ValueError("plan_quantization: the base model is not a module of the program")


def _part_of(name: str, parts: Mapping[str, QuantPolicy]) -> str | None:
    """The innermost part (a name in `parts`) module `name` belongs to."""
    inside = [p for p in parts if p == "" or name == p or name.startswith(f"{p}.")]
    return max(inside, key=len, default=None)


def plan_quantization(
    program: nn.Module,
    cfg: QuantConfig,
    blocks: Mapping[str, BlockWeights] | None = None,
    file_types: Mapping[str, str] | None = None,
    base: nn.Module | None = None,
) -> QuantPlan:
    """The `QuantPlan` of `program` under `cfg`. base: the source's model in the program (None:
    the program itself), the one `blocks` (`ModelSource.blocks`: the file's block-quantized
    weights by parameter name, carried where the scheme allows) and `file_types`
    (`ModelSource.file_types`: the file's storage type of each weight, which the summary counts
    rounded layers by) name; it follows the recipe as it is. Every other module holding
    parameters must be inside a part that declares its ``quant_policy`` (`QuantPolicy`)."""
    blocks, file_types = blocks or {}, file_types or {}
    base_name = _name_in(program, base if base is not None else program)
    parts: dict[str, QuantPolicy] = {base_name: QuantPolicy()}
    for name, m in program.named_modules():
        declared = getattr(type(m), "quant_policy", None)
        if declared is not None:
            if not isinstance(declared, QuantPolicy):
                raise ValueError(f"{type(m).__name__}.quant_policy must be a QuantPolicy, got {declared!r}")
            parts[name] = declared
    prefix = f"{base_name}." if base_name else ""
    rules: dict[str, Rule] = {}
    for name, m in program.named_modules():
        part = _part_of(name, parts)
        if part is None:
            if next(m.parameters(recurse=False), None) is not None:
                raise ValueError(f"plan_quantization: {name} ({type(m).__name__}) holds weights but no part it is in declares a quant_policy")
            continue
        policy = parts[part]
        if policy.weights == "float":
            continue
        key = f"{name[len(prefix) :]}.weight" if part == base_name else None  # the source names the base model's weights only
        source = file_types.get(key) if key is not None else None
        rule = None
        if isinstance(m, nn.Linear):
            part_cfg = replace(cfg, scheme="8da8w") if policy.weights == "int8" and cfg.int8_activations else cfg
            rule = _linear_rule(name, m, part_cfg, policy.head_bits or cfg.head_bits, blocks.get(key) if key is not None else None, source)
        elif isinstance(m, nn.Embedding):
            rule = _embedding_rule(cfg, blocks.get(key) if key is not None else None, source)
        if rule is not None:
            rules[name] = rule
    half = tuple(sorted(parts, key=len)) if cfg.scheme == "fp16" else ()  # outer parts first
    screened = (_screened_head(f"{prefix}output", rules.get(f"{prefix}output")),) if cfg.head_screen else ()
    return QuantPlan(rules, half, base_name, screened, (base_name,) if cfg.kv_cache == "fp16" else ())


def _screened_head(name: str, rule: Rule | None) -> str:
    """The lm head `name` that ``quant.head_screen`` screens, checked: the screen is of Q8_0-style
    (S8H) blocks, the form of a carried Q8_0 or Q5_0 head or one rounded to 8 bits."""
    s8h = (isinstance(rule, Carried) and rule.reader == "edgespec" and KERNEL_CARRIED[rule.format] == "S8H") or (
        isinstance(rule, Rounded) and rule.reader == "edgespec" and rule.bits == 8
    )
    if not s8h:
        from edgespec.errors import EdgespecError

        what = "float" if rule is None else rule.label()
        raise EdgespecError(f"quant.head_screen screens a Q8_0-style (S8H) lm head; this model's head would be {what}: set quant.head_screen false")
    return name


def _untie_(program: nn.Module, names) -> None:
    """A weight shared by modules (a tied lm head and embedding) of which one gets a rule: each
    holder gets a copy of its own, so they can be quantized differently."""
    holders: dict[int, list[nn.Module]] = {}
    for m in program.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            holders.setdefault(id(m.weight), []).append(m)
    for name in names:
        shared = holders.pop(id(program.get_submodule(name).weight), [])
        for m in shared if len(shared) > 1 else ():
            m.weight = nn.Parameter(m.weight.detach().clone(), requires_grad=False)


def quantize_(program: nn.Module, plan: QuantPlan) -> QuantSummary:
    """Apply `plan` to `program` in place: each module's rule (a carried or rounded linear may
    be replaced by another module under the same name), then the fp16 casts. Returns
    `plan.summary()`, with what rounding the file's weights again cost (`rounding_error`)."""
    _untie_(program, [n for n, r in plan.rules.items() if not isinstance(r, Unquantized)])
    summary = plan.summary()
    prefix = f"{plan.base}." if plan.base else ""
    counted = {prefix + n for n in summary.rounded}  # the linears the summary counts by source type
    squares: dict[str, list[float]] = {}  # source type -> [sum (W' - W)^2, sum W^2] of those rounded again
    for name, rule in plan.rules.items():
        module = program.get_submodule(name)
        before = module.weight.detach().float().clone() if name in counted and rule.source is not None else None
        new = rule.apply(module)
        if new is not module:
            parent, _, child = name.rpartition(".")
            setattr(program.get_submodule(parent), child, new)
        if before is not None:
            acc = squares.setdefault(rule.source, [0.0, 0.0])
            acc[0] += (_computed_weight(new) - before).pow(2).sum().item()
            acc[1] += before.pow(2).sum().item()
    for name in plan.screened:
        program.get_submodule(name).add_screen_()
    for name in plan.fp16_kv_cache:
        half_kv_cache_(program.get_submodule(name))
    for name in plan.half:
        part = program.get_submodule(name)
        getattr(part, "to_half_", part.half)()
    summary.rounding_error = {t: (err / max(norm, 1e-30)) ** 0.5 for t, (err, norm) in squares.items()}
    return summary


def _computed_weight(module: nn.Module) -> torch.Tensor:
    """The float weight a quantized linear computes with [out, in]."""
    if isinstance(module, BlockLinear):
        return module.blocks.dequantize()
    w = module.weight.detach()
    return w.dequantize().float() if type(w) not in (torch.Tensor, nn.Parameter) else w.float()
