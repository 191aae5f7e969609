"""Build edgespec's kernel library with the system C++ compiler against the installed
ExecuTorch wheel (its headers and `libexecutorch.so`, which holds the operator registry the
Python runtime uses) and load it, which registers the kernels.

The library is cached under ``$EDGESPEC_CACHE`` (default ``~/.cache/edgespec``), keyed by
the source, the flags, the ExecuTorch version and this CPU (it is built with
``-march=native``), and written to a temporary name first, so an interrupted build leaves
nothing half-written.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from edgespec.errors import EdgespecError

SOURCES = ("attention.cpp", "block_linear.cpp", "glue.cpp")  # compiled into one library
HEADERS = ("block_linear.h", "vec8.h")  # included by them (part of the cache key)
_HERE = Path(__file__).parent


def _executorch_root() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise EdgespecError("executorch is not installed; edgespec's kernels build against its wheel")
    return Path(next(iter(spec.submodule_search_locations)))


def _cpu_key() -> str:
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return platform.machine() + flags


def kernels_dir() -> Path:
    return Path(os.environ.get("EDGESPEC_CACHE", Path.home() / ".cache" / "edgespec")) / "kernels"


def library_path() -> Path:
    """Where the library for this source, ExecuTorch build and CPU lives (built or not)."""
    from importlib.metadata import version

    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update((_HERE / name).read_bytes())
    h.update(version("executorch").encode())
    h.update(" ".join(compile_command(Path("out"))).encode())
    h.update(_cpu_key().encode())
    return kernels_dir() / f"libedgespec_kernels-{h.hexdigest()[:16]}.so"


def compile_command(out: Path) -> list[str]:
    root = _executorch_root()
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        raise EdgespecError("no C++ compiler found (g++, c++ or clang++); install one (apt-get install g++) or set CXX")
    lib = root / "lib"
    return [
        cxx,
        "-O3",
        "-march=native",
        "-ffp-contract=off",  # every expression rounds as written (attention.cpp's invariance)
        "-std=c++17",
        "-shared",
        "-fPIC",
        "-DC10_USING_CUSTOM_GENERATED_MACROS",
        "-DET_EVENT_TRACER_ENABLED",
        "-DET_USE_THREADPOOL",
        f"-I{root / 'include'}",
        f"-I{root / 'include/executorch/runtime/core/portable_type/c10'}",
        *[str(_HERE / s) for s in SOURCES],
        f"-L{lib}",
        "-lexecutorch",
        "-lexecutorch_threadpool",
        f"-Wl,-rpath,{lib}",
        "-o",
        str(out),
    ]


def build() -> Path:
    """The library, compiled now if this source/ExecuTorch/CPU has none cached."""
    path = library_path()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        done = subprocess.run(compile_command(Path(tmp)), capture_output=True, text=True)
        if done.returncode != 0:
            raise EdgespecError(f"building edgespec's kernels failed:\n{done.stderr.strip()[-3000:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


@cache
def load() -> Path:
    """Build if needed and load the library into this process: ExecuTorch's runtime can then
    run programs that call edgespec's kernels. Idempotent."""
    path = build()
    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    return path
