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

Which types these are, their byte layouts and what carries each into a program are one
table, `edgespec.kernels.block_formats` (`GGUF_TYPES`); this module turns a tensor's bytes
into `BlockWeights`. Other GGUF types have no such form: their weights are dequantized and,
if the recipe quantizes, rounded again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from edgespec.kernels.block_formats import BLOCK, GGUF_TYPES


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


def read_blocks(format: str, raw: np.ndarray, shape: tuple[int, int]) -> BlockWeights:
    """Parse the raw bytes of one GGUF tensor (`GGUFReader` tensor data, [out, row bytes])
    of type `format` (a key of `edgespec.kernels.block_formats.GGUF_TYPES`) and shape [out, in]."""
    t = GGUF_TYPES[format]
    bits, per_block, nbytes, parse = t.bits, t.elements, t.bytes, t.parse
    out, n = shape
    if n % per_block:
        raise ValueError(f"a {format} row of {n} elements is not whole blocks of {per_block}")
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(out * n // per_block, nbytes)
    codes, d, off, mins = parse(blocks)
    scale_block = t.scale_block

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
