"""Pre-normalizer theory vs emulated low-precision arithmetic (property-based)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgespec.numerics.formats import BF16, FP8_E4M3, FP16, FP32, FloatFormat, round_to_format
from edgespec.numerics.prenorm import (
    INF,
    emulated_pow_sum,
    growth,
    plan_data_dependent,
    power_of_two_scale,
    relative_error_bound,
    sum_bounds,
)


def test_format_constants():
    assert (FP16.max_finite, FP16.min_normal, FP16.min_subnormal, FP16.unit_roundoff) == (65504.0, 2**-14, 2**-24, 2**-11)
    assert BF16.max_finite == float(torch.finfo(torch.bfloat16).max) and BF16.min_normal == float(torch.finfo(torch.bfloat16).tiny)
    assert FP32.max_finite == float(torch.finfo(torch.float32).max)
    assert FP8_E4M3.max_finite == 448.0 and FP8_E4M3.min_subnormal == 2**-9
    assert FloatFormat("fp8_e5m2", 5, 2).max_finite == 57344.0


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=50))
def test_round_to_format_matches_torch_fp16(values):
    x = torch.tensor(values, dtype=torch.float64)
    assert torch.equal(round_to_format(x, FP16), x.to(torch.float16).to(torch.float64))


@given(st.lists(st.floats(-1e30, 1e30, allow_nan=False), min_size=1, max_size=50))
def test_round_to_format_matches_torch_bf16(values):
    x = torch.tensor(values, dtype=torch.float64)
    assert torch.equal(round_to_format(x, BF16), x.to(torch.bfloat16).to(torch.float64))


@pytest.mark.parametrize("q", [1.0, 2.0, 4.0, INF])
@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
@given(data=st.data())
@settings(max_examples=40, deadline=None)
def test_sum_bounds_hold(p, q, data):
    d = data.draw(st.integers(1, 64))
    c = torch.tensor(data.draw(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=d, max_size=d)), dtype=torch.float64)
    if not c.abs().max() > 1e-60:  # below, |c|^q underflows even in float64
        return
    a = c.abs()
    mq = a.max() if q == INF else a.pow(q).mean().pow(1 / q)
    t = (a / mq).pow(p).sum().item()
    lo, hi = sum_bounds(p, d, q)
    assert lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)
    zc = c - c.mean()
    if q == 1 and p >= 1 and d >= 2 and zc.abs().max() > 1e-9 * a.max():
        m1 = zc.abs().mean()
        assert (zc.abs() / m1).pow(p).sum().item() <= sum_bounds(p, d, 1.0, zero_mean=True)[1] * (1 + 1e-6)


def _vectors(fmt, d, data):
    """A row spanning the whole format: a drawn scale exponent and spread, random entries."""
    emin = 1 - fmt.bias - fmt.man_bits
    e = data.draw(st.integers(emin, fmt.emax), label="exponent")
    spread = data.draw(st.integers(0, 12), label="spread")
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    vals = torch.rand(d, generator=g, dtype=torch.float64) * 4 - 2
    shifts = -torch.randint(0, spread + 1, (d,), generator=g).to(torch.float64)
    x = round_to_format(vals * torch.pow(2.0, shifts + e), fmt)
    return torch.where(x.isinf(), torch.sign(x) * fmt.max_finite, x)[None]


@pytest.mark.parametrize("fmt, d", [(FP16, 64), (FP16, 576), (BF16, 64), (FP8_E4M3, 8), (FloatFormat("e6m5", 6, 5), 32)])
@pytest.mark.parametrize("q", [1.0, INF])
@given(data=st.data())
@settings(max_examples=25, deadline=None)
def test_stabilized_norm_never_overflows_or_underflows(fmt, d, q, data):
    p = 2.0
    plan = plan_data_dependent(p, d, q, fmt)
    assert plan.feasible, plan
    x = _vectors(fmt, d, data)
    if x.abs().max() == 0:
        return
    s = power_of_two_scale(x, q, plan.log2_k)
    xs = round_to_format(x / s[:, None], fmt)  # exact unless a tiny entry lands in the subnormals
    t = emulated_pow_sum(xs, p, fmt)
    assert torch.isfinite(t).all() and (t >= fmt.min_normal).all() and (t <= fmt.max_finite).all()
    exact = (x / s[:, None]).abs().pow(p).sum(-1)
    assert exact.item() >= plan.lo * (1 - 1e-12) and exact.item() <= plan.hi
    rel = ((t - exact).abs() / exact).item()
    assert rel <= relative_error_bound(fmt, d, p, plan.lo)


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_naive_fp16_fails_exactly_where_the_theory_says(data):
    d, p, fmt = 64, 2.0, FP16
    x = _vectors(fmt, d, data)
    t_true = x.abs().pow(p).sum().item()
    t = emulated_pow_sum(x, p, fmt).item()
    g = growth(fmt, d, p)
    # rounding can shrink the computed sum by at most (1 - u)^(d + p)
    if t_true * (1 - fmt.unit_roundoff) ** (d + 2) > fmt.max_finite * (1 + fmt.unit_roundoff):
        assert math.isinf(t)  # must overflow
    if t_true * g + d * fmt.min_subnormal / 2 < fmt.min_normal and t_true > 0:
        assert t < fmt.min_normal  # must underflow
    if t_true * g <= fmt.max_finite:
        assert math.isfinite(t)  # cannot overflow
    if (t_true - d * fmt.min_subnormal / 2) * (1 - fmt.unit_roundoff) ** (d + 2) >= fmt.min_normal:
        assert t >= fmt.min_normal  # cannot underflow


def test_fp16_rms_overflow_threshold_from_the_brief():
    # sum c^2 overflows fp16 once RMS(c) > sqrt(65504 / 576) ~ 10.66
    d = 576
    x = torch.full((1, d), 11.0, dtype=torch.float64)
    assert math.isinf(emulated_pow_sum(x, 2.0, FP16).item())
    x = torch.full((1, d), 10.0, dtype=torch.float64)
    assert math.isfinite(emulated_pow_sum(x, 2.0, FP16).item())


def test_epsilon_rescaling_keeps_the_output():
    c = torch.randn(4, 64, dtype=torch.float64) * 300
    eps = 1e-5
    for s in (2.0**5, 2.0**-3):
        ref = c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps)
        xs = c / s
        out = xs / torch.sqrt(xs.pow(2).mean(-1, keepdim=True) + eps / s**2)
        torch.testing.assert_close(out, ref)
        ref1 = c / (c.abs().mean(-1, keepdim=True) + eps)
        out1 = xs / (xs.abs().mean(-1, keepdim=True) + eps / s)
        torch.testing.assert_close(out1, ref1)
