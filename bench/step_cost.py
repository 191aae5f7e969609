"""What one call costs on the `.pte`: t(T) of `forward` over T new tokens, and `spec_step`.

For every program given (edgespec bundles, ExecuTorch's own export_llm program), every
thread count and every context c: prefill c tokens, then time `forward` over T tokens at
position c (T = 1, 2, 4, 8, 16; each call overwrites the same cache slots) and, where the
program has one, a greedy `spec_step` at position c (median of --reps calls after a warm-up),
and the same step sampled (temperature 1: the program's other acceptance branch).
Ratios: t(T)/t(1), and the step over one token of the same program and threads;
`greedy_step_saving_ms`: the sampled step less the greedy one (the greedy branch accepts by
one argmax per row, the sampled one runs softmax, gathers and scatters over the vocabulary).

With --profile, each call shape is also run once more under ETDump (its own load, ETDump
adds overhead, so only the split is kept): the share of the call spent in attention
(`llama::custom_sdpa` or `edgespec::attention`), in the linear layers (XNNPACK fully-connected or `edgespec::block_linear`), and in the rest,
with the number of portable-kernel op calls and of XNNPACK delegate calls per call, and the
twelve ops that take the most time (`top_ops`: ms per call, calls).

    python bench/step_cost.py --program spec8da4w=bundles/spec/model.pte --program stock=/tmp/stock.pte \\
        --threads 1 2 --contexts 8 200 500 --profile > docs/results/step_cost.json

Prints one JSON object (docs/benchmarks.md, "Step cost").
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

import edgespec  # noqa: F401  (before torch: its OpenMP workers sleep instead of spinning, edgespec.host.passive_openmp)

# isort: split
import torch

from edgespec.runtime.runner import ProgramRunner, execute, load_runtime_kernels
from edgespec.runtime.speed import time_call
from edgespec.speculative.tree import placeholder_draft


def _median_ms(fn, reps: int, warmup: int = 3) -> float:
    return round(1000 * time_call(fn, warmup, reps), 3)


def _step_inputs(runner: ProgramRunner, context: int) -> list:
    """A greedy step's inputs at `context`, with the draft the program itself made there."""
    R, D, k = runner.tree_size, runner.depth, runner.topk
    half, noise = torch.full((R, k), 0.5), torch.zeros(runner.vocab_size)
    _, draft = runner.spec_step(0, placeholder_draft(D, k), context, 0.0, half, noise)
    return [torch.tensor([0]), draft, torch.tensor([context]), torch.tensor([0.0]), half, noise]


def _shapes(runner: ProgramRunner, context: int, rows: list[int]) -> dict[str, tuple[str, list]]:
    """Call shape name -> (method, inputs)."""
    out = {f"forward_T{T}": ("forward", [torch.zeros((1, T), dtype=torch.long), torch.tensor([context])]) for T in rows}
    if runner.has_spec:
        greedy = _step_inputs(runner, context)
        out["spec_step"] = ("spec_step", greedy)
        # the same step sampled (temperature 1): the program's other acceptance branch
        out["spec_step_sampled"] = ("spec_step", [*greedy[:3], torch.tensor([1.0]), *greedy[4:]])
    return out


def time_program(pte: Path, threads: int, contexts: list[int], rows: list[int], reps: int) -> dict:
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    _unsafe_reset_threadpool(threads)
    runner = ProgramRunner(pte)
    out = {}
    for c in contexts:
        runner.forward(torch.zeros((1, c), dtype=torch.long), 0)
        res = {}
        for name, (method, inputs) in _shapes(runner, c, rows).items():
            if method == "forward":
                res[name] = _median_ms(lambda inputs=inputs: execute(runner._forward, inputs), reps)
            else:
                res[name] = _median_ms(lambda inputs=inputs: execute(runner._step, inputs), reps)
        t1 = res["forward_T1"]
        res["forward_ratio"] = {T: round(res[f"forward_T{T}"] / t1, 3) for T in rows}
        if "spec_step" in res:
            res["step_over_token"] = round(res["spec_step"] / t1, 3)
            res["greedy_step_saving_ms"] = round(res["spec_step_sampled"] - res["spec_step"], 3)  # one argmax per row instead of the sampled rule
        out[c] = res
    return out


def _split(etdump: Path) -> dict:
    """ms per call of attention, linear layers and the rest (medians per op), and how many
    portable (non-delegated) op calls and XNNPACK delegate calls a call makes, from an ETDump."""
    from executorch.devtools import Inspector

    blocks = [b for b in Inspector(etdump_path=str(etdump)).event_blocks if b.name == "Execute"]
    tot: collections.Counter = collections.Counter()
    by_op: collections.Counter = collections.Counter()  # ms per call by op (each op's median, summed over its calls)
    calls: collections.Counter = collections.Counter()
    for e in blocks[-1].events:
        if e.perf_data is None:
            continue
        if e.name != "Method::execute":
            by_op[e.name] += e.perf_data.p50
            calls[e.name] += 1
        if e.name == "Method::execute":
            tot["total"] += e.perf_data.p50
        elif "custom_sdpa" in e.name or "edgespec_attention" in e.name or "edgespec::attention" in e.name:
            tot["attention"] += e.perf_data.p50
        elif e.name.startswith("Fully Connected") or "block_linear" in e.name:  # XNNPACK's or edgespec's block kernel
            tot["linear"] += e.perf_data.p50
        if e.name.startswith("native_call_"):
            tot["portable_op_calls"] += 1
        elif e.name == "DELEGATE_CALL":
            tot["delegate_calls"] += 1
    tot["rest"] = tot["total"] - tot["attention"] - tot["linear"]
    top = {name: {"ms": round(ms, 3), "calls": calls[name]} for name, ms in by_op.most_common(12)}
    return {**{k: round(v, 3) for k, v in tot.items()}, "top_ops": top}


def profile_program(pte: Path, threads: int, context: int, rows: list[int], reps: int) -> dict:
    import executorch.extension.pybindings.portable_lib as pl

    pl._unsafe_reset_threadpool(threads)
    runner = ProgramRunner(pte)  # metadata and inputs
    shapes = _shapes(runner, context, rows)
    out = {}
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as edgespec.runtime.runner.execute does around every call (this calls the program directly)
    try:
        for name, (method, inputs) in shapes.items():
            m = pl._load_for_executorch(str(pte), enable_etdump=True)
            m.run_method("forward", (torch.zeros((1, context), dtype=torch.long), torch.tensor([0])))
            for _ in range(reps):
                m.run_method(method, tuple(inputs))
            with tempfile.TemporaryDirectory() as d:
                path = Path(d) / "run.etdp"
                m.write_etdump_result_to_file(str(path))
                out[name] = _split(path)
    finally:
        torch.set_num_threads(torch_threads)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--program", action="append", required=True, metavar="NAME=PTE", help="a program to measure (repeatable)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--contexts", type=int, nargs="+", default=[8, 200, 500])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--profile", action="store_true", help="also split each call shape by op class (ETDump) at context 200")
    args = ap.parse_args()
    load_runtime_kernels()
    programs = {}
    for item in args.program:
        name, _, path = item.partition("=")
        if not Path(path).is_file():
            sys.exit(f"error: program '{path}' not found (--program NAME=PATH)")
        programs[name] = Path(path)
    result: dict = {"rows": args.rows, "contexts": args.contexts, "reps": args.reps, "programs": {}}
    for th in args.threads:  # programs interleaved per thread count: drift hits all alike
        for name, pte in programs.items():
            print(f"[step_cost] {name} threads={th}", file=sys.stderr)
            entry = result["programs"].setdefault(name, {"pte_mb": round(pte.stat().st_size / 1e6, 1), "threads": {}})
            entry["threads"][th] = time_program(pte, th, args.contexts, args.rows, args.reps)
            if args.profile:
                entry["threads"][th]["split_ctx200"] = profile_program(pte, th, 200, args.rows, max(5, args.reps // 3))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
