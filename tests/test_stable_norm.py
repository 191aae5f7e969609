import pytest
import torch
from torch import nn

from edgespec.models.llama import RMSNorm
from edgespec.numerics.stable_norm import NormChoice, StableNorm, stabilize_norms_


def _rms_ref(x, w, eps):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def test_stable_rmsnorm_equals_rmsnorm_in_fp32():
    torch.manual_seed(0)
    norm = RMSNorm(64, 1e-5)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(8, 64) * 30
    for choice in (NormChoice("none"), NormChoice("linf", 2), NormChoice("l1", 3), NormChoice("const", 4)):
        torch.testing.assert_close(StableNorm(norm.weight, norm.eps, 2.0, choice)(x), norm(x), atol=1e-5, rtol=1e-5)


def test_layernorm_any_p():
    torch.manual_seed(0)
    ln = nn.LayerNorm(32)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = torch.randn(4, 32) * 5 + 3
    st = StableNorm(ln.weight, ln.eps, 2.0, NormChoice("linf", 2), zero_mean=True, bias=ln.bias)
    torch.testing.assert_close(st(x), ln(x), atol=1e-5, rtol=1e-5)
    # p = 3: compare to the float64 definition
    st3 = StableNorm(torch.ones(32), 1e-6, 3.0, NormChoice("linf", 1), zero_mean=True)
    c = x.double() - x.double().mean(-1, keepdim=True)
    ref = c / (c.abs().pow(3).mean(-1, keepdim=True) + 1e-6).pow(1 / 3)
    torch.testing.assert_close(st3(x).double(), ref, atol=1e-5, rtol=1e-5)


def test_fp16_naive_overflows_and_stable_does_not():
    w = torch.ones(576)
    x = torch.full((2, 576), 200.0)  # RMS 200 >> 10.7: sum of squares overflows fp16
    x[1] = torch.linspace(-3e4, 3e4, 576)
    naive = StableNorm(w, 1e-5, 2.0, NormChoice("none"))(x.half())
    # row 1: the squares themselves overflow -> inf sum -> the output collapses to 0
    # (row 0 only overflows with an fp16 accumulator; torch's CPU mean accumulates in fp32)
    assert (naive[1] == 0).all()
    stable = StableNorm(w, 1e-5, 2.0, NormChoice("linf", 2))(x.half())
    assert torch.isfinite(stable).all()
    torch.testing.assert_close(stable.double(), _rms_ref(x, w, 1e-5), atol=2e-2, rtol=2e-2)


def test_transform_replaces_every_norm(tiny_model):
    ref = tiny_model(torch.tensor([[1, 2, 3]]), torch.tensor([0]))
    stabilize_norms_(tiny_model, NormChoice("linf", 2))
    assert not any(isinstance(m, RMSNorm) for m in tiny_model.modules())
    assert sum(isinstance(m, StableNorm) for m in tiny_model.modules()) == 2 * tiny_model.args.n_layers + 1
    torch.testing.assert_close(tiny_model(torch.tensor([[1, 2, 3]]), torch.tensor([0])), ref, atol=1e-4, rtol=1e-4)


def test_half_model_with_stable_norms_tracks_fp32(tiny_model):
    tokens = torch.tensor([[5, 17, 3, 88, 41, 2]])
    ref = tiny_model(tokens, torch.tensor([0]))
    stabilize_norms_(tiny_model, NormChoice("linf", 2))
    tiny_model.to_half_()
    assert tiny_model.layers[0].attention.kv_cache.k_cache.dtype == torch.float32
    out = tiny_model(tokens, torch.tensor([0]))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=5e-2, rtol=5e-2)


@pytest.mark.slow
def test_stable_norms_run_in_an_executorch_program(tiny_model, tmp_path):
    """Every op of the stable norm must exist in ExecuTorch's runtime (fp16 program)."""
    from edgespec.export.lowering import ProgramMeta, export_forward, lower_to_executorch
    from edgespec.runtime.runner import ProgramRunner

    stabilize_norms_(tiny_model, NormChoice("linf", 2))
    tiny_model.to_half_()
    tokens = torch.tensor([[5, 17, 3, 88]])
    ref = tiny_model(tokens, torch.tensor([0]))[0]
    pte = lower_to_executorch({"forward": export_forward(tiny_model, tiny_model.args.max_seq_len)}, ProgramMeta(64, 97, 2, 1, (2,))).program
    (tmp_path / "m.pte").write_bytes(pte)
    out = ProgramRunner(tmp_path / "m.pte").forward(tokens, 0)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
