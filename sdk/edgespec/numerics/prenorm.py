"""Pre-normalizers for L_p norm layers in low precision: bounds, feasibility, optimal scale.

A norm layer computes c = x - mean(x) (LayerNorm) or c = x (RMSNorm) and
sigma_p = ((1/d) * T)^(1/p) with T = sum_i |c_i|^p. In a narrow format T overflows or
underflows long before the output does. Dividing by s > 0 first computes T_s = T / s^p.

Families of s (all rounded to a power of two, so c / s is exact):
  none      s = 1
  const     s fixed per layer from calibration statistics (free at run time, no guarantee
            outside the calibrated range)
  l1, l2,   s = k * M_q(c), the power mean M_q = ((1/d) sum |c_i|^q)^(1/q), or max |c_i|
  linf      for q = inf (one reduction at run time, guaranteed for every input)

Bounds (power-mean inequalities, with R = M_p / M_q):
  q <= p:  1 <= R <= d^(1/q - 1/p)        =>  T_s in [d, d^(p/q)] * k^-p
  q >= p:  d^(1/q - 1/p) <= R <= 1        =>  T_s in [d^(p/q), d] * k^-p
  q = inf: d^(-1/p) <= R <= 1             =>  T_s in [1, d] * k^-p
  zero-mean c (LayerNorm), q = 1, p >= 1: sum |c|^p <= 2 (S/2)^p with S = sum |c|, so
           the upper bound tightens to 2^(1-p) d^p k^-p (two entries +-S/2 attain it).
Rounding s to the nearest power of two multiplies s by a factor in [2^-1/2, 2^1/2], so the
interval widens by 2^(p/2) on each side. Computing T in the format multiplies it by at
most g = (1 + u)^(d + p) (u the unit roundoff; p rounded products per term, d additions).

Feasible iff the widened interval [L', U'] fits [m, M / g], m = min normal, M = max finite,
i.e. U'/L' <= (M/m) / g. The scale centred in log scale, k^p = sqrt(L U g / (m M)) (k a
power of two), leaves the same margin on both sides.

Output unchanged: y = c / (sigma_p(c) + eps) = x / (sigma_p(x) + eps / s) for x = c / s;
with eps inside the root, ((1/d) T + eps)^(1/p) -> ((1/d) T_s + eps / s^p)^(1/p). The
rescaled eps may fall below the format's smallest subnormal; it then contributes nothing,
which changes the output only for inputs whose (1/d) T_s is within a factor of eps' of 0
(never inside the guaranteed interval, where (1/d) T_s >= m / d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgespec.numerics.formats import FloatFormat

INF = math.inf


def sum_bounds(p: float, d: int, q: float, zero_mean: bool = False) -> tuple[float, float]:
    """[L, U] with L <= sum |c_i / M_q(c)|^p <= U for every nonzero c (k = 1, before rounding)."""
    if q == INF:
        return 1.0, float(d)
    if q <= p:
        lo, hi = float(d), d ** (p / q)
    else:
        lo, hi = d ** (p / q), float(d)
    if zero_mean and q == 1 and p >= 1 and d >= 2:
        hi = min(hi, 2 ** (1 - p) * d**p)
    return lo, hi


def growth(fmt: FloatFormat, d: int, p: float) -> float:
    """Worst-case factor by which rounding can grow (or, inverted, shrink) a computed sum."""
    return (1 + fmt.unit_roundoff) ** (d + math.ceil(p))


@dataclass(frozen=True)
class PrenormPlan:
    """The chosen scale for one (p, d, q, format): s = 2^round(log2 M_q(c)) * 2^log2_k."""

    p: float
    d: int
    q: float
    fmt: str
    feasible: bool
    log2_k: int
    lo: float  # guaranteed bounds of the computed T_s
    hi: float
    margin_lo: float  # lo / min_normal (>= 1 when safe)
    margin_hi: float  # (max_finite / g) / hi (>= 1 when safe)


def plan_data_dependent(p: float, d: int, q: float, fmt: FloatFormat, zero_mean: bool = False) -> PrenormPlan:
    """Best power-of-two k for s = k * M_q(c) (s itself rounded to a power of two)."""
    L, U = sum_bounds(p, d, q, zero_mean)
    widen = 2 ** (p / 2)
    g = growth(fmt, d, p)
    m, M = fmt.min_normal, fmt.max_finite
    # centre log(L * k^-p / widen / m) == log((M / g) / (U * k^-p * widen))  =>  k^p = sqrt(L U g / (m M))
    log2_k = round(math.log2(math.sqrt(L * U * g / (m * M))) / p)
    kp = 2.0 ** (p * log2_k)
    lo, hi = L / kp / widen / g, U / kp * widen * g
    margin_lo, margin_hi = lo / m, M / hi
    return PrenormPlan(p, d, q, fmt.name, margin_lo >= 1 and margin_hi >= 1, log2_k, lo, hi, margin_lo, margin_hi)


def plan_constant(p: float, d: int, t_min: float, t_max: float, fmt: FloatFormat) -> PrenormPlan:
    """Best power-of-two constant s for sums T in the calibrated range [t_min, t_max]."""
    g = growth(fmt, d, p)
    m, M = fmt.min_normal, fmt.max_finite
    # T_s = T / s^p; centre: s^p = sqrt(t_min t_max g^2 / (m M))
    log2_s = round(math.log2(math.sqrt(t_min * t_max * g * g / (m * M))) / p)
    sp = 2.0 ** (p * log2_s)
    lo, hi = t_min / sp / g, t_max / sp * g
    return PrenormPlan(p, d, 0.0, fmt.name, lo >= m and hi <= M, log2_s, lo, hi, lo / m, M / hi)


def relative_error_bound(fmt: FloatFormat, d: int, p: float, t_lo: float) -> float:
    """|fl(T_s) - T_s| / T_s for a computed sum whose true value is >= t_lo: rounding of the
    normal-range operations plus at most half a subnormal quantum lost per term."""
    return growth(fmt, d, p) - 1 + d * fmt.min_subnormal / (2 * t_lo)


def emulated_pow_sum(x, p: float, fmt: FloatFormat):
    """sum_i |x_i|^p computed in `fmt`: one rounding per term, then left-to-right additions,
    each rounded. x: float64 [n, d] of values representable in fmt. Returns float64 [n]."""
    import torch

    from edgespec.numerics.formats import round_to_format

    terms = round_to_format(x.abs() ** p, fmt)
    acc = torch.zeros(x.shape[0], dtype=torch.float64)
    for i in range(x.shape[1]):
        acc = round_to_format(acc + terms[:, i], fmt)
    return acc


def power_of_two_scale(c, q: float, log2_k: int):
    """s = 2^(round(log2 M_q(c)) + log2_k) per row of c [n, d] (float64 reference of the
    run-time computation; for q = inf it is exact in any format)."""
    import torch

    a = c.abs().to(torch.float64)
    mq = a.amax(-1) if q == INF else a.pow(q).mean(-1).pow(1 / q)
    mq = torch.where(mq > 0, mq, torch.ones_like(mq))
    return torch.pow(2.0, torch.round(torch.log2(mq)) + log2_k)
