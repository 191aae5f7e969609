"""Build edgespec's kernel library with the system C++ compiler against the installed
ExecuTorch wheel (its headers and `libexecutorch.so`, which holds the operator registry the
Python runtime uses) and load it, which registers the kernels.

The library is cached under ``$EDGESPEC_CACHE`` (default ``~/.cache/edgespec``), keyed by
the sources, the flags, the ExecuTorch version and this CPU (it is built with
``-march=native``), not by the compiler: a machine without one loads a cached build. A build
is written to a temporary name holding the builder's pid first and fsynced before and after its
rename, so neither an interrupted build nor a power loss leaves a partial file under the
library's name, and the next build removes the temporaries of builders that no longer run. A
cached library that does not load all the same (empty, truncated) is built again, once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import struct
import subprocess
import warnings
from functools import cache
from pathlib import Path

from edgespec.errors import EdgespecError, EdgespecNote
from edgespec.host import cache_dir, process_alive
from edgespec.output_dir import renamed_into_place
from edgespec.packages import package_dir

SOURCES = (  # compiled into one library
    "attention.cpp",
    "block_argmax.cpp",
    "block_embedding.cpp",
    "block_linear.cpp",
    "glue.cpp",
    "kernel_bench.cpp",
    "kernel_plan.cpp",
    "threadpool.cpp",
)
HEADERS = (  # included by them (part of the cache key)
    "block_linear.h",
    "block_ops.h",
    "op_api.h",
    *(f"block_linear/{h}.h" for h in ("contract", "portable", "x86_avx2", "x86_avx512", "x86_amx", "neon", "dispatch", "screen")),
    "glue.h",
    "threadpool.h",
    "vec8.h",
)


def codegen(machine: str | None = None) -> tuple[str, ...]:
    """The code-generation flags for a CPU architecture (`machine`: platform.machine(), by
    default this one's). x86 compiles for this CPU (`-march=native`); aarch64 for the Armv8.0
    baseline, the dot-product and i8mm paths being chosen at run time from the CPU's hwcaps
    (kernels/block_linear/neon.h), so a build runs on any Arm core, natively built or cross-built,
    and is the code the self-test checks."""
    arm = (machine or platform.machine()).lower() in ("aarch64", "arm64")
    return (
        "-O3",
        "-march=armv8-a" if arm else "-march=native",
        "-ffp-contract=off",  # every expression rounds as written (attention.cpp's invariance)
        "-std=c++17",
    )


def flags(machine: str | None = None) -> tuple[str, ...]:
    """Every flag of the library's build but the paths (`codegen` plus linking and ExecuTorch's
    configuration)."""
    return (
        *codegen(machine),
        "-shared",
        "-fPIC",
        "-pthread",
        "-DC10_USING_CUSTOM_GENERATED_MACROS",
        "-DET_EVENT_TRACER_ENABLED",
        "-DET_USE_THREADPOOL",
    )


_HERE = Path(__file__).parent
_TEMP = ".build-"  # temporaries: .build-PID-*.so


def _executorch_root() -> Path:
    root = package_dir("executorch")
    if root is None:
        raise EdgespecError("executorch is not installed; edgespec's kernels build against its wheel")
    return root


# /proc/cpuinfo fields that decide what -march=native compiles for: x86's flags, aarch64's
# features and core identity
_CPU_FIELDS = ("flags", "Features", "CPU implementer", "CPU architecture", "CPU variant", "CPU part")


def cpu_key(cpuinfo: str | None = None) -> str:
    """This CPU as the cache key needs it: the machine and each distinct `_CPU_FIELDS` line of
    /proc/cpuinfo (`cpuinfo`: its text), else (no such lines: macOS, Windows)
    platform.machine() and platform.processor()."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    lines = sorted({" ".join(line.split()) for line in cpuinfo.splitlines() if line.partition(":")[0].strip() in _CPU_FIELDS})
    return "\n".join([platform.machine(), *lines]) if lines else f"{platform.machine()} {platform.processor()}"


def kernels_dir() -> Path:
    return cache_dir("kernels")


def library_path() -> Path:
    """Where the library for these sources, ExecuTorch build and CPU lives (built or not);
    computed without a compiler."""
    from importlib.metadata import version

    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update((_HERE / name).read_bytes())
    h.update(version("executorch").encode())
    h.update(" ".join(flags()).encode())
    h.update(cpu_key().encode())
    return kernels_dir() / f"libedgespec_kernels-{h.hexdigest()[:16]}.so"


def compiler() -> str:
    """The C++ compiler a build uses: $CXX, else g++, c++ or clang++ on PATH."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        raise EdgespecError("no C++ compiler found (g++, c++ or clang++); install one (apt-get install g++) or set CXX")
    return cxx


def compile_command(out: Path) -> list[str]:
    root = _executorch_root()
    lib = root / "lib"
    return [
        compiler(),
        *flags(),
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


def build(again: bool = False) -> Path:
    """The library, compiled now if these sources/ExecuTorch/CPU have none cached (or `again`:
    the cached one does not load)."""
    path = library_path()
    if path.is_file() and not again:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    compiler()  # no compiler: say so before writing anything
    with renamed_into_place(path, f"{_TEMP}{os.getpid()}-", ".so") as tmp:
        done = subprocess.run(compile_command(tmp), capture_output=True, text=True)
        if done.returncode != 0:
            raise EdgespecError(f"building edgespec's kernels failed:\n{done.stderr.strip()[-3000:]}")
    return path


def remove_stale_temporaries(directory: Path) -> None:
    """Remove the build temporaries (`.build-PID-*.so`) of builders that no longer run: what a
    killed build leaves."""
    for p in directory.glob(f"{_TEMP}*.so"):
        pid = p.name[len(_TEMP) :].split("-", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            p.unlink(missing_ok=True)


@cache
def load() -> Path:
    """Build if needed and load the library into this process: ExecuTorch's runtime can then
    run programs that call edgespec's kernels. Idempotent. A cached library that does not load
    is built again (one note), once."""
    path = build()
    error = _load(path)
    if error is not None:
        warnings.warn(f"the cached kernel library '{path}' does not load ({error}); building it again", EdgespecNote, stacklevel=2)
        error = _load(build(again=True))
        if error is not None:
            raise EdgespecError(
                f"edgespec's kernel library '{path}' was built again and still does not load: {error}; "
                f"check that the compiler ({compiler()}) builds for this machine and that '{path.parent}' allows executables (else set EDGESPEC_CACHE to a directory that does)"
            )
    return path


def _load(path: Path) -> str | None:
    """Load the library at `path` into this process: None, or why it does not load."""
    try:
        if _truncated(path):  # loading it could kill the process (SIGBUS) rather than fail
            return "the file is truncated"
        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        return str(e)
    return None


def _truncated(path: Path) -> bool:
    """Whether `path` is an ELF file cut short: it ends inside its header or before the end of
    its section header table (what a linker writes last). Anything else the loader judges."""
    with open(path, "rb") as f:
        head = f.read(64)
    if head[:4] != b"\x7fELF":
        return False
    if len(head) < 64:
        return True
    order = "<" if head[5] == 1 else ">"
    word, shoff_at, shentsize_at = ("Q", 0x28, 0x3A) if head[4] == 2 else ("I", 0x20, 0x2E)  # ELF64, ELF32
    (shoff,) = struct.unpack_from(order + word, head, shoff_at)
    shentsize, shnum = struct.unpack_from(order + "HH", head, shentsize_at)
    return os.path.getsize(path) < shoff + shentsize * shnum
