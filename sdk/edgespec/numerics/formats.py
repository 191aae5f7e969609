"""Floating-point formats as data: (exponent bits, mantissa bits) -> range and precision.

IEEE-like binary formats with a hidden bit, bias 2^(e-1) - 1 and gradual underflow.
`finite_only` formats (the OCP "fn" fp8 variants) spend the all-ones exponent on normal
numbers and keep only the all-ones bit pattern for NaN, which raises the largest finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class FloatFormat:
    name: str
    exp_bits: int
    man_bits: int
    finite_only: bool = False

    def __post_init__(self) -> None:
        if self.exp_bits < 2 or self.man_bits < 1:
            raise ValueError(f"format {self.name}: need >= 2 exponent bits and >= 1 mantissa bit")

    @property
    def bias(self) -> int:
        return 2 ** (self.exp_bits - 1) - 1

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number."""
        return 2**self.exp_bits - 1 - self.bias if self.finite_only else 2**self.exp_bits - 2 - self.bias

    @property
    def max_finite(self) -> float:
        # finite_only: the all-ones mantissa at emax is NaN, so the top mantissa is 2 - 2 * 2^-m
        top = 2 - 2.0 ** (1 - self.man_bits) if self.finite_only else 2 - 2.0**-self.man_bits
        return math.ldexp(top, self.emax)

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, 1 - self.bias)

    @property
    def min_subnormal(self) -> float:
        return math.ldexp(1.0, 1 - self.bias - self.man_bits)

    @property
    def unit_roundoff(self) -> float:
        """u = 2^-(m+1): relative error bound of round-to-nearest for normal numbers."""
        return math.ldexp(1.0, -(self.man_bits + 1))

    @property
    def dynamic_range(self) -> float:
        """max finite / min normal: the ratio a pre-normalized sum must fit into."""
        return self.max_finite / self.min_normal

    def torch_dtype(self):
        """The matching torch dtype, or None when torch has none."""
        import torch

        table = {
            (5, 10, False): torch.float16,
            (8, 7, False): torch.bfloat16,
            (8, 23, False): torch.float32,
            (4, 3, True): getattr(torch, "float8_e4m3fn", None),
            (5, 2, False): getattr(torch, "float8_e5m2", None),
        }
        return table.get((self.exp_bits, self.man_bits, self.finite_only))


FP32 = FloatFormat("fp32", 8, 23)
FP16 = FloatFormat("fp16", 5, 10)
BF16 = FloatFormat("bf16", 8, 7)
FP8_E4M3 = FloatFormat("fp8_e4m3", 4, 3, finite_only=True)
FP8_E5M2 = FloatFormat("fp8_e5m2", 5, 2)

FORMATS = {f.name: f for f in (FP32, FP16, BF16, FP8_E4M3, FP8_E5M2)}


def round_to_format(x, fmt: FloatFormat):
    """Round a float64 tensor to the nearest value of `fmt` (ties to even), saturating to
    +-inf past max_finite (NaN-free formats saturate to +-inf too: overflow is what we count).

    Used to emulate formats torch has no dtype for, and to cross-check those it has.
    """
    import torch

    x = x.to(torch.float64)
    ax = x.abs()
    # exponent of each value, clamped below at the subnormal exponent
    e = torch.floor(torch.log2(torch.where(ax > 0, ax, torch.ones_like(ax))))
    e = torch.clamp(e, min=1 - fmt.bias)
    quantum = torch.pow(2.0, e - fmt.man_bits)
    y = torch.round(x / quantum) * quantum  # torch.round: half to even
    over = (y.abs() > fmt.max_finite) | x.isinf()
    return torch.where(over, torch.sign(x) * math.inf, y)
