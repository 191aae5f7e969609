"""edgespec's kernels check what a program gives them (issue 59): an op called with a tensor of
another dtype or shape than its contract, or with sizes whose arithmetic overflows, fails the
call (a RuntimeError from `execute`, the kernel's check named on stderr) instead of writing
past a tensor or crashing; no NaN lane is converted to an integer (undefined in C++); the
kernel self-test is clean under AddressSanitizer and UndefinedBehaviorSanitizer; and a child
forked after a parallel section runs the kernels (kernels/threadpool.cpp's fork handler).

The programs are real `.pte` files, exported from a one-op module and, where export cannot
make the mismatch (an output dtype, an int argument past any real size), edited in their
flatbuffer as a corrupted or mismatched program would be. Each runs in a child process: a call
a kernel fails to refuse may crash or hang it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edgespec.kernels import library

KERNELS = Path(__file__).resolve().parent.parent / "sdk" / "edgespec" / "kernels"
SELFTEST = Path(__file__).parent / "kernels" / "block_linear_selftest.cpp"


def _pte(module: torch.nn.Module, args: tuple) -> bytes:
    from executorch.exir import to_edge

    import edgespec.kernels.ops  # noqa: F401  (the ops' schemas)

    return to_edge(torch.export.export(module, args, strict=False)).to_executorch().buffer


def _edited(pte: bytes, op: str, arg: int, **fields) -> bytes:
    """`pte` with the value its first call of edgespec::`op` passes as argument `arg` (its
    position in the out variant's call; -1 is out) edited: `fields` set on the value (a
    tensor's scalar_type or sizes, an int's int_val)."""
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary

    pte_file = deserialize_pte_binary(pte)
    plan = pte_file.program.execution_plan[0]
    index = next(i for i, o in enumerate(plan.operators) if o.name == f"edgespec::{op}")
    call = next(ins.instr_args for chain in plan.chains for ins in chain.instructions if getattr(ins.instr_args, "op_index", None) == index)
    value = plan.values[call.args[arg - 1 if arg < 0 else arg]].val  # the call's arguments end with out, then out again (returned)
    for name, v in fields.items():
        assert hasattr(value, name), (value, name)
        setattr(value, name, v)
    return bytes(serialize_pte_binary(pte_file))


_EXECUTE = """
import sys, torch
from edgespec.kernels import library
from executorch.runtime import Runtime
library.load()
for pte, inputs in zip(sys.argv[1::2], sys.argv[2::2]):
    program = Runtime.get().load_program(pte)
    method = program.load_method("forward")
    try:
        method.execute(torch.load(inputs))
    except RuntimeError:
        print("refused", flush=True)
    else:
        print("ran", flush=True)
"""


def _refused(tmp_path: Path, cases: list[tuple[bytes, tuple]], says: str) -> None:
    """Each program, run with its inputs in a child process, fails its call: a RuntimeError,
    not a result, a crash or a hang; the kernel's log says `says` (once per case at least)."""
    argv = []
    for i, (pte, inputs) in enumerate(cases):
        (tmp_path / f"{i}.pte").write_bytes(pte)
        torch.save(list(inputs), tmp_path / f"{i}.inputs")
        argv += [str(tmp_path / f"{i}.pte"), str(tmp_path / f"{i}.inputs")]
    try:
        done = subprocess.run([sys.executable, "-c", _EXECUTE, *argv], capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the call hung: {e.stdout!r}")
    ran = done.stdout.split()
    assert done.returncode == 0 and ran == ["refused"] * len(cases), (done.returncode, ran, done.stderr[-3000:])
    assert done.stderr.count(says) >= len(cases), done.stderr[-3000:]


class BlockLinear(torch.nn.Module):
    def __init__(self, fmt: int, n: int):
        super().__init__()
        self.fmt, self.n = fmt, n

    def forward(self, x, w):
        return torch.ops.edgespec.block_linear(x, w, self.fmt, self.n)


class BlockArgmax(BlockLinear):
    def forward(self, x, w):
        return torch.ops.edgespec.block_argmax(x, w, self.fmt, self.n)


class RmsNorm(torch.nn.Module):
    def forward(self, x, w):
        return torch.ops.edgespec.rms_norm(x, w, 1e-5)


class Rope(torch.nn.Module):
    def forward(self, x, cos, sin):
        return torch.ops.edgespec.rope(x, cos, sin)


class SiluMul(torch.nn.Module):
    def forward(self, a, b):
        return torch.ops.edgespec.silu_mul(a, b)


class ArgmaxRows(torch.nn.Module):
    def forward(self, x):
        return torch.ops.edgespec.argmax_rows(x)


class Attention(torch.nn.Module):
    def __init__(self, start_pos: int = 3):
        super().__init__()
        self.start_pos = start_pos

    def forward(self, q, k, v):
        return torch.ops.edgespec.attention(q, k, v, self.start_pos, None)


S8H, U4H = 3, 1  # block_linear.h's Format ids


def _one_op(op: str) -> tuple[torch.nn.Module, tuple]:
    """A one-op module of edgespec::`op` and inputs it takes."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 64, generator=g)
    if op in ("block_linear", "block_argmax"):  # S8H: 272 bytes per tile of 8 rows and 32 inputs; 16 rows
        w = torch.randint(0, 256, (2 * 2 * 272,), dtype=torch.uint8, generator=g)
        w.view(2 * 2, 272)[:, 256:] = torch.tensor([0, 0x20] * 8, dtype=torch.uint8)  # the fp16 scales: 2^-7
        return (BlockLinear if op == "block_linear" else BlockArgmax)(S8H, 16), (x, w)
    if op == "rms_norm":
        return RmsNorm(), (x, torch.randn(64, generator=g))
    if op == "rope":
        return Rope(), (torch.randn(1, 3, 2, 16, generator=g), torch.randn(3, 16, generator=g), torch.randn(3, 16, generator=g))
    if op == "silu_mul":
        return SiluMul(), (x, torch.randn(1, 2, 64, generator=g))
    if op == "argmax_rows":
        return ArgmaxRows(), (x[0],)
    assert op == "attention"
    return Attention(), (torch.randn(1, 2, 4, 16, generator=g), torch.randn(1, 8, 2, 16, generator=g), torch.randn(1, 8, 2, 16, generator=g))


@pytest.mark.slow
@pytest.mark.parametrize("op", ["block_linear", "block_argmax", "rms_norm", "rope", "silu_mul", "argmax_rows", "attention"])
def test_an_op_refuses_an_output_of_another_dtype(tmp_path, op):
    """A program whose output tensor is not the op's dtype (fp32; int64 for the argmaxes),
    narrower (uint8, fp16) or as wide (int32 for fp32; fp64 for int64): the op fails the call
    rather than write floats past the tensor's end or as another type's bits. And one whose
    output has other sizes than the op's is refused too (the op resizes its output: a static
    tensor of other sizes cannot be)."""
    from executorch.exir.scalar_type import ScalarType

    module, args = _one_op(op)
    pte = _pte(module, args)
    index = op in ("block_argmax", "argmax_rows")
    others = (ScalarType.BYTE, ScalarType.INT, ScalarType.DOUBLE) if index else (ScalarType.BYTE, ScalarType.HALF, ScalarType.INT)
    cases = [(_edited(pte, op, -1, scalar_type=t), args) for t in others]
    _refused(tmp_path, cases, f"edgespec::{op}: " if index else f"edgespec::{op}: out must be fp32")
    sizes = list(module(*args).shape)
    sizes[-1 if sizes else 0] -= 1
    _refused(tmp_path, [(_edited(pte, op, -1, sizes=sizes), args)], f"KernelCall failed at instruction 0:0 in operator edgespec::{op}.out")


@pytest.mark.slow
def test_rope_refuses_cos_and_sin_that_are_not_fp32(tmp_path):
    """cos and sin of another dtype (fp16: half the bytes, read as floats past their end;
    fp64: other bits) fail the call."""
    module, (x, cos, sin) = _one_op("rope")
    cases = [(_pte(module, args), args) for args in ((x, cos.half(), sin), (x, cos, sin.half()), (x, cos.double(), sin.double()))]
    _refused(tmp_path, cases, "edgespec::rope: cos and sin must be fp32")


@pytest.mark.slow
def test_attention_refuses_a_v_cache_of_another_shape(tmp_path):
    """A V cache whose head size, head count or batch differs from the K cache's (the values are
    read with K's strides: past V's end) fails the call."""
    module, (q, k, v) = _one_op("attention")
    cases = [(_pte(module, args), args) for args in ((q, k, v[..., :8].contiguous()), (q, k, v[:, :, :1].contiguous()), (q, k, torch.cat([v, v])))]
    _refused(tmp_path, cases, "edgespec::attention: the caches must both be [1, S, Hkv, D]")


@pytest.mark.slow
def test_attention_refuses_a_start_position_whose_sum_overflows(tmp_path):
    """start_pos near 2^63 (start_pos + T wraps to a negative key count that passed the cache
    check; then a vector of that many keys) fails the call, as does a negative one."""
    module, args = _one_op("attention")
    pte = _pte(module, args)
    assert module.start_pos == 3
    cases = [(_edited(pte, "attention", 3, int_val=v), args) for v in (2**63 - 1, 2**63 - 2, -1)]
    _refused(tmp_path, cases, "edgespec::attention: rows past the cache")


@pytest.mark.slow
@pytest.mark.parametrize("op", ["block_linear", "block_argmax"])
def test_out_features_whose_weight_size_overflows_are_refused(tmp_path, op):
    """out_features = 2^56 + 16 with K = 2048 in U4H: 2^53 + 2 tile rows of 64 blocks of 160
    bytes, a product that wraps to 20480 bytes, a real 16-row weight's size, which passed the
    weight check (and the output's last size, truncated to 32 bits, was 16); the tiles were
    then read far past the weight. And out_features past 2^31 - 1 or below 0."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 1, 2048, generator=g), torch.zeros(2 * 64 * 160, dtype=torch.uint8)
    module = (BlockLinear if op == "block_linear" else BlockArgmax)(U4H, 16)
    pte = _pte(module, (x, w))
    cases = [(_edited(pte, op, 3, int_val=n), (x, w)) for n in (2**56 + 16, 2**32 + 16, 2**31)]
    _refused(tmp_path, cases, f"edgespec::{op}: out_features")
    empty = _edited(_edited(pte, op, 1, sizes=[0]), op, 3, int_val=-1)  # -1 row: 0 tiles, an empty weight
    _refused(tmp_path, [(empty, (x, torch.zeros(0, dtype=torch.uint8)))], f"edgespec::{op}: out_features")


@pytest.mark.slow
def test_rms_norm_refuses_rows_of_no_elements(tmp_path):
    """x [..., 0] (D = 0: the row count x.numel() / D divided by zero) fails the call."""
    x, w = torch.zeros(1, 2, 0), torch.zeros(0)
    _refused(tmp_path, [(_pte(RmsNorm(), (x, w)), (x, w))], "edgespec::rms_norm: x's rows must hold D >= 1 elements")


# Converting a NaN (or a value out of range) to an integer is undefined behaviour in C++, but
# GCC's -fsanitize=float-cast-overflow instruments scalar conversions only: this header, included
# first, makes every vector conversion of the kernels' headers (__builtin_convertvector) check
# its float lanes and abort on one the integer type cannot hold.
_CHECKED_CONVERSIONS = r"""
#pragma once
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <utility>

template <typename To, typename From>
inline To edgespec_checked_convertvector(From v, const char* file, int line) {
  using F = std::remove_cv_t<std::remove_reference_t<decltype(v[0])>>;
  using T = std::remove_cv_t<std::remove_reference_t<decltype(std::declval<To&>()[0])>>;
  if constexpr (std::is_floating_point_v<F> && std::is_integral_v<T>) {
    for (unsigned i = 0; i < sizeof(From) / sizeof(F); ++i)
      if (!(v[i] >= static_cast<F>(std::numeric_limits<T>::min()) && v[i] < -static_cast<F>(std::numeric_limits<T>::min()))) {
        std::fprintf(stderr, "%s:%d: runtime error: lane %u (%g) converted to an integer it does not fit\n", file, line, i, static_cast<double>(v[i]));
        std::abort();
      }
  }
  return __builtin_convertvector(v, To);
}
#define __builtin_convertvector(v, To) edgespec_checked_convertvector<To>(v, __FILE__, __LINE__)
"""

# NaN and infinite inputs through the kernels' headers: the activation quantizer (a block holding
# a NaN, an infinity, both signs) and vec8.h's exp (silu_mul's gate on NaN and infinite lanes,
# the tail included), each checked against what the contract says it gives.
_NON_FINITE = r"""
#include <cmath>
#include <cstdio>
#include <limits>
#include "block_linear.h"
#include "glue.h"

int main() {
  namespace B = edgespec::blocks;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  float x[4 * 32];
  for (int i = 0; i < 4 * 32; ++i) x[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  x[3] = nan, x[32 + 17] = inf, x[64 + 31] = -inf, x[96] = -nan;
  int8_t q[4 * 32];
  float d[4], s[4];
  B::quantize_rows(x, 4, 32, q, d, s);
  int bad = 0;
  for (int b = 0; b < 4; ++b) {
    bad += !std::isnan(d[b]) || !std::isnan(s[b]);
    for (int j = 0; j < 32; ++j) bad += q[32 * b + j] != 0;
  }
  float a[19], g[19], o[19];
  for (int i = 0; i < 19; ++i) a[i] = i % 3 == 0 ? nan : (i % 3 == 1 ? inf : 1.5f), g[i] = 2.f;
  edgespec::glue::silu_mul_span(a, g, 19, o);  // silu(1.5) * 2 = 2.45...
  for (int i = 0; i < 19; ++i) bad += i % 3 == 0 ? !std::isnan(o[i]) : (i % 3 == 1 ? o[i] != inf : !(o[i] > 2.f && o[i] < 3.f));
  std::printf("%s\n", bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}
"""


def _build_and_run(tmp_path: Path, source: Path, extra: list[str]) -> subprocess.CompletedProcess:
    header = tmp_path / "checked_conversions.h"
    header.write_text(_CHECKED_CONVERSIONS)
    exe = tmp_path / f"{source.stem}.bin"
    cmd = [shutil.which("g++") or "c++", *extra, "-include", str(header), f"-I{KERNELS}", str(source), "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)


def test_no_nan_lane_is_converted_to_an_integer(tmp_path):
    """The quantizer and vec8.h's exp select a NaN lane away before converting to integers
    (the results the contract gives, NaN scales and zero codes, NaN outputs), every conversion
    checked (`_CHECKED_CONVERSIONS`), at the library's flags."""
    source = tmp_path / "non_finite.cpp"
    source.write_text(_NON_FINITE)
    done = _build_and_run(tmp_path, source, [*library.codegen(), "-fsanitize=undefined,float-cast-overflow", "-fno-sanitize-recover=all"])
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr[-3000:]


def test_the_kernel_self_test_is_clean_under_sanitizers(tmp_path):
    """tests/kernels/block_linear_selftest.cpp (every path on every format, NaN, infinite and
    tiny blocks, the head screen) built with AddressSanitizer and UndefinedBehaviorSanitizer
    (float-cast-overflow too: GCC's -fsanitize=undefined leaves it out; vector conversions
    checked by `_CHECKED_CONVERSIONS`), any finding fatal: it passes with none. At -O1: -O3
    with the sanitizers takes ~10 minutes to compile here, -O1 ~30 s."""
    codegen = [f for f in library.codegen() if not f.startswith("-O")]
    sanitize = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined,float-cast-overflow", "-fno-sanitize-recover=all"]
    done = _build_and_run(tmp_path, SELFTEST, [*codegen, *sanitize])
    assert done.returncode == 0 and done.stdout.startswith("ok "), done.stdout + done.stderr[-3000:]
    assert "runtime error" not in done.stderr and "Sanitizer" not in done.stderr, done.stderr[-3000:]


_FORK = """
import os, sys, time, torch
from edgespec.kernels import library
from edgespec.runtime.runner import set_threads
from executorch.runtime import Runtime
library.load()
set_threads(2)
method = Runtime.get().load_program(sys.argv[1]).load_method("forward")
inputs = torch.load(sys.argv[2])
want = method.execute(inputs)[0]  # a parallel section: the kernels' pool starts its worker
pid = os.fork()
if pid == 0:  # the child: only the forking thread exists; the pool's worker does not
    os._exit(0 if torch.equal(method.execute(inputs)[0], want) and torch.equal(method.execute(inputs)[0], want) else 1)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child exit", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.1)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("child hung")
print("parent", int(torch.equal(method.execute(inputs)[0], want)))
"""


@pytest.mark.slow
def test_a_child_forked_after_a_parallel_section_runs_the_kernels(tmp_path):
    """A process that ran a parallel section at two threads (attention's rows split between the
    caller and the pool's worker) forks: the child's calls finish with the parent's bits (the
    pool was reset at the fork and starts a worker of its own) where they spun forever waiting
    for a worker the child does not have; the parent's pool still works."""
    module, args = _one_op("attention")
    (tmp_path / "a.pte").write_bytes(_pte(module, args))
    torch.save(list(args), tmp_path / "a.inputs")
    done = subprocess.run([sys.executable, "-c", _FORK, str(tmp_path / "a.pte"), str(tmp_path / "a.inputs")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-2:] == ["child exit 0", "parent 1"], done.stdout + done.stderr[-3000:]
