"""edgespec's exact attention kernel (`export.step_attention: exact`): in a real ExecuTorch
program, R rows in one call give the bits R one-row calls give (attention output, logits
and the cache the next call reads), for causal and tree-masked rows, at fp32 and 8da4w."""

from __future__ import annotations

import os

import pytest
import torch

from edgespec.models.llama import LlamaArgs, Transformer

ARGS = LlamaArgs(dim=96, n_layers=2, n_heads=6, n_kv_heads=2, hidden_dim=192, vocab_size=97, max_seq_len=160)


def _model(precision: str) -> Transformer:
    torch.manual_seed(0)
    model = Transformer(ARGS)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    if precision == "8da4w":
        from edgespec.config import QuantConfig
        from edgespec.quant import plan_quantization, quantize_

        quantize_(model, plan_quantization(model, QuantConfig(scheme="8da4w", group_size=32)))
    return model.eval()


def _forward_pte(tmp_path, precision: str, attention: str):
    from edgespec.export.lowering import ProgramMeta, export_forward, lower_to_executorch
    from edgespec.runtime.runner import ProgramRunner

    path = tmp_path / f"{precision}-{attention}.pte"
    path.write_bytes(lower_to_executorch({"forward": export_forward(_model(precision), ARGS.max_seq_len, attention)}, ProgramMeta(160, 97, 2, 1, (2,))).program)
    return ProgramRunner(path)


@pytest.mark.slow
def test_kernel_matches_the_reference():
    """The C++ kernel, called through a one-op program, agrees with `reference_attention`
    (causal and masked), and its row outputs do not depend on T."""
    from edgespec.kernels import library
    from edgespec.kernels.ops import reference_attention

    library.load()
    torch.manual_seed(1)
    S, Hkv, H, D = 150, 2, 6, 32
    k, v = torch.randn(1, S, Hkv, D), torch.randn(1, S, Hkv, D)

    class Op(torch.nn.Module):
        def forward(self, q, k, v, pos, mask):
            return torch.ops.edgespec.attention(q, k, v, pos[0].item(), mask)

    from executorch.exir import to_edge
    from executorch.runtime import Runtime

    import edgespec.kernels.ops  # noqa: F401

    T = 5
    q = torch.randn(1, T, H, D)
    mask = torch.zeros(T, 140).masked_fill(torch.rand(T, 140) < 0.3, float("-inf"))
    mask[:, 0] = 0.0
    rows = torch.export.Dim("rows", min=1, max=8)
    ep = torch.export.export(Op(), (q, k, v, torch.tensor([7]), mask), dynamic_shapes=({1: rows}, None, None, None, {0: rows}), strict=False)
    pte = to_edge(ep).to_executorch().buffer  # held: the runtime reads the program from these bytes
    prog = Runtime.get().load_program(pte).load_method("forward")
    out = prog.execute([q, k, v, torch.tensor([7]), mask])[0]
    torch.testing.assert_close(out, reference_attention(q, k, v, 7, mask), rtol=1e-5, atol=1e-5)
    for t in range(T):  # one row at a time: the same bits
        row = prog.execute([q[:, t : t + 1], k, v, torch.tensor([7]), mask[t : t + 1]])[0]
        assert torch.equal(row, out[:, t : t + 1])


def test_ranges_give_each_row_the_bits_of_its_causal_row():
    """`attention_ranges` (a batched call: each row over its own slot of the cache), through a
    one-op program: close to its reference, and each row bitwise the causal `attention` row of
    the same keys moved to the cache's start (a sequence decoded alone in slot 0)."""
    from executorch.exir import to_edge
    from executorch.runtime import Runtime

    from edgespec.kernels import library
    from edgespec.kernels.ops import reference_attention_ranges

    library.load()
    torch.manual_seed(2)
    slot, Hkv, H, D = 40, 3, 9, 64  # SmolLM2's heads; 3 slots of 40 cache rows
    k, v = torch.randn(1, 3 * slot, Hkv, D), torch.randn(1, 3 * slot, Hkv, D)

    class Ranges(torch.nn.Module):
        def forward(self, q, k, v, first, count):
            return torch.ops.edgespec.attention_ranges(q, k, v, first, count)

    class Causal(torch.nn.Module):
        def forward(self, q, k, v, pos):
            return torch.ops.edgespec.attention(q, k, v, pos[0].item(), None)

    held = []  # the runtime reads each program from its bytes

    def method(module, example, shapes):
        ep = torch.export.export(module, example, dynamic_shapes=shapes, strict=False)
        held.append(to_edge(ep).to_executorch().buffer)
        return Runtime.get().load_program(held[-1]).load_method("forward")

    rows = torch.export.Dim("rows", min=1, max=8)
    slots, positions = torch.tensor([2, 0, 0, 1, 2]), torch.tensor([39, 0, 1, 17, 5])
    first, count = slots * slot, positions + 1
    q = torch.randn(1, 5, H, D)
    ranges = method(Ranges(), (q, k, v, first, count), ({1: rows}, None, None, {0: rows}, {0: rows}))
    out = ranges.execute([q, k, v, first, count])[0]
    torch.testing.assert_close(out, reference_attention_ranges(q, k, v, first, count), rtol=1e-5, atol=1e-5)
    causal = method(Causal(), (q[:, :2], k, v, torch.tensor([3])), ({1: rows}, None, None, None))
    for t in range(5):  # the row alone, its slot's keys at rows [0, position]
        own_k, own_v = torch.zeros_like(k), torch.zeros_like(v)
        own_k[:, :slot], own_v[:, :slot] = k[:, first[t] : first[t] + slot], v[:, first[t] : first[t] + slot]
        alone = causal.execute([q[:, t : t + 1], own_k, own_v, positions[t : t + 1]])[0]
        assert torch.equal(alone, out[:, t : t + 1]), t


def test_an_fp16_cache_gives_the_bits_of_its_values_widened_to_fp32():
    """The kernel reading fp16 caches (quant.kv_cache: fp16) computes exactly what it computes
    over fp32 caches holding the same values: the widening is exact and the sums are the
    fp32 kernel's, for a head size of each SIMD width (the tail loads included)."""
    from executorch.exir import to_edge
    from executorch.runtime import Runtime

    import edgespec.kernels.ops  # noqa: F401
    from edgespec.kernels import library

    library.load()

    class Op(torch.nn.Module):
        def forward(self, q, k, v, pos):
            return torch.ops.edgespec.attention(q, k, v, pos[0].item(), None)

    torch.manual_seed(3)
    for D in (16, 64, 96):
        S, Hkv, H, T = 70, 2, 4, 3
        q = torch.randn(1, T, H, D)
        k16, v16 = (torch.randn(1, S, Hkv, D) * 4).half(), torch.randn(1, S, Hkv, D).half()
        outs = []
        for k, v in ((k16, v16), (k16.float(), v16.float())):
            ep = torch.export.export(Op(), (q, k, v, torch.tensor([60])), strict=False)
            pte = to_edge(ep).to_executorch().buffer
            outs.append(Runtime.get().load_program(pte).load_method("forward").execute([q, k, v, torch.tensor([60])])[0])
        assert torch.equal(outs[0], outs[1]), D


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "8da4w"])
def test_rows_in_one_call_equal_one_row_calls(tmp_path, precision):
    runner = _forward_pte(tmp_path, precision, "exact")
    g = torch.Generator().manual_seed(2)
    for trial in range(6):
        P = int(torch.randint(1, 150, (1,), generator=g))  # key chunks of 64: several, partial
        prompt = torch.randint(0, 97, (1, P), generator=g)
        runner.call_forward(prompt, torch.tensor([0]))
        for R in range(2, 9):
            rows = torch.randint(0, 97, (1, R), generator=g)
            block = runner.call_forward(rows, torch.tensor([P]))[0]
            after_block = runner.call_forward(rows[:, :1], torch.tensor([P + R]))[0]  # reads the block's cache rows
            for i in range(R):
                one = runner.call_forward(rows[:, i : i + 1], torch.tensor([P + i]))[0]
            after_one = runner.call_forward(rows[:, :1], torch.tensor([P + R]))[0]
            assert torch.equal(block, one), (precision, trial, P, R)
            assert torch.equal(after_block, after_one), (precision, trial, P, R)


_COUNT_THREADS = """
import sys, torch
from edgespec.runtime.runner import ProgramRunner, set_threads
def threads():
    return int(next(l for l in open('/proc/self/status') if l.startswith('Threads:')).split()[1])
set_threads(2)
runner = ProgramRunner(sys.argv[1])
runner.call_forward(torch.zeros((1, 1), dtype=torch.long), torch.tensor([0]))
before = threads()
for T in (50, 4, 8, 2):  # a prefill, then step-sized calls
    runner.call_forward(torch.ones((1, T), dtype=torch.long), torch.tensor([3]))
print(before, threads())
"""


@pytest.mark.slow
def test_multi_row_calls_start_no_threads_of_their_own(tmp_path):
    """With the exact kernel nothing inside an op starts threads beside the thread pools (ExecuTorch's, the kernels')
    (llama::custom_sdpa's BLAS GEMM starts OpenMP threads on its first multi-row call)."""
    import subprocess
    import sys

    runner = _forward_pte(tmp_path, "fp32", "exact")
    out = subprocess.run([sys.executable, "-c", _COUNT_THREADS, str(runner.path)], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = map(int, out.stdout.split())
    assert after == before


def test_kernel_build_errors_name_the_problem(tmp_path, monkeypatch):
    """No compiler, or a compiler that fails: a clear error, and nothing half-written in the cache."""
    from edgespec.errors import EdgespecError
    from edgespec.kernels import library

    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(library.shutil, "which", lambda name: None)
    with pytest.raises(EdgespecError, match="no C..? compiler found"):
        library.build()
    monkeypatch.setenv("CXX", "false")  # exits 1 without output
    with pytest.raises(EdgespecError, match="building edgespec's kernels failed"):
        library.build()
    assert not any(library.kernels_dir().glob("*"))


def test_unsupported_head_size_is_a_clear_export_error():
    from edgespec.errors import EdgespecError
    from edgespec.export.lowering import export_forward

    model = Transformer(LlamaArgs(dim=40, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=64, vocab_size=97, max_seq_len=32)).eval()  # head size 10
    with pytest.raises(EdgespecError, match="head sizes"):
        export_forward(model, 32, "exact")


_ROWS_AT_THREADS = """
import sys, torch
from edgespec.kernels import library
from edgespec.kernels.ops import reference_attention
from edgespec.runtime.runner import set_threads
from executorch.runtime import Runtime
library.load()
bad = []
for threads in (1, 2, 3):
    set_threads(threads)
    causal, masked = (Runtime.get().load_program(p).load_method("forward") for p in sys.argv[1:3])
    g = torch.Generator().manual_seed(threads)
    for H, Hkv, D in ((9, 3, 64), (8, 2, 32), (6, 1, 16), (4, 4, 48), (16, 1, 32)):
        S = 100
        k, v = torch.randn(1, S, Hkv, D, generator=g), torch.randn(1, S, Hkv, D, generator=g)
        for T in range(1, 17):
            q = torch.randn(1, T, H, D, generator=g)
            pos = int(torch.randint(0, S - T + 1, (1,), generator=g))
            mask = torch.zeros(T, 90).masked_fill(torch.rand(T, 90, generator=g) < 0.4, float("-inf"))
            mask[:, 0] = 0.0
            for m, mk in ((causal, None), (masked, mask)):
                args = [q, k, v, torch.tensor([pos])] + ([] if mk is None else [mk])
                out = m.execute(args)[0]
                if not torch.allclose(out, reference_attention(q, k, v, pos, mk), rtol=1e-5, atol=1e-5):
                    bad.append(("reference", threads, H, Hkv, D, T, mk is None))
                for t in range(T):
                    one = [q[:, t : t + 1], k, v, torch.tensor([pos + t])] + ([] if mk is None else [mk[t : t + 1]])
                    if not torch.equal(m.execute(one)[0], out[:, t : t + 1]):
                        bad.append(("rows", threads, H, Hkv, D, T, t, mk is None))
print(bad[:10] if bad else "ok")
"""


@pytest.mark.slow
def test_grouped_query_rows_of_any_count_give_the_one_row_bits(tmp_path):
    """A call's rows are (token row, query head) pairs blocked by key/value head: for 1..16
    rows, grouped-query (groups 3, 4, 6, 16) and plain heads, causal and masked, at 1, 2 and 3
    threads, every row of a T-row call has the bits of its one-row call."""
    import subprocess
    import sys

    from executorch.exir import to_edge

    import edgespec.kernels.ops  # noqa: F401

    class Op(torch.nn.Module):
        def forward(self, q, k, v, pos, mask=None):
            return torch.ops.edgespec.attention(q, k, v, pos[0].item(), mask)

    rows, heads, kv_heads, head_size = (torch.export.Dim(n, min=1, max=m) for n, m in (("rows", 16), ("heads", 16), ("kv_heads", 16), ("head_size", 64)))
    q = torch.randn(1, 5, 6, 32)
    k, v = torch.randn(1, 100, 2, 32), torch.randn(1, 100, 2, 32)  # distinct: export would alias one tensor passed twice
    cache = {2: kv_heads, 3: head_size}
    paths = []
    for masked in (False, True):
        args = (q, k, v, torch.tensor([7])) + ((torch.zeros(5, 90),) if masked else ())
        shapes = ({1: rows, 2: heads, 3: head_size}, cache, cache, None) + (({0: rows},) if masked else ())
        ep = torch.export.export(Op(), args, dynamic_shapes=shapes, strict=False)
        paths.append(tmp_path / f"attention-{masked}.pte")
        paths[-1].write_bytes(to_edge(ep).to_executorch().buffer)
    out = subprocess.run([sys.executable, "-c", _ROWS_AT_THREADS, *map(str, paths)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "ok", out.stdout[-2000:]
