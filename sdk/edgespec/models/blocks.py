"""Block-quantized weights as a GGUF file stores them, in one symmetric form.

Every format read here is written as w = scale * code + offset per block of 32 along the
input dimension, with integer codes centred on zero:

    Q4_0  w = d (q - 8)                q in 0..15    code = q - 8, scale = d, no offset
    Q4_1  w = d q + m = d (q - 8) + (m + 8 d)        code = q - 8, scale = d, offset = m + 8 d
    Q8_0  w = d q                      q in -127..127 code = q,    scale = d, no offset
    Q4_K  per sub-block j of 32 in a super-block of 256: w = (d sc_j) q - (dmin m_j),
          q in 0..15, sc_j and m_j 6-bit: Q4_1's form with scale d sc_j and min -dmin m_j
          (each product exact in fp32)
    Q6_K  per sub-block j of 16: w = (d sc_j) (q - 32), q 6-bit, sc_j int8: code q - 32 with a
          scale per 16 (`scale_block` 16; edgespec's block kernel computes it as it is)
    Q5_0  w = d (q - 16)               q in 0..31    code = q - 16, scale = d, no offset
    Q5_1  w = d q + m                  q in 0..31    code = q - 16, offset m + 16 d, min m
    Q5_K  Q4_K's form with 5-bit q: code = q - 16, scale d sc_j, min -dmin m_j
    Q3_K  per sub-block j of 16: w = d (sc_j - 32) (q - 4 (1 - h)), q 2-bit, h its high bit,
          sc_j 6-bit: code in -4..3 with a scale per 16

A symmetric 4-bit code with one scale per block is exactly XNNPACK's blockwise int4 weight
(qb4w), so Q4_0 and the first term of Q4_1 go into a program without a second rounding; the
Q4_1 offset is a per-block constant times the sum of the block's activations
(`edgespec.quant`); edgespec's block kernel computes Q4_1 and Q4_K from `mins`, the
per-block minimum itself, Q5_0 as Q8_0, Q3_K as Q6_K and Q5_1/Q5_K as 8-bit codes with a
min (their codes fit 8 bits; `edgespec.quant.KERNEL_CARRIED`). Other GGUF types have no such form here (`BLOCK_FORMATS`):
their weights are dequantized and, if the recipe quantizes, rounded again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from edgespec.kernels.block_linear import BLOCK  # elements per block of a code scale (Q4_0, Q4_1, Q8_0; Q4_K sub-blocks)


@dataclass(frozen=True)
class BlockWeights:
    """One weight matrix [out, in] in blocks of `BLOCK` along `in`.

    codes int8 [out, in] (-8..7 for 4-bit formats, -127..127 for Q8_0); scales, offsets fp32
    [out, in / BLOCK] (offsets None when the format has none); mins: for 4-bit formats with a
    min (Q4_1, Q4_K) the file's own, w = scale (code + 8) + mins, exact where `offsets` (their
    sum with 8 scale) may have rounded. `dequantize()` is the weight."""

    format: str
    bits: int
    codes: torch.Tensor
    scales: torch.Tensor
    offsets: torch.Tensor | None = None
    mins: torch.Tensor | None = None
    scale_block: int = BLOCK  # elements per scale: 16 for Q6_K

    def dequantize(self) -> torch.Tensor:
        out, n = self.codes.shape
        w = self.codes.float().view(out, n // self.scale_block, self.scale_block) * self.scales[..., None]
        if self.offsets is not None:
            w = w + self.offsets[..., None]
        return w.view(out, n)

    def reorder_rows(self, order: torch.Tensor) -> BlockWeights:
        """The matrix whose row i is row order[i] of this one (every block of a row moves with it)."""

        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.index_select(0, order).contiguous()

        return dataclasses.replace(self, codes=pick(self.codes), scales=pick(self.scales), offsets=pick(self.offsets), mins=pick(self.mins))


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


# GGUF type name -> (bits of a code, elements and bytes per file block, parser of
# [n_file_blocks, bytes] -> codes [n_blocks, 32], scale, offset, min per block of 32)
BLOCK_FORMATS = {
    "Q4_0": (4, 32, 18, _q4_0),
    "Q4_1": (4, 32, 20, _q4_1),
    "Q8_0": (8, 32, 34, _q8_0),
    "Q4_K": (4, 256, 144, _q4_k),
    "Q6_K": (6, 256, 210, _q6_k),
    "Q5_0": (5, 32, 22, _q5_0),
    "Q5_1": (5, 32, 24, _q5_1),
    "Q5_K": (5, 256, 176, _q5_k),
    "Q3_K": (3, 256, 110, _q3_k),
}
SCALE_PER_16 = ("Q6_K", "Q3_K")  # formats with a scale per 16 elements (the rest: per 32)


def read_blocks(format: str, raw: np.ndarray, shape: tuple[int, int]) -> BlockWeights:
    """Parse the raw bytes of one GGUF tensor (`GGUFReader` tensor data, [out, row bytes])
    of type `format` (a key of `BLOCK_FORMATS`) and shape [out, in]."""
    bits, per_block, nbytes, parse = BLOCK_FORMATS[format]
    out, n = shape
    if n % per_block:
        raise ValueError(f"a {format} row of {n} elements is not whole blocks of {per_block}")
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(out * n // per_block, nbytes)
    codes, d, off, mins = parse(blocks)
    scale_block = 16 if format in SCALE_PER_16 else BLOCK

    def per_row(a):
        return None if a is None else torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32).reshape(out, -1))

    return BlockWeights(
        format=format,
        bits=bits,
        codes=torch.from_numpy(np.ascontiguousarray(codes).reshape(out, n)),
        scales=per_row(d),
        offsets=per_row(off),
        mins=per_row(mins),
        scale_block=scale_block,
    )
