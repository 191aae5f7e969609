"""An aarch64 Python environment on this x86 host, run under qemu-user: the same wheels an
Arm Linux machine installs (torch, executorch, edgespec's runtime dependencies), Debian's
arm64 Python, and edgespec from this tree, so a bundle decodes here through ExecuTorch's Arm
runtime and edgespec's kernel library cross-built for aarch64 (`CXX=aarch64-linux-gnu-g++`).

Built once per recipe of this file (key: its source) under ``$EDGESPEC_CACHE/aarch64``:

    root/   Debian bookworm's python3.11 and the libraries it needs, arm64 (`apt-get download`
            with apt's state kept in this folder: the host's apt setup is not touched;
            `dpkg -x`), the ELF interpreter prefix qemu runs under (`-L root`)
    site/   the wheels, `pip install --target --platform manylinux_*_aarch64`
    stubs/  CUDA's libraries, which torch's only aarch64 wheel links against and which the
            index does not carry for aarch64 (cuDNN for one): libraries of the same names and
            symbol versions whose functions return a zeroed buffer (`cudaGetDeviceCount`: no
            device), so torch loads with CUDA absent. Nothing on the CPU path calls them.

qemu-user shows the guest the host's x86 /proc/cpuinfo, on which PyTorch's cpuinfo crashes;
the root holds an Arm one (two generic Armv8 cores). The kernels choose their SIMD paths from
the auxiliary vector's hwcaps, which qemu sets for the `-cpu` it emulates.

    python tests/aarch64_env.py [--cpu max] -- -m edgespec.cli info --bundle bundles/default

runs a command under it (building it first).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEBIAN_PYTHON = "python3.11"
# python3.11's run-time closure on bookworm (apt-cache depends --recurse, less what a program
# never loads: perl, dpkg, tar, mime tables), plus C++ and OpenMP runtimes for the wheels
DEBS = (
    "python3.11 python3.11-minimal libpython3.11-minimal libpython3.11-stdlib media-types libc6 libgcc-s1 gcc-12-base "
    "libstdc++6 libgomp1 libbz2-1.0 libcrypt1 libexpat1 libffi8 liblzma5 libncursesw6 libtinfo6 libreadline8 libsqlite3-0 "
    "libssl3 libuuid1 zlib1g libdb5.3 libgdbm6 libgdbm-compat4 libnsl2 libtirpc3 libtirpc-common libgssapi-krb5-2 "
    "libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0 libcom-err2"
).split()
PLATFORMS = ("manylinux_2_28_aarch64", "manylinux_2_27_aarch64", "manylinux_2_24_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64")
CORE = ("torch==2.13.0", "executorch==1.5.1", "torchao==0.18.0")  # pyproject's pins
# what torch's and executorch's wheels require on Linux aarch64, less CUDA (stubbed) and
# Triton (GPU only), and what `edgespec generate` imports
DEPENDENCIES = (
    "filelock typing-extensions setuptools sympy networkx jinja2 fsspec "  # torch
    "expecttest flatbuffers hypothesis kgb mpmath==1.3.0 numpy>=2 packaging pandas parameterized py-cpuinfo requests "
    "pytorch-tokenizers pyyaml ruamel.yaml tabulate "  # executorch (not hydra-core: its antlr4 runtime ships no wheel, and no runtime module imports it)
    "click tqdm tokenizers>=0.20 safetensors gguf"  # edgespec's runtime
).split()
CPUINFO = "".join(
    f"processor\t: {i}\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
    "CPU variant\t: 0x0\nCPU part\t: 0xd03\nCPU revision\t: 4\n\n"
    for i in range(2)
)


@dataclass(frozen=True)
class Aarch64Env:
    """A built environment: `root` (qemu's -L prefix, Debian's arm64 Python), `site` (the
    wheels) and `stubs` (CUDA's library names)."""

    home: Path

    @property
    def root(self) -> Path:
        return self.home / "root"

    @property
    def site(self) -> Path:
        return self.home / "site"

    @property
    def stubs(self) -> Path:
        return self.home / "stubs"

    def command(self, args: list[str], cpu: str = "max", env: dict[str, str] | None = None) -> list[str]:
        """The host command that runs `python3.11 ARGS` on an emulated `cpu` (qemu -cpu):
        edgespec from this tree, its kernels cross-built by aarch64-linux-gnu-g++, and `env`
        added to the guest's environment."""
        guest = {
            "LD_LIBRARY_PATH": str(self.stubs),
            "PYTHONPATH": f"{REPO / 'sdk'}:{self.site}",
            "PYTHONNOUSERSITE": "1",
            "CXX": shutil.which("aarch64-linux-gnu-g++") or "aarch64-linux-gnu-g++",
            **(env or {}),
        }
        sets = [a for k, v in guest.items() for a in ("-E", f"{k}={v}")]
        return ["qemu-aarch64", "-cpu", cpu, "-L", str(self.root), *sets, str(self.root / "usr/bin" / DEBIAN_PYTHON), *args]


def cache_home() -> Path:
    base = Path(os.environ.get("EDGESPEC_CACHE", Path.home() / ".cache" / "edgespec")) / "aarch64"
    return base / hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def prepare(home: Path | None = None) -> Aarch64Env:
    """The environment, built now unless a complete one is cached (a half-built one is
    built again: the marker is written last)."""
    env = Aarch64Env(home or cache_home())
    if (env.home / "complete").is_file():
        return env
    missing = [t for t in ("qemu-aarch64", "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "apt-get", "dpkg") if shutil.which(t) is None]
    if missing:
        raise RuntimeError(f"missing {', '.join(missing)}: apt-get install qemu-user g++-aarch64-linux-gnu (README's test command does)")
    shutil.rmtree(env.home, ignore_errors=True)
    env.home.mkdir(parents=True)
    _debian_root(env.home, env.root)
    _wheels(env.home, env.site)
    _cuda_stubs(env)
    (env.home / "complete").write_text("ok\n")
    return env


def _run(cmd: list[str], **kw) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed:\n{(done.stdout + done.stderr)[-3000:]}")


def _debian_root(home: Path, root: Path) -> None:
    state = home / "apt"
    for d in ("lists/partial", "cache/archives/partial"):
        (state / d).mkdir(parents=True, exist_ok=True)
    apt = [
        "-o", "APT::Architectures::=arm64", "-o", "APT::Architecture=arm64",
        "-o", f"Dir::State::Lists={state / 'lists'}", "-o", f"Dir::Cache={state / 'cache'}",
        "-o", "Dir::State::status=/dev/null", "-o", "Acquire::Languages=none", "-o", "APT::Sandbox::User=root",
    ]  # fmt: skip
    _run(["apt-get", "-qq", *apt, "update"])
    debs = home / "debs"
    debs.mkdir()
    _run(["apt-get", "-qq", *apt, "download", *DEBS], cwd=debs)
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg", "-x", str(deb), str(root)])
    shutil.rmtree(debs)
    (root / "proc").mkdir()
    (root / "proc/cpuinfo").write_text(CPUINFO)


def _wheels(home: Path, site: Path) -> None:
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    common = ["--target", str(site), *platforms, "--python-version", "3.11", "--implementation", "cp", "--only-binary=:all:"]
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run([*pip, *common, "--no-deps", *CORE])  # their CUDA requirements are not installable here
    _run([*pip, *common, *DEPENDENCIES])


def _elf(what: str, path: Path) -> str:
    return subprocess.run(["readelf", "-W", what, str(path)], capture_output=True, text=True, check=True).stdout


def _cuda_stubs(env: Aarch64Env) -> None:
    """A library for each soname that torch's and executorch's extensions need and neither the
    root nor the wheels hold, defining what they import from it, with its symbol versions."""
    dirs = [env.site / "torch/lib", env.site / "executorch/lib", env.root / "lib/aarch64-linux-gnu", env.root / "usr/lib/aarch64-linux-gnu"]
    find = {so.name: so for d in dirs for so in d.glob("*.so*")}
    todo = [*env.site.glob("torch/_C.*.so"), env.site / "torch/lib/libtorch_global_deps.so", *env.site.glob("executorch/extension/pybindings/_C.*.so")]
    loaded, missing = {}, set()
    while todo:  # the NEEDED closure
        p = todo.pop()
        if p in loaded:
            continue
        loaded[p] = _elf("-d", p)
        for so in re.findall(r"\(NEEDED\).*\[(.+?)\]", loaded[p]):
            (todo.append(find[so]) if so in find else missing.add(so))
    defined, wanted, version_file = set(), {}, {}
    for p in [*loaded, env.root / "usr/bin" / DEBIAN_PYTHON]:
        for line in _elf("--dyn-syms", p).splitlines():
            f = line.split()
            if len(f) < 8 or not f[0].endswith(":"):
                continue
            name, _, version = f[7].partition("@")
            if f[6] != "UND":
                defined.add(name)
            elif f[4] != "WEAK" and name:
                wanted[name] = version.lstrip("@").split()[0] if version else ""
        needs = _elf("-V", p).partition("Version needs")[2]
        file = None
        for line in needs.splitlines():
            if m := re.search(r"File: (\S+)", line):
                file = m.group(1)
            elif m := re.search(r"Name: (\S+)", line):
                version_file[m.group(1)] = file
    by_file: dict[str, dict[str, str]] = {so: {} for so in missing}
    unversioned = sorted(s for s, v in wanted.items() if not v and s not in defined)
    for sym, version in wanted.items():
        if version and sym not in defined and version_file.get(version) in missing:
            by_file[version_file[version]][sym] = version
    env.stubs.mkdir()
    for so, syms in sorted(by_file.items()):
        # a versioned library gets its own symbols; the unversioned ones (NCCL, cuFile,
        # cuSPARSELt, cuRAND: libraries without symbol versions) go to each unversioned one
        names = sorted(syms) if syms else unversioned
        body = ["static char zeros[4096] __attribute__((aligned(64)));"]
        body += [f"void* {s}(void) {{ return zeros; }}" for s in names if s != "cudaGetDeviceCount"]
        if "cudaGetDeviceCount" in names:
            body.append("int cudaGetDeviceCount(int* n) { *n = 0; return 100; }  /* cudaErrorNoDevice */")
        src = env.stubs / f"{so}.c"
        src.write_text("\n".join(body) + "\n")
        cmd = ["aarch64-linux-gnu-gcc", "-shared", "-fPIC", "-fno-builtin", "-w", f"-Wl,-soname,{so}", str(src), "-o", str(env.stubs / so)]
        if syms:
            script = env.stubs / f"{so}.map"
            script.write_text("".join(f"{v} {{ global: {' '.join(s + ';' for s in names if syms[s] == v)} }};\n" for v in sorted(set(syms.values()))))
            cmd.append(f"-Wl,--version-script={script}")
        _run(cmd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", default="max", help="qemu's -cpu: max (dotprod + i8mm), cortex-a76 (dotprod), cortex-a53 (neither)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="python's arguments, after --")
    a = parser.parse_args()
    env = prepare()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    sys.exit(subprocess.run(env.command(args, a.cpu)).returncode)


if __name__ == "__main__":
    main()
