"""Where one call of a program's method goes, op by op (ETDump medians), for programs side by side.

For each program and thread count, in a fresh process: the method (`forward` over --rows
tokens, or a greedy `spec_step` with the draft the program itself made) at context --context,
--calls times after one untimed call; per op name the number of calls per method call and the
summed median time, the method's total and the count of XNNPACK delegate calls.

    python bench/op_split.py --program after=bundles/spec/model.pte --method spec_step --threads 1 2 > docs/results/op_split.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import collections, json, sys, tempfile
from pathlib import Path
import edgespec, torch
import executorch.extension.pybindings.portable_lib as pl
from executorch.devtools import Inspector
from edgespec.runtime.runner import ProgramRunner
from edgespec.speculative.tree import placeholder_draft
pte, threads, method, rows, context, calls = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
pl._unsafe_reset_threadpool(threads)
runner = ProgramRunner(Path(pte))
if method == "spec_step":
    R, D, k = runner.tree_size, runner.depth, runner.topk
    half, noise = torch.full((R, k), 0.5), torch.zeros(runner.vocab_size)
    runner.forward(torch.zeros((1, context), dtype=torch.long), 0)
    _, draft = runner.spec_step(0, placeholder_draft(D, k), context, 0.0, half, noise)
    inputs = (torch.tensor([0]), draft, torch.tensor([context]), torch.tensor([0.0]), half, noise)
else:
    inputs = (torch.zeros((1, rows), dtype=torch.long), torch.tensor([context]))
torch.set_num_threads(1)
m = pl._load_for_executorch(pte, enable_etdump=True)
m.run_method("forward", (torch.zeros((1, context), dtype=torch.long), torch.tensor([0])))
for _ in range(calls):
    m.run_method(method, inputs)
with tempfile.TemporaryDirectory() as d:
    p = Path(d) / "run.etdp"
    m.write_etdump_result_to_file(str(p))
    events = [e for e in [b for b in Inspector(etdump_path=str(p)).event_blocks if b.name == "Execute"][-1].events if e.perf_data is not None]
ops = collections.defaultdict(lambda: [0, 0.0])
total = 0.0
for e in events:
    if e.name == "Method::execute":
        total += e.perf_data.p50
    elif e.name != "OPERATOR_CALL":
        ops[e.name][0] += 1
        ops[e.name][1] += e.perf_data.p50
top = sorted(ops.items(), key=lambda kv: -kv[1][1])
print(json.dumps({"total_ms": round(total, 3), "delegate_calls": ops["DELEGATE_CALL"][0],
                  "ops": {n: {"calls": c, "ms": round(t, 3)} for n, (c, t) in top if t >= 0.005}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--program", action="append", required=True, metavar="NAME=PTE")
    ap.add_argument("--method", choices=("forward", "spec_step"), default="forward")
    ap.add_argument("--rows", type=int, default=1, help="forward: tokens per call")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--calls", type=int, default=30)
    a = ap.parse_args()
    out = {"method": a.method, "rows": a.rows, "context": a.context, "calls": a.calls, "programs": {}}
    for spec in a.program:
        name, pte = spec.split("=", 1)
        out["programs"][name] = {}
        for t in a.threads:
            res = subprocess.run(
                [sys.executable, "-c", CHILD, pte, str(t), a.method, str(a.rows), str(a.context), str(a.calls)], capture_output=True, text=True, check=True
            )
            out["programs"][name][str(t)] = json.loads(res.stdout.strip().splitlines()[-1])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
