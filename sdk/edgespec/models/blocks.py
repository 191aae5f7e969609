"""Block-quantized weights as a GGUF file stores them, in one symmetric form.

Every format read here is written as w = scale * code + offset per block of 32 along the
input dimension, with integer codes centred on zero:

    Q4_0  w = d (q - 8)                q in 0..15    code = q - 8, scale = d, no offset
    Q4_1  w = d q + m = d (q - 8) + (m + 8 d)        code = q - 8, scale = d, offset = m + 8 d
    Q8_0  w = d q                      q in -127..127 code = q,    scale = d, no offset

A symmetric 4-bit code with one scale per block is exactly XNNPACK's blockwise int4 weight
(qb4w), so Q4_0 and the first term of Q4_1 go into a program without a second rounding; the
Q4_1 offset is a per-block constant times the sum of the block's activations
(`edgespec.quant`). Other GGUF types have no such form here (`BLOCK_FORMATS`): their weights
are dequantized and, if the recipe quantizes, rounded again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

BLOCK = 32  # elements per block in Q4_0, Q4_1 and Q8_0


@dataclass(frozen=True)
class BlockWeights:
    """One weight matrix [out, in] in blocks of `BLOCK` along `in`.

    codes int8 [out, in] (-8..7 for 4-bit formats, -127..127 for Q8_0); scales, offsets fp32
    [out, in / BLOCK] (offsets None when the format has none). `dequantize()` is the weight."""

    format: str
    bits: int
    codes: torch.Tensor
    scales: torch.Tensor
    offsets: torch.Tensor | None = None

    def dequantize(self) -> torch.Tensor:
        out, n = self.codes.shape
        w = self.codes.float().view(out, n // BLOCK, BLOCK) * self.scales[..., None]
        if self.offsets is not None:
            w = w + self.offsets[..., None]
        return w.view(out, n)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] packed bytes -> [n, 32] values 0..15: low nibbles are elements 0..15, high 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _q4_0(blocks: np.ndarray):
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    return _nibbles(blocks[:, 2:]).astype(np.int8) - 8, d, None


def _q4_1(blocks: np.ndarray):
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    return _nibbles(blocks[:, 4:]).astype(np.int8) - 8, d, m + 8.0 * d  # exact in fp32 (two fp16 terms)


def _q8_0(blocks: np.ndarray):
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    return blocks[:, 2:].copy().view(np.int8), d, None


# GGUF type name -> (bits of a code, bytes per block, parser of [n_blocks, bytes] -> codes, d, offset)
BLOCK_FORMATS = {"Q4_0": (4, 18, _q4_0), "Q4_1": (4, 20, _q4_1), "Q8_0": (8, 34, _q8_0)}


def read_blocks(format: str, raw: np.ndarray, shape: tuple[int, int]) -> BlockWeights:
    """Parse the raw bytes of one GGUF tensor (`GGUFReader` tensor data, [out, row bytes])
    of type `format` (a key of `BLOCK_FORMATS`) and shape [out, in]."""
    bits, nbytes, parse = BLOCK_FORMATS[format]
    out, n = shape
    if n % BLOCK:
        raise ValueError(f"a {format} row of {n} elements is not whole blocks of {BLOCK}")
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(out * n // BLOCK, nbytes)
    codes, d, off = parse(blocks)
    g = n // BLOCK
    return BlockWeights(
        format=format,
        bits=bits,
        codes=torch.from_numpy(np.ascontiguousarray(codes).reshape(out, n)),
        scales=torch.from_numpy(d.reshape(out, g).copy()),
        offsets=None if off is None else torch.from_numpy(off.reshape(out, g).copy()),
    )
