"""Linear layers over GGUF-style weight blocks: the packed weights edgespec's kernel streams
(`block_linear.h`), their eager reference, and `BlockLinear`, the module a quantized model
holds.

    y[i, n] = sum_g  (d_w[n,g] d_x[i,g]) dot(q_w[n,g], q_x[i,g]) + m_w[n,g] s_x[i,g]

over blocks g of 32 input channels in ascending order, the activations quantized once per
call to int8 per block of 32 (llama.cpp's q8_1: d_x = amax/127, q_x = round-half-even(x/d_x),
s_x = d_x sum q_x). Weight formats (`BlockCodes.format`):

    U4H  w = d q + m, q in 0..15, d and m fp16     Q4_0 (m = -8 d), Q4_1
    U4F  the same with fp32 d and m                 Q4_K sub-blocks, 4-bit roundings made here
    S8H  w = d q, q in -128..127, d fp16           Q8_0
    S8F  w = d q with an fp32 d per 16              Q6_K (q - 32, d = the super-block's d x sc)
    S8M  w = d q + m, q int8, d and m fp32          Q5_1, Q5_K sub-blocks (q in 0..31)

`reference_block_linear` evaluates the kernel's float operations in the kernel's order (the
integer dots are exact in fp32), so eager code computes the program's bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from torch import nn

from edgespec.kernels.block_formats import BLOCK, TILE_FORMATS

TILE_ROWS = 8
PAIR_ROWS = 2 * TILE_ROWS  # tile rows come in pairs (block_linear.h): rows are padded to a multiple of 16
# views of the formats' table (edgespec.kernels.block_formats)
FORMAT_IDS = {f.name: f.id for f in TILE_FORMATS.values()}  # contract.h's Format
TILE_BYTES = {f.name: f.tile_bytes for f in TILE_FORMATS.values()}
WITH_MIN = tuple(f.name for f in TILE_FORMATS.values() if f.with_min)  # formats whose blocks have a min m
FP32_SCALES = tuple(f.name for f in TILE_FORMATS.values() if f.fp32_scales)  # formats whose tiles hold fp32 scales (the others fp16)
GROUP = 4  # codes of one row side by side in a tile (block_linear.h: one 32-bit lane of a SIMD dot)


@dataclass(frozen=True)
class BlockCodes:
    """One weight matrix [out, in] in the kernel's terms: codes int8 [out, in] (0..15 for U4*,
    -128..127 for S8*), d and m fp32 [out, in / 32] (m None for S8H and S8F; S8F's d is
    [out, in / 16])."""

    format: str
    codes: torch.Tensor
    d: torch.Tensor
    m: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMAT_IDS:
            raise ValueError(f"unknown block format {self.format!r}; one of {sorted(FORMAT_IDS)}")
        out, n = self.codes.shape
        if n % BLOCK:
            raise ValueError(f"a row of {n} input channels is not whole blocks of {BLOCK}")
        with_min = self.format in WITH_MIN
        if (self.m is None) == with_min:
            raise ValueError(f"{self.format} {'needs a' if with_min else 'has no'} per-block min")
        if self.format == "U4H" and not (_fp16_exact(self.d) and _fp16_exact(self.m)):
            raise ValueError("U4H scales must be fp16 values; use U4F")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    @property
    def scale_block(self) -> int:
        return BLOCK // 2 if self.format == "S8F" else BLOCK

    def dequantize(self) -> torch.Tensor:
        """The matrix [out, in] as floats: w = d q, then + m (each rounded as written)."""
        return self.rows(torch.arange(self.codes.shape[0]))

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` [...] of the matrix as floats [..., in] (`dequantize`'s values; an
        embedding lookup in the blocks)."""
        n = self.codes.shape[1]
        codes = self.codes[ids].float()
        w = codes.view(*ids.shape, -1, self.scale_block) * self.d[ids][..., None]
        if self.m is not None:
            w = w + self.m[ids][..., None]
        return w.view(*ids.shape, n)


def _fp16_exact(t: torch.Tensor) -> bool:
    return bool((t.half().float() == t).all())


def pack(blocks: BlockCodes) -> torch.Tensor:
    """The kernel's layout (block_linear.h): uint8 [2 ceil(out/16) * in/32 * tile bytes]:
    tiles of 8 rows, tile rows in pairs, a pair's two tiles side by side block after block."""
    out, n = blocks.shape
    g = n // BLOCK
    pairs = -(-out // PAIR_ROWS)
    codes = _tiles(blocks.codes.numpy().reshape(out, g, BLOCK))  # [pairs, g, 2, 8 rows, 32]
    grouped = _grouped(codes.view(np.uint8) if blocks.format.startswith("S8") else _nibbles(codes))
    scales = (blocks.d, blocks.m)
    if blocks.format == "S8F":  # the scales of each block's two halves, one after the other
        scales = (blocks.d[:, 0::2].contiguous(), blocks.d[:, 1::2].contiguous())
    scale_dtype = np.float32 if blocks.format in FP32_SCALES else np.float16
    parts = [grouped.reshape(pairs, g, 2, -1)]
    parts += [_tiles(t.numpy().astype(scale_dtype)).view(np.uint8).reshape(pairs, g, 2, -1) for t in scales if t is not None]
    return torch.from_numpy(np.ascontiguousarray(np.concatenate(parts, axis=-1)).reshape(-1))


def _tiles(a: np.ndarray) -> np.ndarray:
    """[out, g, ...] -> [pairs, g, 2, 8, ...]: tiles of 8 rows, pairs of tiles, rows zero-padded."""
    out = a.shape[0]
    pairs = -(-out // PAIR_ROWS)
    a = np.concatenate([a, np.zeros((pairs * PAIR_ROWS - out, *a.shape[1:]), a.dtype)])
    return np.ascontiguousarray(np.moveaxis(a.reshape(pairs, 2, TILE_ROWS, *a.shape[1:]), 3, 1))


def _nibbles(codes: np.ndarray) -> np.ndarray:
    """4-bit codes [..., 32] -> bytes [..., 16]: byte j holds element j (low nibble) and j + 16."""
    c = codes.astype(np.uint8)
    return c[..., :16] | (c[..., 16:] << 4)


def _grouped(elements: np.ndarray) -> np.ndarray:
    """[pairs, g, 2, rows, bytes] -> [pairs, g, 2, groups, rows, 4]: group c holds every row's 4 bytes."""
    return elements.reshape(*elements.shape[:3], TILE_ROWS, -1, GROUP).swapaxes(3, 4)


SCREEN_PAIR_BYTES = 352  # block_linear/screen.h: per 16 rows and block, u's low nibbles (256), fifth bits (64), d fp16 (32)


def pack_screen(blocks: BlockCodes) -> torch.Tensor:
    """The 5-bit screen of an S8H (Q8_0) matrix that `edgespec::block_argmax` reads instead of
    its codes (block_linear/screen.h): u = (q >> 3) + 16 in 0..31 per code, by pairs of 8-row
    tiles as `pack` pairs them; uint8 [ceil(out/16) * in/32 * 352], 176/272 of the matrix's bytes."""
    if blocks.format != "S8H":
        raise ValueError(f"a screen is made of S8H (Q8_0) codes, not {blocks.format}")
    out, n = blocks.shape
    g = n // BLOCK
    u = _tiles(((blocks.codes.numpy().astype(np.int16) >> 3) + 16).astype(np.uint8).reshape(out, g, BLOCK))  # [pairs, g, 2 tiles, 8 rows, 32]
    pairs = u.shape[0]
    # nibble bytes [.., tile, row, 16] -> [.., group c, tile, row, 4]
    low = np.moveaxis(_nibbles(u & 0x0F).reshape(pairs, g, 2, TILE_ROWS, 4, GROUP), 4, 2).reshape(pairs, g, -1)
    # uint64 j: bit 32 t + 4 r + e = tile t row r's element 4 j + e
    fifth = np.moveaxis((u >> 4).reshape(pairs, g, 2, TILE_ROWS, BLOCK // GROUP, GROUP), 4, 2).reshape(pairs, g, BLOCK // GROUP, -1)
    bits = np.packbits(fifth, axis=-1, bitorder="little").reshape(pairs, g, -1)
    scales = _tiles(blocks.d.numpy().astype(np.float16)).view(np.uint8).reshape(pairs, g, -1)
    return torch.from_numpy(np.ascontiguousarray(np.concatenate([low, bits, scales], axis=-1)).reshape(-1))


def unpack(packed: torch.Tensor, format: str, out: int, n: int) -> BlockCodes:
    """`pack`'s inverse."""
    g, pairs, R = n // BLOCK, -(-out // PAIR_ROWS), TILE_ROWS
    t = np.ascontiguousarray(packed.numpy().reshape(pairs, g, 2, TILE_BYTES[format]))
    s8 = format.startswith("S8")
    cb = R * (BLOCK if s8 else BLOCK // 2)
    elements = t[..., :cb].reshape(pairs, g, 2, -1, R, GROUP).swapaxes(3, 4).reshape(pairs, g, 2, R, -1)  # [..., rows, bytes]
    codes = elements.view(np.int8) if s8 else np.concatenate([elements & 0x0F, elements >> 4], axis=-1).astype(np.int8)
    dt = np.float32 if format in FP32_SCALES else np.float16
    w = np.dtype(dt).itemsize * R
    scales = [t[..., cb + i * w : cb + (i + 1) * w].view(dt) for i in range(1 if format == "S8H" else 2)]

    def rows(a: np.ndarray) -> torch.Tensor:  # [pairs, g, 2, 8, ...] -> [out, g, ...]
        return torch.from_numpy(np.ascontiguousarray(np.moveaxis(a, 1, 3).reshape(pairs * PAIR_ROWS, g, *a.shape[4:])[:out]))

    d, m = [rows(s.reshape(pairs, g, 2, R)).float() for s in scales] + [None] * (2 - len(scales))
    if format == "S8F":  # halves back in element order
        d, m = torch.stack([d, m], -1).reshape(out, 2 * g), None
    return BlockCodes(format, rows(codes).reshape(out, n), d, m)


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K] -> codes (integer-valued fp32) [M, G, 32], d [M, G], s = d * sum(codes) [M, G]:
    block_linear.h's `quantize_rows`, operation for operation. A block whose 1/d overflows
    quantizes to zero codes; one holding a NaN or an infinity gets d = s = NaN (its outputs
    are NaN)."""
    xb = x.float().reshape(x.shape[0], -1, BLOCK)
    finite = torch.isfinite(xb).all(-1)
    d = torch.where(finite, xb.abs().amax(-1) / 127.0, torch.full_like(xb[..., 0], float("nan")))
    inv = 1.0 / torch.where(d > 0, d, torch.ones_like(d))
    inv = torch.where((d > 0) & torch.isfinite(inv), inv, torch.zeros_like(d))
    q = torch.round(xb * inv[..., None]).clamp(-127, 127)
    q = torch.where(finite[..., None], q, torch.zeros_like(q))
    return q, d, d * q.sum(-1)


def reference_block_linear(x: torch.Tensor, blocks: BlockCodes, rows_per_pass: int = 64) -> torch.Tensor:
    """What the kernel computes, bit for bit: x [..., K] -> [..., N] fp32. Each block's term
    is formed elementwise for all blocks at once; only the sum over blocks runs block by
    block, in the kernel's order (`rows_per_pass` activation rows at a time bound the memory)."""
    out, n = blocks.shape
    lead = x.shape[:-1]
    q, dx, sx = quantize_activations(x.reshape(-1, n))
    half, G = BLOCK // 2, n // BLOCK  # the kernel's integer dots are per half block (S8F scales each half)
    w = blocks.codes.float().view(out, 2 * G, half)
    d = blocks.d.t()  # [G or 2G, N]
    rows = []
    for i in range(0, q.shape[0], rows_per_pass):
        qi, dxi, sxi = q[i : i + rows_per_pass], dx[i : i + rows_per_pass], sx[i : i + rows_per_pass]
        dots = torch.einsum("mgj,ngj->gmn", qi.reshape(qi.shape[0], 2 * G, half), w)  # integers below 2^24: exact
        lo, hi = dots[0::2], dots[1::2]  # [G, m, N]
        if blocks.format == "S8F":
            t = (d[0::2, None, :] * dxi.t()[:, :, None]) * lo + (d[1::2, None, :] * dxi.t()[:, :, None]) * hi
        else:
            t = (d[:, None, :] * dxi.t()[:, :, None]) * (lo + hi)
            if blocks.m is not None:
                t = t + blocks.m.t()[:, None, :] * sxi.t()[:, :, None]
        acc = torch.zeros(qi.shape[0], out)
        for g in range(G):
            acc = acc + t[g]
        rows.append(acc)
    return torch.cat(rows).view(*lead, out)


class BlockLinear(nn.Module):
    """A linear over packed weight blocks, plus an fp32 bias if given (Qwen2's q/k/v). It
    computes the reference (same bits as the kernel); `op()` is the same linear as the op
    `edgespec::block_linear`, whose weight is the packed buffer stored in the program (what
    an export swaps in, edgespec.export.kernel_modules)."""

    def __init__(self, blocks: BlockCodes, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = blocks.shape
        self.format = blocks.format
        self.register_buffer("packed", pack(blocks))
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        self.register_buffer("screen", None)  # `add_screen_`: the 5-bit screen `argmax` reads
        self._blocks = blocks  # unpacked, for eager calls

    @property
    def blocks(self) -> BlockCodes:
        return self._blocks

    def op(self) -> BlockLinearOp:
        """This linear computing with edgespec's ops, over the very same buffers."""
        return recast(self, BlockLinearOp)

    def add_screen_(self) -> BlockLinear:
        """Store the 5-bit screen `argmax` reads in the program (S8H weights without a bias)."""
        if self.bias is not None:
            raise ValueError("a screened argmax is for a linear without a bias (an lm head)")
        self.register_buffer("screen", pack_screen(self._blocks))
        return self

    def argmax(self, x: torch.Tensor) -> torch.Tensor:
        """`self(x).argmax(-1)`: x [..., K] -> [...] int64, the same index. As the op
        (`BlockLinearOp`) it is `edgespec::block_argmax`, which reads the screen when one was
        added (`add_screen_`) and computes exactly only the outputs that could be the largest."""
        return self(x).argmax(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = reference_block_linear(x, self._blocks)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, format={self.format}"


class BlockLinearOp(BlockLinear):
    """`BlockLinear` as edgespec's ops (`BlockLinear.op`; the schemas: edgespec.kernels.ops)."""

    def argmax(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.edgespec.block_argmax(x, self.packed, FORMAT_IDS[self.format], self.out_features, self.screen)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.edgespec.block_linear(x, self.packed, FORMAT_IDS[self.format], self.out_features)
        return y if self.bias is None else y + self.bias


class BlockEmbedding(nn.Module):
    """An embedding table whose rows are those of a packed block matrix, dequantized (the
    file's values, w = d q + m). A tied model's table and lm head are one matrix of the file:
    carried as blocks, both pack the same bytes, which the program stores once. Eager calls
    dequantize the rows looked up; `op()` is the same table as the op
    `edgespec::block_embedding` over the packed buffer (what an export swaps in)."""

    def __init__(self, blocks: BlockCodes):
        super().__init__()
        self.num_embeddings, self.embedding_dim = blocks.shape
        self.format = blocks.format
        self.register_buffer("packed", pack(blocks))
        self._blocks = blocks  # unpacked, for eager calls

    @property
    def blocks(self) -> BlockCodes:
        return self._blocks

    def op(self) -> BlockEmbeddingOp:
        """This table read by edgespec's op, over the very same buffer."""
        return recast(self, BlockEmbeddingOp)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self._blocks.rows(ids)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, format={self.format}"


class BlockEmbeddingOp(BlockEmbedding):
    """`BlockEmbedding` as edgespec's op (`BlockEmbedding.op`; the schema: edgespec.kernels.ops)."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.ops.edgespec.block_embedding(ids, self.packed, FORMAT_IDS[self.format], self.num_embeddings, self.embedding_dim)


M = TypeVar("M", bound=nn.Module)


def recast(module: nn.Module, cls: type[M], drop: tuple[str, ...] = ()) -> M:
    """A `cls` (a subclass of the module's class that computes the same thing another way)
    over the module's very parameters, buffers, attributes and submodules, less the submodules
    named in `drop`; the module itself is unchanged. How an export swaps in its op modules."""
    new = cls.__new__(cls)
    new.__dict__.update(module.__dict__)
    new._parameters, new._buffers = dict(module._parameters), dict(module._buffers)
    new._modules = {k: v for k, v in module._modules.items() if k not in drop}
    return new


def stacked(linears: list[nn.Module]) -> BlockLinear | None:
    """One BlockLinear whose output is the outputs of `linears` side by side (their rows
    stacked), so one op call quantizes their shared input once: q/k/v, gate/up. Each output row
    is computed exactly as alone (the kernel is per row). None unless all are BlockLinears of
    one format and input size, all with a bias or none."""
    if not all(isinstance(m, BlockLinear) for m in linears) or len({(m.format, m.in_features, m.bias is None) for m in linears}) != 1:
        return None
    blocks = [m.blocks for m in linears]
    m = None if blocks[0].m is None else torch.cat([b.m for b in blocks])
    bias = None if linears[0].bias is None else torch.cat([lin.bias for lin in linears])
    return BlockLinear(BlockCodes(blocks[0].format, torch.cat([b.codes for b in blocks]), torch.cat([b.d for b in blocks]), m), bias)
