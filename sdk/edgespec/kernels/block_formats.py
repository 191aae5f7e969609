"""Every block format edgespec reads or computes with, in one table.

Two kinds of format meet here:

- **GGUF block types** (`GGUF_TYPES`): how a file stores a weight matrix: bits per code,
  elements and bytes per file block, and the parser from a tensor's bytes to codes, scales,
  offsets and mins per block of 32 (or 16) elements (`edgespec.models.blocks.read_blocks`,
  the loader, calls it), plus what carries the blocks into a program without a second
  rounding: the kernel tile kind (`kernel`) and whether XNNPACK's blockwise int4 can (`xnnpack`).
- **edgespec's tile formats** (`TILE_FORMATS`): how the block kernel packs a matrix
  (kernels/block_linear/contract.h's `Format` and `tile_bytes`, which the C++ self-test checks
  against this table): its id in the op's schema, bytes per tile, fp16 or fp32 scales, a min.

    GGUF   bits  block  bytes  kernel tile         XNNPACK
    Q4_0   4     32     18     U4H (m = -8 d)      yes (qb4w)
    Q4_1   4     32     20     U4H                 yes (+ per-block offsets)
    Q8_0   8     32     34     S8H                 no
    Q4_K   4     256    144    U4F (d sc, -dmin m) no
    Q6_K   6     256    210    S8F (scale per 16)  no
    Q5_0   5     32     22     S8H (q - 16)        no
    Q5_1   5     32     24     S8M                 no
    Q5_K   5     256    176    S8M                 no
    Q3_K   3     256    110    S8F (scale per 16)  no

Weights of other types (and every weight with ``quant.carry_blocks: false``) are dequantized
and, where the recipe quantizes, rounded again (edgespec.quant).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

BLOCK = 32  # elements per block of a code scale (Q4_0, Q4_1, Q8_0; Q4_K sub-blocks); the kernel's block


@dataclass(frozen=True)
class TileFormat:
    """One of the block kernel's weight formats (`BlockCodes.format`): w = d q (+ m) per block.

    id: its number in the ops' schema (contract.h's `Format`); tile_bytes: bytes of one tile
    (8 rows x 32 codes, then the scales); with_min: blocks have a min m; fp32_scales: d (and
    m) are fp32 in the tile, else fp16; scale_block: elements per scale."""

    name: str
    id: int
    tile_bytes: int
    with_min: bool
    fp32_scales: bool
    scale_block: int = BLOCK


TILE_FORMATS: dict[str, TileFormat] = {
    f.name: f
    for f in (
        TileFormat("U4H", 1, 160, with_min=True, fp32_scales=False),  # w = d q + m, q 0..15, d and m fp16
        TileFormat("U4F", 2, 192, with_min=True, fp32_scales=True),  # the same with fp32 d and m
        TileFormat("S8H", 3, 272, with_min=False, fp32_scales=False),  # w = d q, q int8, d fp16
        TileFormat("S8F", 4, 320, with_min=False, fp32_scales=True, scale_block=BLOCK // 2),  # an fp32 d per 16
        TileFormat("S8M", 5, 320, with_min=True, fp32_scales=True),  # w = d q + m, q int8, d and m fp32
    )
}


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] packed bytes -> [n, 32] values 0..15: low nibbles are elements 0..15, high 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _q4_0(blocks: np.ndarray):
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    return _nibbles(blocks[:, 2:]).astype(np.int8) - 8, d, None, None


def _q4_1(blocks: np.ndarray):
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    return _nibbles(blocks[:, 4:]).astype(np.int8) - 8, d, m + 8.0 * d, m


def _fp16(b: np.ndarray) -> np.ndarray:
    """[n, 2] bytes -> [n, 1] fp32 values of the fp16 they hold."""
    return b.copy().view(np.float16).astype(np.float32)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """[n, 4] bytes of a 32-bit mask -> [n, 32] bits 0/1, bit j of element j (Q5_0, Q5_1)."""
    return np.unpackbits(qh, axis=1, bitorder="little")


def _q5_0(blocks: np.ndarray):
    q = _nibbles(blocks[:, 6:]) | (_high_bits(blocks[:, 2:6]) << 4)
    return q.astype(np.int8) - 16, _fp16(blocks[:, :2]), None, None


def _q5_1(blocks: np.ndarray):
    """w = d q + m, q 5-bit unsigned: codes q - 16, offset m + 16 d; `mins` m, exact with q."""
    d, m = _fp16(blocks[:, :2]), _fp16(blocks[:, 2:4])
    q = _nibbles(blocks[:, 8:]) | (_high_bits(blocks[:, 4:8]) << 4)
    return q.astype(np.int8) - 16, d, m + 16.0 * d, m


def _k_scales_mins(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K: [n, 12] bytes -> 6-bit scales and mins [n, 8] of the 8 sub-blocks."""
    n = sc.shape[0]
    scale, mn = np.empty((n, 8), np.uint8), np.empty((n, 8), np.uint8)
    scale[:, :4], mn[:, :4] = sc[:, 0:4] & 63, sc[:, 4:8] & 63
    scale[:, 4:] = (sc[:, 8:12] & 0x0F) | ((sc[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return scale.astype(np.float32), mn.astype(np.float32)


def _q4_k(blocks: np.ndarray):
    """[n, 144] super-blocks (d, dmin fp16; 12 bytes of 6-bit scales and mins; 128 bytes of
    nibbles: bytes 32c..32c+31 hold sub-block 2c in their low nibbles, 2c+1 in the high ones)
    -> per sub-block of 32: codes [8n, 32], scale, offset, min."""
    n = blocks.shape[0]
    scale, mn = _k_scales_mins(blocks[:, 4:16])
    qs = blocks[:, 16:].reshape(n, 4, 32)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(n * 8, 32)  # sub-blocks 2c, 2c+1
    s = (_fp16(blocks[:, 0:2]) * scale).reshape(-1)
    m = -(_fp16(blocks[:, 2:4]) * mn).reshape(-1)
    return q.astype(np.int8) - 8, s, m + 8.0 * s, m


def _q5_k(blocks: np.ndarray):
    """[n, 176] super-blocks: Q4_K's d, dmin, scales and nibbles (at 48..175), and a fifth bit
    per element in qh[32] (at 16..47): bit 2c of byte l for element l of sub-block 2c, bit
    2c + 1 for sub-block 2c + 1 -> per sub-block of 32: codes q - 16, scale, offset, min."""
    n = blocks.shape[0]
    scale, mn = _k_scales_mins(blocks[:, 4:16])
    qs = blocks[:, 48:].reshape(n, 4, 32)
    high = np.unpackbits(blocks[:, 16:48, None], axis=2, bitorder="little")  # [n, 32 l, 8 sub-blocks]
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(n, 8, 32) | (np.moveaxis(high, 2, 1) << 4)
    s = (_fp16(blocks[:, 0:2]) * scale).reshape(-1)
    m = -(_fp16(blocks[:, 2:4]) * mn).reshape(-1)
    return q.reshape(n * 8, 32).astype(np.int8) - 16, s, m + 16.0 * s, m


def _q3_k(blocks: np.ndarray):
    """[n, 110] super-blocks (hmask[32], qs[64] of 2-bit codes, 12 bytes of 6-bit scales, d
    fp16) -> per sub-block of 16: codes in -4..3 and scale d (sc - 32). Element 128h + 32k + l
    (h 0..1, k 0..3, l 0..31): bits 2k of qs[32h + l], minus 4 unless bit 4h + k of hmask[l]."""
    n = blocks.shape[0]
    qs, hmask = blocks[:, 32:96].reshape(n, 2, 1, 32), blocks[:, :32]
    low = (qs >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)) & 3  # [n, 2 h, 4 k, 32 l]
    hbit = np.moveaxis(np.unpackbits(hmask[:, :, None], axis=2, bitorder="little").reshape(n, 32, 2, 4), 1, 3)
    q = low.astype(np.int8) - 4 * (1 - hbit.astype(np.int8))
    a = blocks[:, 96:108]
    lo = np.concatenate([a[:, 0:8] & 0x0F, a[:, 0:8] >> 4], 1)  # scales 0..7 low nibbles, 8..15
    hi = (a[:, 8:12, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3  # [n, 4 bytes, 4 pairs of bits]
    sc = (lo | (np.moveaxis(hi, 2, 1).reshape(n, 16) << 4)).astype(np.float32) - 32
    return q.reshape(n * 16, 16), (_fp16(blocks[:, 108:110]) * sc).reshape(-1), None, None


def _q8_0(blocks: np.ndarray):
    return blocks[:, 2:].copy().view(np.int8), _fp16(blocks[:, :2]), None, None


def _q6_k(blocks: np.ndarray):
    """[n, 210] super-blocks (low 4 bits ql[128], high 2 bits qh[64], int8 scales[16], d fp16)
    -> per sub-block of 16: codes q - 32 [16n, 16] and scale d * sc."""
    n = blocks.shape[0]
    ql, qh = blocks[:, :128].reshape(n, 2, 64), blocks[:, 128:192].reshape(n, 2, 32)
    sc = blocks[:, 192:208].view(np.int8).astype(np.float32)
    d = blocks[:, 208:210].copy().view(np.float16).astype(np.float32)
    lo = np.stack([ql[:, :, :32] & 0x0F, ql[:, :, 32:] & 0x0F, ql[:, :, :32] >> 4, ql[:, :, 32:] >> 4], 2)  # [n, 2, 4, 32]
    hi = np.stack([(qh >> s) & 3 for s in (0, 2, 4, 6)], 2)
    q = (lo | (hi << 4)).astype(np.int8) - 32  # element 128h + 32k + l
    return q.reshape(n * 16, 16), (d * sc).reshape(-1), None, None


Parsed = tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]


@dataclass(frozen=True)
class GgufType:
    """A GGUF block type edgespec reads as blocks (the table in this module's docstring).

    bits: of a code; elements, bytes: per file block; scale_block: elements per scale as
    parsed (16 for Q6_K and Q3_K, else 32); parse: [n file blocks, bytes] -> (codes
    [n_blocks, scale_block] int8 centred on zero, scale, offset, min per block: w = scale code
    + offset, w = scale (code + 2^(bits-1)) + min); kernel: the tile kind that computes the
    blocks exactly (``U4``: U4H where the file's scales and mins are fp16 values, else U4F);
    xnnpack: XNNPACK's blockwise int4 carries it."""

    name: str
    bits: int
    elements: int
    bytes: int
    parse: Callable[[np.ndarray], Parsed]
    kernel: str
    xnnpack: bool = False
    scale_block: int = BLOCK


GGUF_TYPES: dict[str, GgufType] = {
    t.name: t
    for t in (
        GgufType("Q4_0", 4, 32, 18, _q4_0, "U4", xnnpack=True),
        GgufType("Q4_1", 4, 32, 20, _q4_1, "U4", xnnpack=True),
        GgufType("Q8_0", 8, 32, 34, _q8_0, "S8H"),
        GgufType("Q4_K", 4, 256, 144, _q4_k, "U4"),
        GgufType("Q6_K", 6, 256, 210, _q6_k, "S8F", scale_block=16),
        GgufType("Q5_0", 5, 32, 22, _q5_0, "S8H"),  # codes q - 16, fp16 d: Q8_0's form
        GgufType("Q5_1", 5, 32, 24, _q5_1, "S8M"),  # 5-bit q as int8, the file's d and min
        GgufType("Q5_K", 5, 256, 176, _q5_k, "S8M"),  # d sc_j and -dmin m_j per 32
        GgufType("Q3_K", 3, 256, 110, _q3_k, "S8F", scale_block=16),
    )
}
assert all(t.kernel == "U4" or t.kernel in TILE_FORMATS for t in GGUF_TYPES.values())
