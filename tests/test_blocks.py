"""GGUF blocks carried into the model without a second rounding (edgespec.models.blocks, edgespec.quant).

Tiny Llama GGUF files written with the `gguf` package, one block format per file: what the
loader keeps equals what `gguf` dequantizes, and the quantized layers compute with exactly
those weights (up to XNNPACK's bf16 block scales)."""

import numpy as np
import pytest
import torch

from edgespec.config import QuantConfig
from edgespec.kernels.block_formats import GGUF_TYPES
from edgespec.models.gguf import load_gguf
from edgespec.quant import BlockOffsetLinear, plan_quantization, quantize_

DIM, HIDDEN, HEADS, KV = 64, 96, 4, 2


def write_tiny_gguf(path, fmt: str, seed: int = 0) -> dict[str, np.ndarray]:
    """A 1-layer Llama GGUF whose matrices are stored as `fmt` (norms F32); returns the
    weights `gguf` dequantizes, by GGUF name."""
    import gguf

    from tiny_models import vocabulary, write_llama_gguf

    rng = np.random.default_rng(seed)
    qtype = getattr(gguf.GGMLQuantizationType, fmt)
    kv_dim = KV * DIM // HEADS
    shapes = {
        "token_embd.weight": (len(vocabulary()), DIM),
        "blk.0.attn_q.weight": (DIM, DIM),
        "blk.0.attn_k.weight": (kv_dim, DIM),
        "blk.0.attn_v.weight": (kv_dim, DIM),
        "blk.0.attn_output.weight": (DIM, DIM),
        "blk.0.ffn_gate.weight": (HIDDEN, DIM),
        "blk.0.ffn_up.weight": (HIDDEN, DIM),
        "blk.0.ffn_down.weight": (DIM, HIDDEN),
    }
    deq, tensors = {}, {}
    for name, shape in shapes.items():
        x = (0.1 * rng.standard_normal(shape) + 0.02).astype(np.float32)  # a mean: Q4_1's offsets matter
        q = gguf.quants.quantize(x, qtype)
        tensors[name] = (q, fmt)
        deq[name] = gguf.quants.dequantize(q, qtype).reshape(shape)
    write_llama_gguf(path, DIM, HIDDEN, HEADS, KV, tensors)
    return deq


WRITABLE = ("Q4_0", "Q4_1", "Q8_0")  # the formats `gguf` itself can quantize to


@pytest.mark.parametrize("fmt", WRITABLE)
def test_loader_keeps_the_blocks_gguf_stores(tmp_path, fmt):
    deq = write_tiny_gguf(tmp_path / "m.gguf", fmt)
    src = load_gguf(tmp_path / "m.gguf", 64)
    assert set(src.blocks) == {k for k in src.state_dict if k.endswith(".weight") and src.state_dict[k].dim() == 2}
    b = src.blocks["layers.0.feed_forward.w2.weight"]
    assert b.format == fmt and b.bits == GGUF_TYPES[fmt].bits and (b.offsets is not None) == (fmt == "Q4_1")
    assert b.codes.abs().max() <= (127 if fmt == "Q8_0" else 8)
    for gname, mname in (("blk.0.ffn_down.weight", "layers.0.feed_forward.w2.weight"), ("token_embd.weight", "tok_embeddings.weight")):
        assert torch.equal(src.blocks[mname].dequantize(), torch.from_numpy(deq[gname]))  # bit for bit
        assert torch.equal(src.state_dict[mname], torch.from_numpy(deq[gname]))
    assert src.blocks["output.weight"] is src.blocks["tok_embeddings.weight"]  # tied head


def _bf16_scales(b):
    """The weight a carried layer computes with: the file's codes, scales rounded to bf16."""
    w = b.codes.float().view(b.codes.shape[0], -1, 32) * b.scales.to(torch.bfloat16).float()[..., None]
    return (w + (0 if b.offsets is None else b.offsets[..., None])).view(b.codes.shape)


@pytest.mark.parametrize("fmt", ["Q4_0", "Q4_1"])
def test_carried_linears_compute_with_the_files_weights(tmp_path, fmt):
    from edgespec.models.load import build_model

    write_tiny_gguf(tmp_path / "m.gguf", fmt)
    src = load_gguf(tmp_path / "m.gguf", 64)
    model = build_model(src)
    summary = quantize_(model, plan_quantization(model, QuantConfig(scheme="8da4w", head_bits=8, kernel="xnnpack"), src.blocks))
    assert len(summary.carried) == 7 and summary.rounded == ["output"]  # the head: int8 per channel
    layer = model.layers[0].feed_forward.w2
    assert isinstance(layer, BlockOffsetLinear) == (fmt == "Q4_1")
    inner = layer.linear if fmt == "Q4_1" else layer
    b = src.blocks["layers.0.feed_forward.w2.weight"]
    assert torch.equal(inner.weight.qdata, b.codes)  # the file's codes, not a second rounding
    w_sym = inner.weight.dequantize()
    w = w_sym if fmt == "Q4_0" else w_sym + layer.offsets.repeat_interleave(32, 1)
    assert torch.allclose(w, _bf16_scales(b), rtol=0, atol=1e-7)
    rel = ((w - b.dequantize()).abs().max() / b.dequantize().abs().max()).item()
    assert rel < 2**-8  # bf16 block scales: at most half a bf16 ulp of the scale per code step
    # the layer's output equals x @ W^T with x rounded to int8 per token (dynamic activations)
    x = torch.randn(3, HIDDEN)
    ref = x @ _bf16_scales(b).T
    assert torch.allclose(layer(x), ref, atol=0.05 * ref.abs().max().item())


def test_other_formats_and_fp32_sources_are_rounded(tmp_path):
    """XNNPACK carries Q4_0/Q4_1 only: a Q5_0 file is rounded again there, and the summary
    counts the layers by the file's type with what rounding them again cost."""
    from edgespec.models.load import build_model

    write_tiny_gguf(tmp_path / "m.gguf", "Q5_0")
    src = load_gguf(tmp_path / "m.gguf", 64)
    model = build_model(src)
    summary = quantize_(model, plan_quantization(model, QuantConfig(head_bits=4, kernel="xnnpack", embedding_bits=8), src.blocks, src.file_types))
    assert summary.carried == [] and len(summary.rounded) == 8 and summary.rounded_from == {"Q5_0": 8}
    # the cost of rounding again, over the 8 linears (not the embedding, rounded from Q5_0 too): ||W' - W|| / ||W||
    err = sum((model.get_submodule(n).weight.dequantize() - src.state_dict[f"{n}.weight"]).pow(2).sum() for n in summary.rounded)
    norm = sum(src.state_dict[f"{n}.weight"].pow(2).sum() for n in summary.rounded)
    assert 0.01 < summary.rounding_error["Q5_0"] == pytest.approx((err / norm).sqrt().item(), rel=1e-5)
    # carry_blocks off: a Q4_1 file is rounded again like any fp32 weight (the old path)
    write_tiny_gguf(tmp_path / "q.gguf", "Q4_1")
    src = load_gguf(tmp_path / "q.gguf", 64)
    model = build_model(src)
    summary = quantize_(model, plan_quantization(model, QuantConfig(scheme="8da4w", carry_blocks=False), src.blocks))
    assert summary.carried == [] and len(summary.rounded) == 8


def test_mse_scales_never_lose_to_maxabs():
    from edgespec.quant import mse_scales

    w = torch.randn(16, 64) * torch.rand(16, 1)
    for bits in (4, 8):
        q, s = mse_scales(w, bits, 32)
        err_mse = (q.float().view(16, 2, 32) * s[..., None] - w.view(16, 2, 32)).pow(2).sum(-1)
        qmax = 2 ** (bits - 1) - 1
        s0 = w.view(16, 2, 32).abs().amax(-1) / qmax
        s0 = s0.to(torch.bfloat16).float() if bits == 4 else s0
        q0 = (w.view(16, 2, 32) / s0[..., None]).round().clamp(-qmax - 1, qmax)
        assert (err_mse <= (q0 * s0[..., None] - w.view(16, 2, 32)).pow(2).sum(-1) + 1e-9).all()


@pytest.mark.parametrize("fmt", list(GGUF_TYPES))
def test_every_block_format_reads_what_gguf_dequantizes(fmt):
    """Codes, scales and mins of each type (random bytes of every field: K-quants' packed 6-bit
    scales, Q5's fifth bits, Q3_K's high-bit mask) give exactly `gguf`'s dequantized weights."""
    import gguf

    from edgespec.models.blocks import read_blocks
    from tiny_models import random_gguf_blocks

    raw = random_gguf_blocks(fmt, 8, 512, np.random.default_rng(1))
    want = torch.from_numpy(gguf.quants.dequantize(raw, getattr(gguf.GGMLQuantizationType, fmt)).reshape(8, 512).astype(np.float32))
    b = read_blocks(fmt, raw, (8, 512))
    bits = GGUF_TYPES[fmt].bits
    assert b.bits == bits and b.codes.dtype == torch.int8
    assert -(2 ** (bits - 1)) <= int(b.codes.min()) and int(b.codes.max()) < 2 ** (bits - 1)  # centred codes
    assert torch.allclose(b.dequantize(), want, rtol=1e-6, atol=1e-7)
    if b.mins is not None:  # w = scale (code + 2^(bits-1)) + min: the form the kernel computes
        w = (b.codes.float() + 2 ** (bits - 1)).view(8, -1, b.scale_block) * b.scales[..., None] + b.mins[..., None]
        assert torch.equal(w.view(8, 512), want)


@pytest.mark.parametrize("fmt", ["Q4_0", "Q4_1", "Q4_K", "Q8_0", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q3_K"])
def test_kernel_carries_each_type_exactly(fmt):
    """Each type edgespec's kernel carries becomes a block linear that computes with the file's
    weights bit for bit (what `gguf` dequantizes), not a rounding of them."""
    import gguf

    from edgespec.kernels.block_linear import BlockLinear
    from edgespec.models.blocks import read_blocks
    from edgespec.quant import KERNEL_CARRIED, Carried
    from tiny_models import random_gguf_blocks

    assert fmt in KERNEL_CARRIED
    raw = random_gguf_blocks(fmt, 16, 256, np.random.default_rng(2))
    want = torch.from_numpy(gguf.quants.dequantize(raw, getattr(gguf.GGMLQuantizationType, fmt)).reshape(16, 256).astype(np.float32))
    layer = Carried(fmt, "edgespec", read_blocks(fmt, raw, (16, 256))).apply(torch.nn.Linear(256, 16, bias=False))
    assert isinstance(layer, BlockLinear) and torch.equal(layer.blocks.dequantize(), want)
