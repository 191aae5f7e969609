"""The machine this process runs on: the CPUs it may use, whether another process still runs,
where edgespec keeps what it caches."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path


def cache_dir(kind: str) -> Path:
    """Where edgespec caches one `kind` of thing (kernels, models, reference, verified):
    ``$EDGESPEC_CACHE/kind``, by default under ``~/.cache/edgespec``."""
    return Path(os.environ.get("EDGESPEC_CACHE", Path.home() / ".cache" / "edgespec")) / kind


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU as benchmark results name it: /proc/cpuinfo's model name, family and model, the
    vector and matrix features the kernels choose paths by, and the CPUs this process may use,
    e.g. "AMD EPYC (family 26 model 2; AVX-512 VNNI, AVX-512 BF16), 2 vCPUs"
    (platform.processor() where there is no /proc/cpuinfo)."""
    import platform

    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    info: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())  # the first CPU's fields
    name = info.get("model name") or platform.processor() or platform.machine()
    flags = set(info.get("flags", "").split())
    named = {"avx512_vnni": "AVX-512 VNNI", "avx512_bf16": "AVX-512 BF16", "amx_int8": "AMX-INT8", "avx_vnni": "AVX-VNNI"}
    features = [label for flag, label in named.items() if flag in flags]
    if "avx512f" not in flags and "avx2" in flags:
        features.insert(0, "AVX2")
    where = f"family {info['cpu family']} model {info['model']}" if "cpu family" in info and "model" in info else ""
    detail = "; ".join(x for x in (where, ", ".join(features)) if x)
    return f"{name}{f' ({detail})' if detail else ''}, {usable_cpus()} vCPUs"


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """CPUs this process may use: its affinity mask (os.cpu_count() where the OS has none),
    capped by a cgroup v2 CPU quota (`cpu.max`) of its cgroup or an ancestor's."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        n = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    return max(1, n if quota is None else min(n, quota))


def cgroup_cpu_quota(cgroup_root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The tightest cgroup v2 `cpu.max` quota on this process's cgroup and its ancestors, in
    whole CPUs rounded up; None without a quota (or without cgroup v2)."""
    try:
        line = next((s for s in proc_cgroup.read_text().splitlines() if s.startswith("0::")), None)
    except OSError:
        return None
    if line is None:
        return None
    d = cgroup_root / line[3:].strip().lstrip("/")
    best = None
    while True:
        try:
            quota, period = (d / "cpu.max").read_text().split()[:2]
            if quota != "max" and int(period) > 0:
                cpus = max(1, math.ceil(int(quota) / int(period)))
                best = cpus if best is None else min(best, cpus)
        except (OSError, ValueError):
            pass
        if d == cgroup_root or cgroup_root not in d.parents:
            return best
        d = d.parent


def process_alive(pid: int) -> bool:
    """Whether process `pid` still runs (one of another user counts as running)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_openmp_spins = False  # torch's OpenMP runtime was loaded before its workers could be told to sleep
_set_openmp_policy = False  # OMP_WAIT_POLICY=PASSIVE was set here, not by the user


def passive_openmp() -> None:
    """Ask torch's OpenMP workers to sleep at once after a parallel region instead of spinning
    (`OMP_WAIT_POLICY=PASSIVE`, unless the environment says otherwise). `import edgespec` calls
    it; it takes effect only if torch is imported after (OpenMP reads the variable once, when
    torch loads it). A program's call copies its outputs through torch, and a torch op on a
    vocabulary's logits runs an OpenMP region whose worker then spins for milliseconds: a third
    busy thread beside edgespec's two kernel threads on a 2-core machine, which made a 2-thread
    forward 2.5-3x slower (median 10.1-10.6 vs 3.1-3.5 ms on a 2-core AMD EPYC, 2026-12-04)."""
    global _openmp_spins, _set_openmp_policy
    if "torch" in sys.modules and os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        _openmp_spins = True
    if "OMP_WAIT_POLICY" not in os.environ:
        _set_openmp_policy = True
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def foreign_environ() -> dict[str, str]:
    """The environment for a child process that is not edgespec: os.environ without the
    OMP_WAIT_POLICY that passive_openmp added. An OpenMP program that waits for its own workers
    between operations needs them spinning: llama.cpp's llama-bench decoded at 42 instead of 159
    tokens/s on two threads under PASSIVE (2-core AMD EPYC, 2026-12-04)."""
    env = dict(os.environ)
    if _set_openmp_policy and env.get("OMP_WAIT_POLICY") == "PASSIVE":
        del env["OMP_WAIT_POLICY"]
    return env


def openmp_spins() -> bool:
    """Whether torch was imported before edgespec without `OMP_WAIT_POLICY=PASSIVE`, so its
    OpenMP workers spin after each parallel region (see passive_openmp)."""
    return _openmp_spins
