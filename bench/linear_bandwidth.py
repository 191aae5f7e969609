"""The block kernel's one-row pass against the memory's speed: every linear layer of one token
(the shapes the bundle's own forward calls `edgespec::block_linear` with, random weights of
those sizes, ~96 MB for the default: larger than the caches, so streamed from DRAM as in
decoding) beside a plain streaming read of the same bytes on the same threads.

Per thread count, in a fresh process (the threadpool is sized before anything loads): the
plan chosen by measurement for this CPU (edgespec.kernels.plan; tuned first if none is
cached), then --reps interleaved rounds of: the streaming read, a one-row pass with the
plan's choice, a one-row pass with the choice the CPU's flags alone make. Medians in ms, and
`read_over_linear` = read / plan pass (the issue's bar: >= 0.8). Prints one JSON object.

    python bench/linear_bandwidth.py --bundle bundles/default --threads 1 2 --reps 15
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def child(bundle: Path, threads: int, reps: int) -> dict:
    import edgespec  # noqa: F401  (before torch: its OpenMP workers sleep instead of spinning, edgespec.host.passive_openmp)

    # isort: split
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    _unsafe_reset_threadpool(threads)
    import torch

    from edgespec.kernels import plan
    from edgespec.runtime.runner import ProgramRunner

    runner = ProgramRunner(bundle / "model.pte")
    shapes = plan.record_shapes(lambda: runner.forward(torch.zeros((1, 1), dtype=torch.long), 0))
    lib = plan._lib()
    flat = (plan.ctypes.c_int64 * (3 * len(shapes)))(*[v for s in shapes for v in s])
    bench = lib.edgespec_bench_new(flat, len(shapes), 1)
    chosen, flags = plan.current("one_row"), plan.flags_choice()

    def linear(c: plan.Choice) -> float:
        return lib.edgespec_bench_pass(bench, 1, plan.PATHS.index(c.path), c.prefetch, c.min_parallel_bytes, 0, len(shapes))

    runs = {"read": [], "plan": [], "flags": []}
    for _ in range(3):
        lib.edgespec_bench_read(bench, 0, len(shapes)), linear(chosen)
    for _ in range(reps):
        runs["read"].append(lib.edgespec_bench_read(bench, 0, len(shapes)))
        runs["plan"].append(linear(chosen))
        runs["flags"].append(linear(flags))
    lib.edgespec_bench_free(bench)
    med = {k: round(statistics.median(v), 3) for k, v in runs.items()}
    mb = sum(plan._weight_bytes(*s) for s in shapes) / 1e6
    return {
        "threads": threads,
        "calls": len(shapes),
        "weight_mb": round(mb, 1),
        "read_ms": med["read"],
        "read_gb_s": round(mb / med["read"], 2),
        "plan_ms": med["plan"],
        "flags_ms": med["flags"],
        "read_over_linear": round(med["read"] / med["plan"], 3),
        "plan": chosen.label(),
        "flags": flags.label(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=Path("bundles/default"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print(json.dumps(child(a.bundle, a.child, a.reps)))
        return
    rows = []
    for t in a.threads:
        done = subprocess.run([sys.executable, __file__, "--bundle", str(a.bundle), "--reps", str(a.reps), "--child", str(t)], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(done.stderr[-3000:])
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    from edgespec.host import cpu_name

    cpu = cpu_name()
    print(json.dumps({"cpu": cpu, "bundle": str(a.bundle), "reps": a.reps, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
