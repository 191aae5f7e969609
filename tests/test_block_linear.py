"""edgespec's linear kernel over GGUF-style blocks (`quant.kernel: edgespec`): the packed
layout, carrying a file's blocks exactly, the kernel's paths against each other (natively
and, cross-compiled, on aarch64 under qemu), and the op in real ExecuTorch programs bitwise
equal to its eager reference for every format and every row count."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from edgespec.kernels import library
from edgespec.kernels.block_linear import BLOCK, FORMAT_IDS, TILE_BYTES, BlockCodes, BlockEmbedding, BlockLinear, pack, reference_block_linear, unpack

KERNELS = Path(__file__).resolve().parent.parent / "sdk" / "edgespec" / "kernels"
SELFTEST = Path(__file__).parent / "kernels" / "block_linear_selftest.cpp"  # block_linear.h's self-test, built with the shipped flags


FORMATS = list(FORMAT_IDS)


def _codes(fmt: str, out: int, n: int, seed: int = 0) -> BlockCodes:
    """Random blocks of `fmt`: codes over their whole range (every int8 for S8*)."""
    g = torch.Generator().manual_seed(seed)
    G = n // BLOCK
    if fmt in ("S8H", "S8F"):
        d = torch.rand(out, G if fmt == "S8H" else 2 * G, generator=g) * 0.01
        return BlockCodes(fmt, torch.randint(-128, 128, (out, n), generator=g, dtype=torch.int8), d.half().float() if fmt == "S8H" else d)
    d, m = torch.rand(out, G, generator=g) * 0.05, -torch.rand(out, G, generator=g) * 0.4
    if fmt == "U4H":
        d, m = d.half().float(), m.half().float()
    lo, hi = (-128, 128) if fmt == "S8M" else (0, 16)
    return BlockCodes(fmt, torch.randint(lo, hi, (out, n), generator=g, dtype=torch.int8), d, m)


@pytest.mark.parametrize("fmt", FORMATS)
def test_pack_roundtrip(fmt):
    b = _codes(fmt, 23, 96)  # a padded last tile
    u = unpack(pack(b), fmt, 23, 96)
    assert torch.equal(u.codes, b.codes) and torch.equal(u.d, b.d)
    assert (u.m is None) == (b.m is None) and (u.m is None or torch.equal(u.m, b.m))


@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_are_the_matrix_rows(fmt):
    """`BlockCodes.rows` (an embedding lookup in the blocks) gives `dequantize`'s rows bitwise,
    for ids of any shape."""
    b = _codes(fmt, 23, 96)
    ids = torch.tensor([[22, 0, 7], [7, 16, 3]])
    assert torch.equal(b.rows(ids), b.dequantize()[ids])
    assert torch.equal(BlockEmbedding(b)(ids[0]), b.dequantize()[ids[0]])


@pytest.mark.parametrize("fmt", ["S8H", "S8M"])
def test_a_min_is_given_exactly_where_the_format_has_one(fmt):
    b = _codes(fmt, 4, 32)
    with pytest.raises(ValueError, match="per-block min"):
        BlockCodes(fmt, b.codes, b.d, None if b.m is not None else b.d)


def test_u4h_refuses_scales_fp16_cannot_hold():
    b = _codes("U4F", 4, 32)
    with pytest.raises(ValueError, match="fp16"):
        BlockCodes("U4H", b.codes, b.d * 1.0001, b.m)


@pytest.mark.parametrize("fmt", ["Q4_0", "Q4_1", "Q8_0"])
def test_carried_blocks_are_the_files_weights(fmt):
    """A GGUF block tensor (written with the `gguf` package's own quantizer) in the kernel's
    terms dequantizes to exactly what `gguf` dequantizes."""
    from gguf import GGMLQuantizationType, quants

    from edgespec.models.blocks import read_blocks
    from edgespec.quant import carried_codes

    qt = GGMLQuantizationType[fmt]
    w = np.random.default_rng(0).normal(0, 0.05, (8, 64)).astype(np.float32)
    raw = quants.quantize(w, qt)
    codes = carried_codes(read_blocks(fmt, raw, w.shape))
    assert torch.equal(codes.dequantize(), torch.from_numpy(quants.dequantize(raw, qt).astype(np.float32)))


def test_reference_is_close_to_the_float_product():
    """The block arithmetic (int8 activations per block of 32) stays within a fraction of a
    percent of the float product with the same weights."""
    b = _codes("U4H", 64, 576)
    x = torch.randn(3, 576)
    exact = x @ b.dequantize().T
    err = (reference_block_linear(x, b) - exact).norm() / exact.norm()
    assert err < 0.01


def test_rounded_blocks_fit_the_weights():
    from edgespec.quant import asymmetric_blocks, symmetric8_blocks

    w = torch.randn(16, 128) * 0.1
    err4 = {r: (asymmetric_blocks(w, r).dequantize() - w).pow(2).sum() for r in ("maxabs", "mse")}
    assert err4["mse"] <= err4["maxabs"]
    assert err4["maxabs"] / w.pow(2).sum() < 0.01
    assert (symmetric8_blocks(w).dequantize() - w).abs().max() <= w.abs().max() / 127


# the self-test's report of the formats it checked: every Format, with block_linear.py's tile sizes
SELFTEST_FORMATS = "formats=" + ",".join(str(TILE_BYTES[f]) for f in sorted(FORMAT_IDS, key=FORMAT_IDS.get))


def _selftest(compiler: list[str], run: list[str], tmp_path: Path, codegen: tuple[str, ...] | None = None) -> str:
    """Build the self-test with `codegen` (by default the flags the kernel library ships with:
    the code it checks is the code that runs) and run it."""
    exe = tmp_path / "selftest"
    build = subprocess.run([*compiler, *(codegen or library.codegen()), f"-I{KERNELS}", str(SELFTEST), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    done = subprocess.run([*run, str(exe)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_kernel_paths_agree_natively(tmp_path):
    """Every SIMD path this CPU runs gives the portable path's bits, for every format,
    M = 1..16 and 70 rows, and any split of the tile rows among threads; the fastest is
    dispatched to."""
    out = _selftest([shutil.which("g++") or "c++"], [], tmp_path).split()
    assert out[:2] == ["ok", SELFTEST_FORMATS] and out[-1] == "portable", out
    flags = set(next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "").split())
    expected = [
        name
        for name, needs in (
            ("avx512-vnni", {"avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx2", "fma", "f16c"}),
            ("amx-int8", {"amx_tile", "amx_int8", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx2", "fma", "f16c"}),
            ("avx-vnni", {"avx_vnni", "avx2", "fma", "f16c"}),
            ("avx2", {"avx2", "fma", "f16c"}),
        )
        if needs <= flags
    ]
    assert out[2:-1] == expected, (out, expected)


def test_kernel_paths_agree_on_aarch64(tmp_path):
    """Cross-compiled for aarch64 (Debian's g++-aarch64-linux-gnu) and run under qemu: the
    NEON i8mm and dot-product paths (`-cpu max` has both), the dot-product path alone (a
    Cortex-A76 has no i8mm) and the portable one (a Cortex-A53 has neither) each give the
    portable bits; each CPU's paths found from its hwcaps."""
    cxx, qemu = shutil.which("aarch64-linux-gnu-g++"), shutil.which("qemu-aarch64")
    assert cxx and qemu, "install g++-aarch64-linux-gnu and qemu-user (README's test command does)"
    # the flags the library ships with on aarch64 (the Armv8.0 baseline: SIMD paths chosen at run time)
    arm = library.codegen("aarch64")
    assert _selftest([cxx, "-static"], [qemu, "-cpu", "max"], tmp_path, arm) == f"ok {SELFTEST_FORMATS} neon-i8mm neon-dotprod portable"
    for cpu, paths in (("cortex-a76", "neon-dotprod portable"), ("cortex-a53", "portable")):
        done = subprocess.run([qemu, "-cpu", cpu, str(tmp_path / "selftest")], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and done.stdout.strip() == f"ok {SELFTEST_FORMATS} {paths}", (cpu, done.stdout)


def _program(module: torch.nn.Module, k: int):
    from executorch.exir import to_edge
    from executorch.runtime import Runtime

    import edgespec.kernels.ops  # noqa: F401  (the op's schema)
    from edgespec.kernels import library

    library.load()
    seq = torch.export.Dim("T", min=1, max=100)
    ep = torch.export.export(module, (torch.zeros(1, 4, k),), dynamic_shapes=({1: seq},), strict=False)
    program = Runtime.get().load_program(to_edge(ep).to_executorch().buffer)
    return program, program.load_method("forward")  # the method lives as long as its program


@pytest.mark.slow
def test_table_rows_in_a_program_are_the_eager_rows_for_every_format():
    """`edgespec::block_embedding` in a real `.pte`: every format's rows bitwise those eager code
    dequantizes (padded last tile included), for ids of two dimensions; an id past the table is
    refused, not read."""
    from executorch.exir import to_edge
    from executorch.runtime import Runtime

    import edgespec.kernels.ops  # noqa: F401  (the op's schema)

    library.load()
    for fmt in FORMATS:
        b = _codes(fmt, 45, 96, seed=5)
        table = BlockEmbedding(b).op()
        seq = torch.export.Dim("T", min=1, max=64)
        ep = torch.export.export(table, (torch.zeros(1, 3, dtype=torch.long),), dynamic_shapes=({1: seq},), strict=False)
        program = Runtime.get().load_program(to_edge(ep).to_executorch().buffer)
        method = program.load_method("forward")
        ids = torch.tensor([[44, 0, 17, 8, 16, 44, 31]])
        assert torch.equal(method.execute([ids])[0], b.dequantize()[ids]), fmt
    with pytest.raises(RuntimeError):
        method.execute([torch.tensor([[45]])])


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_program_equals_reference_for_every_row_count(fmt):
    """The op in a real `.pte`, 1..8 and 70 rows: bitwise the eager reference, hence a row's
    result does not depend on how many rows share the call (speculative verification stays
    exact)."""
    out, k = 45, 192
    b = _codes(fmt, out, k, seed=3)
    linear = BlockLinear(b).op()
    _keep, method = _program(linear, k)
    x = torch.randn(1, 70, k) * 3
    ref = reference_block_linear(x, b)
    alone = torch.cat([method.execute([x[:, i : i + 1].contiguous()])[0] for i in range(70)], 1)
    assert torch.equal(alone, ref)
    for m in (*range(1, 9), 70):
        assert torch.equal(method.execute([x[:, :m].contiguous()])[0], alone[:, :m]), m


def test_reference_quantizes_non_finite_and_tiny_blocks_as_the_kernel_does():
    """A block holding a NaN or an infinity makes its row NaN; a block so small that 1/d
    overflows counts as zero (block_linear.h's `quantize_rows`; the self-test holds every path
    to the same)."""
    b = _codes("U4H", 16, 96)
    x = torch.randn(3, 96)
    x[0, 5], x[1, 40] = float("nan"), float("-inf")
    x[2, 64:] = torch.tensor([0.0 if j % 3 == 0 else 1e-38 * j for j in range(32)])
    y = reference_block_linear(x, b)
    assert y[:2].isnan().all()
    zeroed = x[2:].clone()
    zeroed[0, 64:] = 0
    assert torch.equal(y[2:], reference_block_linear(zeroed, b))


@pytest.mark.slow
def test_program_equals_reference_on_non_finite_and_tiny_blocks():
    """The op in a real `.pte` on rows with a NaN, an infinity and a tiny block: the
    reference's values (NaN where it is NaN), every format."""
    k = 96
    x = torch.randn(1, 4, k)
    x[0, 0, 5], x[0, 1, 40] = float("nan"), float("inf")
    x[0, 2, 64:] = torch.tensor([0.0 if j % 3 == 0 else 1e-38 * j for j in range(32)])
    for fmt in FORMATS:
        b = _codes(fmt, 33, k, seed=5)
        linear = BlockLinear(b).op()
        _keep, method = _program(linear, k)
        torch.testing.assert_close(method.execute([x])[0], reference_block_linear(x, b), rtol=0, atol=0, equal_nan=True)


def test_stacked_linears_compute_each_ones_bits():
    """q/k/v (and gate/up) stacked into one block linear give, split back, bitwise each
    linear's own output (the kernel is per output row), biases and adapters included; mixed
    formats are not stacked."""
    from edgespec.export.kernel_modules import Stacked
    from edgespec.kernels.block_linear import stacked
    from edgespec.models.llama import adapted

    parts = [BlockLinear(_codes("U4H", n, 96, seed=i), torch.randn(n)) for i, n in enumerate((32, 16, 16))]
    fused = Stacked(stacked(parts), ("wq", "wk", "wv"), (32, 16, 16))
    x = torch.randn(5, 96)
    lora = {"wk": torch.nn.Linear(96, 16)}
    with torch.no_grad():
        got = fused(x, lora)
        want = [adapted(p, lora, n, x) for p, n in zip(parts, ("wq", "wk", "wv"))]
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert stacked([parts[0], BlockLinear(_codes("S8H", 16, 96))]) is None
    assert stacked([parts[0], torch.nn.Linear(96, 16)]) is None


def test_exporting_a_block_kernel_model_swaps_in_kernel_modules_and_restores_the_models_own():
    """Inside the export's swaps the model's norms, attentions and feed-forwards are edgespec's
    kernel modules (q/k/v and gate/up stacked, the separate linears left out of the program),
    block linears run their op; after, the very same modules and weights are back. Without
    glue only the block linears run their op."""
    from edgespec.config import QuantConfig
    from edgespec.export.kernel_modules import KernelAttention, KernelFeedForward, KernelRMSNorm
    from edgespec.export.swaps import executorch_ops
    from edgespec.models.llama import LlamaArgs
    from edgespec.quant import plan_quantization, quantize_
    from tiny_models import random_transformer

    model = random_transformer(LlamaArgs(dim=64, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=96, vocab_size=97, max_seq_len=32))
    quantize_(model, plan_quantization(model, QuantConfig(scheme="8da4w", kernel="edgespec")))
    layer = model.layers[0]
    own, own_attention = list(model.modules()), model.layers[0].attention
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with executorch_ops(model, "exact", glue=True):
        attn, ffn = layer.attention, layer.feed_forward
        assert isinstance(attn, KernelAttention) and isinstance(ffn, KernelFeedForward) and isinstance(layer.attention_norm, KernelRMSNorm)
        assert (
            attn.stacked.linear.out_features == 64 + 2 * 32
            and ffn.stacked.linear.out_features == 2 * 96
            and type(attn.stacked.linear).__name__ == "BlockLinearOp"
        )
        assert not any(hasattr(attn, n) for n in ("wq", "wk", "wv")) and not any(hasattr(ffn, n) for n in ("w1", "w3"))
        assert type(attn.wo).__name__ == "BlockLinearOp" and "wq" in own_attention._modules  # the model's own attention keeps its q
    assert list(model.modules()) == own
    with executorch_ops(model, "exact"):
        assert type(layer.attention).__name__ == "Attention" and type(layer.attention.wk).__name__ == "BlockLinearOp"
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_a_module_held_in_two_places_is_swapped_in_both_and_restored():
    """A drafter may hold the base model's head or final norm as its own: the export's swaps
    reach every place a module is held, and put the very same module back in each."""
    from edgespec.config import QuantConfig
    from edgespec.export.kernel_modules import KernelRMSNorm, kernel_modules
    from edgespec.kernels.block_linear import BlockLinearOp
    from edgespec.models.llama import LlamaArgs
    from edgespec.quant import plan_quantization, quantize_
    from tiny_models import random_transformer

    model = random_transformer(LlamaArgs(dim=64, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=96, vocab_size=97, max_seq_len=32))
    quantize_(model, plan_quantization(model, QuantConfig()))
    program = torch.nn.Module()
    program.base, program.head, program.norm = model, model.output, model.norm  # the drafter's references
    head, norm = model.output, model.norm
    with kernel_modules(program, glue=True):
        assert isinstance(program.head, BlockLinearOp) and isinstance(program.base.output, BlockLinearOp)
        assert isinstance(program.norm, KernelRMSNorm) and isinstance(program.base.norm, KernelRMSNorm)
    assert program.head is head is program.base.output and program.norm is norm is program.base.norm


def write_k_m_gguf(path: Path, main: str = "Q4_K") -> dict[str, np.ndarray]:
    """A 1-layer Llama GGUF laid out like llama.cpp's Q4_K_M / Q5_K_M (`main` matrices, Q6_K
    for attn_v and ffn_down, the embedding Q8_0; random K-quant bytes, which `gguf` cannot
    quantize to); returns what `gguf` dequantizes by GGUF name."""
    import gguf

    from tiny_models import random_gguf_blocks, vocabulary, write_llama_gguf

    dim, hidden, heads, kv = 256, 512, 4, 2
    rng = np.random.default_rng(0)
    kv_dim = kv * dim // heads
    layout = {
        "token_embd.weight": ((len(vocabulary()), dim), "Q8_0"),
        "blk.0.attn_q.weight": ((dim, dim), main),
        "blk.0.attn_k.weight": ((kv_dim, dim), main),
        "blk.0.attn_v.weight": ((kv_dim, dim), "Q6_K"),
        "blk.0.attn_output.weight": ((dim, dim), main),
        "blk.0.ffn_gate.weight": ((hidden, dim), main),
        "blk.0.ffn_up.weight": ((hidden, dim), main),
        "blk.0.ffn_down.weight": ((dim, hidden), "Q6_K"),
    }
    deq, tensors = {}, {}
    for name, (shape, fmt) in layout.items():
        qtype = getattr(gguf.GGMLQuantizationType, fmt)
        raw = gguf.quants.quantize((0.05 * rng.standard_normal(shape)).astype(np.float32), qtype) if fmt == "Q8_0" else random_gguf_blocks(fmt, *shape, rng)
        tensors[name] = (raw, fmt)
        deq[name] = gguf.quants.dequantize(raw, qtype).reshape(shape)
    write_llama_gguf(path, dim, hidden, heads, kv, tensors)
    return deq


@pytest.mark.parametrize("main, kernel_format", [("Q4_K", "U4F"), ("Q5_K", "S8M")])
def test_k_m_file_is_carried_not_rounded(tmp_path, main, kernel_format):
    """Q4_K / Q5_K and Q6_K matrices are carried into edgespec's kernel exactly (sub-blocks of
    32 with scale d sc and min -dmin m, Q6_K's codes q - 32 with a scale per 16: equal to
    `gguf`'s dequantization); nothing is rounded again; the carried layers compute with the
    file's weights."""
    from edgespec.config import QuantConfig
    from edgespec.models.gguf import load_gguf
    from edgespec.models.load import build_model
    from edgespec.quant import plan_quantization, quantize_

    deq = write_k_m_gguf(tmp_path / "m.gguf", main)
    src = load_gguf(tmp_path / "m.gguf", 64)
    q = src.blocks["layers.0.attention.wq.weight"]
    assert q.format == main
    assert torch.equal(q.dequantize(), torch.from_numpy(deq["blk.0.attn_q.weight"]))
    down = src.blocks["layers.0.feed_forward.w2.weight"]
    assert down.format == "Q6_K" and torch.equal(down.dequantize(), torch.from_numpy(deq["blk.0.ffn_down.weight"]))
    model = build_model(src)
    summary = quantize_(model, plan_quantization(model, QuantConfig(scheme="8da4w", kernel="edgespec"), src.blocks, src.file_types))
    assert summary.rounded == [] and summary.rounded_from == {} and len(summary.carried) == 8
    w2 = model.layers[0].feed_forward.w2
    assert w2.format == "S8F" and torch.equal(w2.blocks.dequantize(), src.state_dict["layers.0.feed_forward.w2.weight"])
    wq = model.layers[0].attention.wq
    assert isinstance(wq, BlockLinear) and wq.format == kernel_format  # d * sc is not an fp16 value in general
    w_file = src.state_dict["layers.0.attention.wq.weight"]
    assert torch.equal(wq.blocks.dequantize(), w_file)
    x = torch.randn(5, 256)
    exact = x @ w_file.T
    assert (wq(x) - exact).norm() / exact.norm() < 0.01
    # the tied table: rows read from the Q8_0 blocks the head carries, the file's values exactly
    table = model.tok_embeddings
    assert isinstance(table, BlockEmbedding) and table.format == "S8H" and torch.equal(table.packed, model.output.packed)
    ids = torch.arange(table.num_embeddings)
    assert torch.equal(table(ids), src.state_dict["tok_embeddings.weight"])


def _tiny_block_kernel_model():
    """A tiny Llama with every linear on edgespec's block kernel (seeded: the same weights each
    call). 9 query heads over 3 key/value heads, as SmolLM2: decoding at 2 threads splits a
    group of heads between the threads."""
    from edgespec.config import QuantConfig
    from edgespec.kernels import library
    from edgespec.models.llama import LlamaArgs
    from edgespec.quant import plan_quantization, quantize_
    from tiny_models import random_transformer

    library.load()
    args = LlamaArgs(dim=288, n_layers=2, n_heads=9, n_kv_heads=3, hidden_dim=160, vocab_size=97, max_seq_len=64)
    model = random_transformer(args)
    summary = quantize_(model, plan_quantization(model, QuantConfig(scheme="8da4w", kernel="edgespec")))
    assert len(summary.rounded) == 2 * 7 + 1 and all(isinstance(m, BlockLinear) for m in (model.output, model.layers[1].feed_forward.w2))
    return model.eval()


def _lower_block_kernel_program(model) -> bytes:
    """The model lowered with no delegate (block kernel, fused glue, edgespec's attention)."""
    from edgespec.export.lowering import ProgramMeta, export_forward, lower_to_executorch

    return lower_to_executorch(
        {"forward": export_forward(model, model.args.max_seq_len, "exact", glue=True)}, ProgramMeta(64, 97, 2, 1, (2,)), xnnpack="none"
    ).program


@functools.cache
def _tiny_block_kernel_pte() -> bytes:
    """The tiny model's program, lowered once for the tests that read it (a lowering costs a
    minute or more)."""
    return _lower_block_kernel_program(_tiny_block_kernel_model())


def _tiny_block_kernel_program():
    """(a fresh tiny eager model, its program's bytes)."""
    return _tiny_block_kernel_model(), _tiny_block_kernel_pte()


@pytest.mark.slow
def test_block_kernel_program_is_row_invariant_end_to_end(tmp_path):
    """A tiny Llama with every linear on edgespec's block kernel (`quant.kernel: edgespec`),
    lowered with no delegate (block kernel, fused glue and edgespec's attention end to end):
    its logits follow the eager model's, and a prompt prefilled in one call gives bitwise
    the logits of the same tokens decoded one at a time (every op is per row)."""
    from executorch.runtime import Runtime

    model, pte = _tiny_block_kernel_program()
    program = Runtime.get().load_program(pte)
    method = program.load_method("forward")
    tokens = torch.randint(0, 97, (1, 9))
    prefill = method.execute([tokens, torch.tensor([0])])[0]
    with torch.no_grad():
        model.reset_cache()
        eager = model(tokens, torch.tensor([0]))
    assert (prefill - eager).abs().max() < 1e-3 * eager.abs().max()
    for i in range(9):
        one = method.execute([tokens[:, i : i + 1], torch.tensor([i])])[0]
    assert torch.equal(one, prefill)


def _planned_bytes(pte: bytes) -> int:
    """The bytes ExecuTorch plans for `forward`'s activations and mutable buffers (KV caches)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte)
    plan = next(p for p in getattr(program, "program", program).execution_plan if p.name == "forward")
    return sum(plan.non_const_buffer_sizes)


@pytest.mark.slow
def test_an_fp16_kv_cache_halves_the_cache_keeps_rows_invariant_and_follows_eager_code():
    """quant.kv_cache: fp16 (`half_kv_cache_`): the program plans half the cache's bytes; a prompt
    prefilled in one call gives bitwise the logits of the same tokens decoded one at a time
    (the exact attention widens each fp16 element the same way in every regime), and the
    logits follow the eager model's with the same fp16 cache, and the fp32 cache's closely."""
    from executorch.runtime import Runtime

    from edgespec.models.llama import half_kv_cache_

    model = half_kv_cache_(_tiny_block_kernel_model())
    assert model.layers[0].attention.kv_cache.k_cache.dtype == torch.float16
    pte = _lower_block_kernel_program(model)
    cache_bytes = sum(
        b.numel() * 4 for m in _tiny_block_kernel_model().modules() for b in (getattr(m, "k_cache", None), getattr(m, "v_cache", None)) if b is not None
    )
    assert _planned_bytes(_tiny_block_kernel_pte()) - _planned_bytes(pte) >= 0.9 * cache_bytes / 2
    method = Runtime.get().load_program(pte).load_method("forward")
    tokens = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(2))
    prefill = method.execute([tokens, torch.tensor([0])])[0]
    for i in range(9):
        one = method.execute([tokens[:, i : i + 1], torch.tensor([i])])[0]
    assert torch.equal(one, prefill)
    with torch.no_grad():
        model.reset_cache()
        eager = model(tokens, torch.tensor([0]))
        full = _tiny_block_kernel_model()
        full.reset_cache()
        fp32_cache = full(tokens, torch.tensor([0]))
    assert (prefill - eager).abs().max() < 1e-3 * eager.abs().max()
    assert (eager - fp32_cache).abs().max() < 2e-2 * fp32_cache.abs().max()


@pytest.mark.slow
def test_a_prompt_fed_in_chunks_gives_the_bits_of_one_call_with_less_planned_memory(tmp_path):
    """export.prefill_chunk: a program taking at most 4 tokens a call (get_max_seq_len 4,
    get_max_context_len 64) plans less activation memory, and the runner feeds a 9-token
    prompt in chunks of 4, 4 and 1: bitwise the logits of the whole-context program's one call,
    then the same decoded token's."""
    from executorch.runtime import Runtime

    from edgespec.export.lowering import ProgramMeta, export_forward, lower_to_executorch
    from edgespec.runtime.runner import ProgramRunner

    model = _tiny_block_kernel_model()
    pte = lower_to_executorch(
        {"forward": export_forward(model, 64, "exact", call_tokens=4, glue=True)}, ProgramMeta(64, 97, 2, 1, (2,), call_tokens=4), xnnpack="none"
    ).program
    assert _planned_bytes(pte) < _planned_bytes(_tiny_block_kernel_pte())
    (tmp_path / "chunked.pte").write_bytes(pte)
    runner = ProgramRunner(tmp_path / "chunked.pte")
    assert (runner.max_seq_len, runner.call_tokens) == (64, 4)
    whole = Runtime.get().load_program(_tiny_block_kernel_pte()).load_method("forward")
    tokens = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(4))
    assert torch.equal(runner.forward(tokens, 0), whole.execute([tokens, torch.tensor([0])])[0][0])
    assert torch.equal(runner.forward(tokens[:, :1], 9), whole.execute([tokens[:, :1], torch.tensor([9])])[0][0])


def _forwards(pte: bytes, tokens: torch.Tensor, decoded: int = 3) -> torch.Tensor:
    """A prompt prefilled in one call, then `decoded` of its tokens fed one at a time after it:
    every logit, flat."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    T = tokens.shape[1]
    out = [method.execute([tokens, torch.tensor([0])])[0]]
    out += [method.execute([tokens[:, i : i + 1], torch.tensor([T + i])])[0] for i in range(decoded)]
    return torch.cat([x.reshape(-1) for x in out])


@pytest.mark.slow
def test_glue_folded_into_the_linears_changes_no_bit(monkeypatch):
    """export/fusion.py folds a block-kernel program's norms, SwiGLU gates and residual adds
    into its block linears (`prologue`, `residual`): the tiny Llama keeps one norm (the final
    one, read through a select) and no gate, split of gate/up, or add; and its logits, prefill
    and decoded, are bitwise those of the same model lowered without the pass."""
    from edgespec.export import fusion
    from edgespec.export.lowering import export_forward

    model, folded = _tiny_block_kernel_program()
    ep = fusion.fuse_block_linear_glue(export_forward(model, model.args.max_seq_len, "exact", glue=True))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert targets.count("edgespec.rms_norm.default") == 1 and "edgespec.silu_mul.default" not in targets and "aten.add.Tensor" not in targets
    assert targets.count("aten.split_with_sizes.default") == 2  # q/k/v's, one per layer
    monkeypatch.setattr(fusion, "fuse_block_linear_glue", lambda ep: ep)
    plain = _lower_block_kernel_program(_tiny_block_kernel_model())
    tokens = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(1))
    assert torch.equal(_forwards(folded, tokens), _forwards(plain, tokens))


_THREAD_COUNTS = """
import sys, torch
from edgespec.kernels import library
from edgespec.runtime.runner import load_runtime_kernels, set_threads
from executorch.runtime import Runtime
library.load()
load_runtime_kernels()
tokens = torch.arange(40).reshape(1, 40) % 97
logits = []
for n in (2, 1, 2):  # the kernels' pool follows ExecuTorch's thread count: built, rebuilt, rebuilt
    set_threads(n)
    method = Runtime.get().load_program(sys.argv[1]).load_method("forward")
    out = [method.execute([tokens, torch.tensor([0])])[0]]
    out += [method.execute([tokens[:, i : i + 1], torch.tensor([40 + i])])[0] for i in range(3)]
    logits.append(torch.cat(out))
print(int(all(torch.equal(logits[0], x) for x in logits)))
"""


@pytest.mark.slow
def test_block_kernel_program_gives_the_same_bits_at_every_thread_count(tmp_path):
    """edgespec's kernel thread pool (kernels/threadpool.cpp) follows ExecuTorch's thread
    count, rebuilt when it changes, and a prefill and decoded tokens compute the same bits at
    2, 1 and 2 threads again (sections split among threads never change a row's arithmetic)."""
    import subprocess
    import sys

    _, pte = _tiny_block_kernel_program()
    path = tmp_path / "tiny.pte"
    path.write_bytes(pte)
    out = subprocess.run([sys.executable, "-c", _THREAD_COUNTS, str(path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "1"


@pytest.mark.slow
def test_argmax_scan_gives_torchs_index_and_replaces_a_programs_argmaxes():
    """edgespec::argmax_rows (glue.cpp) in a real `.pte` gives `x.argmax(-1)` on rows with ties,
    -inf, NaN and lengths that are not multiples of the vector width; export/fusion.py swaps it
    in for a block-kernel program's 2-D argmaxes, keepdim or not, and leaves others alone."""
    from executorch.exir import to_edge
    from executorch.runtime import Runtime

    from edgespec.export import fusion
    from edgespec.kernels import library

    library.load()

    class Scans(torch.nn.Module):
        def forward(self, x, y, z):
            return x.argmax(-1), y.argmax(-1, keepdim=True), z.argmax(0)  # z's over rows: not a scan of rows

    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 1037, generator=g)
    x[0, 5] = x[0, 900] = 50.0  # a tie: the first
    x[1] = float("-inf")  # all -inf: index 0
    x[2, 700], x[2, 3] = float("nan"), 99.0  # a NaN wins, as in torch
    x[3, 1036] = 80.0  # in the tail past the last full vector
    y, z = torch.randn(4, 16, generator=g), torch.randn(5, 9, generator=g)
    model = Scans()
    ep = torch.export.export(model, (x, y, z), strict=False)
    with_linear = fusion._scan_argmaxes(ep.graph_module.graph)  # the pass's step, without the block-linear check
    ep.graph_module.recompile()
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert with_linear == 2 and targets.count("edgespec.argmax_rows.default") == 2 and targets.count("aten.argmax.default") == 1
    out = Runtime.get().load_program(to_edge(ep).to_executorch().buffer).load_method("forward").execute([x, y, z])
    for got, want in zip(out, model(x, y, z)):
        assert got.dtype == torch.long and torch.equal(got, want)


@pytest.mark.slow
def test_glue_ops_match_their_references():
    """edgespec::rms_norm, rope and silu_mul (kernels/glue.cpp) in a real `.pte` agree with
    the model's own PyTorch arithmetic (sizes that are not multiples of the vector width)."""
    from executorch.exir import to_edge
    from executorch.runtime import Runtime

    import edgespec.kernels.ops  # noqa: F401
    from edgespec.kernels import library
    from edgespec.models.llama import RMSNorm, apply_rope, rope_tables

    library.load()

    class Glue(torch.nn.Module):
        def forward(self, x, w, q, cos, sin, a, b):
            return torch.ops.edgespec.rms_norm(x, w, 1e-5), torch.ops.edgespec.rope(q, cos, sin), torch.ops.edgespec.silu_mul(a, b)

    x, w = torch.randn(1, 3, 100) * 4, torch.randn(100)
    q = torch.randn(1, 3, 5, 64)
    cos, sin = (t[7:10] for t in rope_tables(64, 16, 10000.0))
    a, b = torch.randn(1, 3, 1539) * 6, torch.randn(1, 3, 1539)
    args = (x, w, q, cos, sin, a, b)
    program = Runtime.get().load_program(to_edge(torch.export.export(Glue(), args, strict=False)).to_executorch().buffer)
    norm, rot, gate = program.load_method("forward").execute(list(args))
    ref_norm = RMSNorm(100, 1e-5)
    with torch.no_grad():
        ref_norm.weight.copy_(w)
    torch.testing.assert_close(norm, ref_norm(x), rtol=1e-5, atol=1e-5)
    assert torch.equal(rot, apply_rope(q, cos, sin))  # the same operations per element
    torch.testing.assert_close(gate, torch.nn.functional.silu(a) * b, rtol=1e-6, atol=1e-5)


@pytest.mark.slow
def test_info_names_the_kernel_paths_this_cpu_runs(tmp_path):
    """`edgespec info` on a block-kernel bundle names the kernel's SIMD paths on this CPU (the
    portable path, where it is the only one, said to be slow); nothing for other programs."""
    from edgespec.cli.bundles import _kernel_line
    from edgespec.kernels import plan

    _, pte = _tiny_block_kernel_program()
    (tmp_path / "model.pte").write_bytes(pte)
    line = _kernel_line(tmp_path / "model.pte")
    assert line is not None and f"paths on this CPU: {', '.join(plan.supported_paths())}" in line
    (tmp_path / "other.pte").write_bytes(b"\0" * 64)
    assert _kernel_line(tmp_path / "other.pte") is None and _kernel_line(tmp_path / "missing.pte") is None
