"""Where one decoded token's time goes, at each thread count: the host loop's own share, the
program's ops by ETDump, and the share that runs on one thread only.

Per thread count, in a fresh process (the threadpool is sized before the program loads):
1. The host loop: `generate` (edgespec's one decode loop) decodes --new-tokens greedy tokens
   after the prompt, --runs times; per call, the loop's wall time and the wall time of the
   program's `forward` execute() inside it. host_ms = call - execute: the loop's own time
   (sampling, bookkeeping, Python) per token.
2. ETDump: the same program loaded with ETDump on, --calls one-token forwards at position
   --context; per op kind the mean time per forward. Op calls that run on one thread: every
   op but `edgespec::attention` (split over heads) and the block linears that the installed
   plan splits among threads (recorded shapes; calls under its min_parallel_bytes run on one).
   serial_share = (one-thread ops + host loop) / (forward + host loop).

    python bench/token_profile.py --bundle bundles/default --threads 1 2 > docs/results/token_profile.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import edgespec  # noqa: F401  (before torch: its OpenMP workers sleep instead of spinning, edgespec.host.passive_openmp)

PARALLEL_OPS = ("edgespec::attention.out",)


def child(bundle: Path, threads: int, new_tokens: int, runs: int, calls: int, context: int) -> dict:
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    _unsafe_reset_threadpool(threads)
    import torch

    from edgespec.kernels import plan
    from edgespec.runtime.generate import generate
    from edgespec.runtime.runner import ProgramRunner

    runner = ProgramRunner(bundle / "model.pte")
    shapes = plan.record_shapes(lambda: runner.forward(torch.zeros((1, 1), dtype=torch.long), 0)) if runner.kernel_plan else []
    executes: list[float] = []
    method = runner._forward

    class Timed:
        def execute(self, inputs):
            t = time.perf_counter()
            out = method.execute(inputs)
            executes.append(time.perf_counter() - t)
            return out

    runner._forward = Timed()
    prompt = list(range(100, 100 + 40))
    call_ms, exec_ms = [], []
    for r in range(runs + 1):  # the first run warms up
        executes.clear()
        res = generate(runner.forward, prompt, max_new_tokens=new_tokens, max_seq_len=runner.max_seq_len, eos_ids=())
        if r:
            call_ms.append(1000 * statistics.median(res.step_times_s))
            exec_ms.append(1000 * statistics.median(executes[1:]))  # [0]: the prefill
    runner._forward = method
    call, execute = statistics.median(call_ms), statistics.median(exec_ms)

    # ETDump: per op, one-token forwards at `context`
    import executorch.extension.pybindings.portable_lib as pl
    from executorch.devtools import Inspector

    m = pl._load_for_executorch(str(bundle / "model.pte"), enable_etdump=True, debug_buffer_size=0)
    x, pos = torch.zeros((1, 1), dtype=torch.long), torch.tensor([context])
    for _ in range(calls):
        m.run_method("forward", (x, pos))
    path = os.path.join(tempfile.mkdtemp(), "run.etdp")
    m.write_etdump_result_to_file(path)
    per_op: dict[str, list[float]] = collections.defaultdict(list)
    forward_ms: list[float] = []
    for blk in Inspector(etdump_path=path).event_blocks:
        for ev in blk.events:
            if ev.perf_data is None:
                continue
            if ev.name == "Method::execute":
                forward_ms.extend(ev.perf_data.raw)
            elif ev.name != "OPERATOR_CALL":
                per_op[ev.name].extend(ev.perf_data.raw)
    choice = plan.current("one_row") if shapes else None
    split = [plan._weight_bytes(*s) >= choice.min_parallel_bytes for s in shapes] if shapes else []
    ops, serial = {}, 0.0
    for name, ts in per_op.items():
        per_fwd = len(ts) // calls
        if per_fwd == 0:
            continue
        calls_ms = [statistics.fmean(ts[j::per_fwd]) for j in range(per_fwd)]  # the j-th call of each forward: its mean (stalls count)
        total = sum(calls_ms)
        if name == "edgespec::block_linear.out" and len(split) == per_fwd:
            one_thread = sum(t for t, s in zip(calls_ms, split) if not s or threads == 1)
        else:
            one_thread = 0.0 if (name in PARALLEL_OPS and threads > 1) else total
        serial += one_thread if threads > 1 else total
        ops[name] = {"calls": per_fwd, "ms": round(total, 4), "one_thread_ms": round(one_thread, 4)}
    fwd = statistics.fmean(forward_ms)
    host = max(call - execute, 0.0)
    return {
        "threads": threads,
        "kernel_plan": None if runner.kernel_plan is None else runner.kernel_plan.summary(),
        "decode": {"call_ms": round(call, 4), "execute_ms": round(execute, 4), "host_ms": round(host, 4), "host_share": round(host / call, 4)},
        "etdump": {
            "context": context,
            "forward_ms": round(fwd, 4),
            "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1]["ms"])),
            "ops_ms": round(sum(o["ms"] for o in ops.values()), 4),  # the rest of forward_ms: between and around the ops
            "one_thread_ms": round(serial, 4),
            "serial_share": round((serial + host) / (fwd + host), 4),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=Path("bundles/default"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--calls", type=int, default=30, help="ETDump forwards")
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print(json.dumps(child(a.bundle, a.child, a.new_tokens, a.runs, a.calls, a.context)))
        return
    rows = []
    for t in a.threads:
        cmd = [sys.executable, __file__, "--bundle", str(a.bundle), "--new-tokens", str(a.new_tokens), "--runs", str(a.runs)]
        done = subprocess.run([*cmd, "--calls", str(a.calls), "--context", str(a.context), "--child", str(t)], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(done.stderr[-3000:])
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    from edgespec.host import cpu_name

    cpu = cpu_name()
    print(json.dumps({"cpu": cpu, "bundle": str(a.bundle), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
