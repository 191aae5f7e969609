"""Building, caching and loading edgespec's kernel library (kernels/library.py), and which
programs load it (runtime/runner.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edgespec.kernels import library

X86 = "processor\t: {n}\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx2{extra}\nvmx flags\t: ept\n\n"
ARM = "processor\t: {n}\nFeatures\t: fp asimd{extra}\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n"


def _dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True).stdout)


def test_cpu_key_tells_cpus_apart_on_x86_and_aarch64():
    for text in (X86, ARM):
        one = library.cpu_key(text.format(n=0, extra="") + text.format(n=1, extra=""))
        assert one == library.cpu_key(text.format(n=0, extra=""))  # one line per distinct value
        assert one != library.cpu_key(text.format(n=0, extra=" avx512f sve"))  # another CPU
    assert library.cpu_key(X86.format(n=0, extra="")) != library.cpu_key(ARM.format(n=0, extra=""))
    import platform

    # no /proc/cpuinfo fields (macOS, Windows): the machine and the processor
    assert library.cpu_key("") == f"{platform.machine()} {platform.processor()}"


def test_a_cached_library_loads_without_a_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-compilers-here"))
    path = library.library_path()  # the key needs no compiler
    path.parent.mkdir(parents=True)
    path.write_bytes(b"a cached build")
    loaded = []
    monkeypatch.setattr(library.ctypes, "CDLL", lambda name, mode=0: loaded.append(name))
    library.load.cache_clear()
    try:
        assert library.load() == path and loaded == [str(path)]
    finally:
        library.load.cache_clear()
    path.unlink()
    with pytest.raises(library.EdgespecError, match="no C..? compiler found"):  # nothing cached: building needs one
        library.build()


def test_a_build_removes_the_temporaries_of_killed_builds(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path))
    d = library.kernels_dir()
    d.mkdir(parents=True)
    stale, running = d / f".build-{_dead_pid()}-x1.so", d / f".build-{os.getpid()}-x2.so"
    stale.write_bytes(b"half")
    running.write_bytes(b"half")
    monkeypatch.setenv("CXX", "false")  # a compiler that fails: the build's own temporary goes too
    with pytest.raises(library.EdgespecError, match="building edgespec's kernels failed"):
        library.build()
    assert sorted(p.name for p in d.iterdir()) == [running.name]


def _program(tmp_path, attention: str):
    from edgespec.export.lowering import ProgramMeta, export_forward, lower_to_executorch
    from edgespec.models.llama import LlamaArgs, Transformer

    torch.manual_seed(0)
    model = Transformer(LlamaArgs(dim=64, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=128, vocab_size=97, max_seq_len=32)).eval()
    path = tmp_path / f"{attention}.pte"
    path.write_bytes(lower_to_executorch({"forward": export_forward(model, 32, attention)}, ProgramMeta(32, 97, 2, 1, (2,))).program)
    return path


def test_only_programs_that_call_edgespec_ops_load_the_library(tmp_path, monkeypatch):
    from edgespec.runtime.runner import ProgramRunner, uses_edgespec_ops

    ar, exact = _program(tmp_path, "custom_sdpa"), _program(tmp_path, "exact")  # XNNPACK + ExecuTorch's SDPA; edgespec::attention
    assert not uses_edgespec_ops(ar) and uses_edgespec_ops(exact)

    def refuse():
        raise AssertionError("an XNNPACK-only program built or loaded edgespec's kernels")

    monkeypatch.setattr(library, "load", refuse)
    monkeypatch.setattr(library, "build", refuse)
    runner = ProgramRunner(ar)
    logits = runner.call_forward(torch.tensor([[5, 7, 9]]), torch.tensor([0]))[0]
    assert logits.shape[-1] == 97 and torch.isfinite(logits).all()


def test_the_android_build_compiles_every_source_of_the_library():
    """android/kernels/CMakeLists.txt builds the same sources as the host library (a source
    left out there, such as the thread pool, is an undefined symbol only an Android build finds)."""
    from pathlib import Path

    cmake = (Path(__file__).resolve().parents[1] / "android" / "kernels" / "CMakeLists.txt").read_text()
    listed = set(re.findall(r"\$\{EDGESPEC_KERNELS\}/(\w+\.cpp)", cmake))
    assert listed == set(library.SOURCES), (listed, library.SOURCES)


def test_every_header_of_the_kernels_is_part_of_the_librarys_cache_key():
    """An edited header must rebuild the library: every .h under kernels/ is in HEADERS (and
    every source in SOURCES), so the cache key covers it."""
    root = Path(library.__file__).parent
    assert set(library.HEADERS) == {str(p.relative_to(root)) for p in root.rglob("*.h")}
    assert set(library.SOURCES) == {p.name for p in root.glob("*.cpp")}
