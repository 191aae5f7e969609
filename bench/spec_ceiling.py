"""What lossless speculation can reach on this CPU: the program's row-cost curve and the
speedup a perfect drafter would give at each chain length, and the share of it the shipped
decoders reach. Prints JSON.

A speculative call over a chain of L drafted tokens verifies L + 1 rows; if every draft were
accepted it would emit L + 1 tokens for the cost of those rows. With t(n) the program's
forward over n rows at a typical context, the ceiling at L is (L + 1) t(1) / t(L + 1): the
most a chain of L can give on this device, whatever drafts it (its step's own drafting
work only lowers it). Where rows are nearly free (a memory-bound CPU) the ceiling grows with
L; where each row costs (a matrix unit already busy on one row, or a compute-bound core) it
flattens early, so every speedup is read against its own hardware.

    python bench/spec_ceiling.py --bundle bundles/default --threads 2 \\
        [--results docs/results/spec_vs_ar_hydra_epyc26_2threads.json ...] > docs/results/spec_ceiling_NAME.json

--results: `bench/spec_vs_ar.py` JSONs measured on this machine at the same thread count;
each of their decoders' speedup over the default AR is put beside the ceiling at its chain
length (the fraction of the ceiling reached).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edgespec.host import cpu_name  # (edgespec before torch: its OpenMP workers sleep)
from edgespec.runtime.session import open_bundle
from edgespec.runtime.speed import forward_curve

MAX_ROWS = 16  # the curve's rows: chains up to 15 drafted tokens, trees up to 16 rows


def ceilings(curve: dict[int, float]) -> dict[int, float]:
    """Chain length L -> (L + 1) t(1) / t(L + 1), for every L + 1 the curve has."""
    return {n - 1: n * curve[1] / curve[n] for n in sorted(curve) if n > 1}


def reached(results: dict, ceiling: dict[int, float]) -> dict:
    """Each decoder of a spec_vs_ar.py JSON: its speedup over the default AR (median of
    per-prompt ratios), its chain length, the ceiling there and the fraction reached."""
    depth = len(results.get("branching") or [])
    against = (results.get("against") or {}).get("speedup_over_it") or {}
    out = {}
    for name, speedup in against.items():
        if name in ("ar",) or depth not in ceiling:
            continue
        out[name] = {"speedup": speedup, "chain": depth, "ceiling": round(ceiling[depth], 3), "fraction": round(speedup / ceiling[depth], 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="a bundle whose forward is the AR the speedups are over (the default bundle)")
    ap.add_argument("--threads", type=int, default=0, help="ExecuTorch's threads (0: its default)")
    ap.add_argument("--context", type=int, default=200, help="position the rows are at (a typical decode context)")
    ap.add_argument("--results", type=Path, nargs="+", default=[], help="bench/spec_vs_ar.py JSONs of this machine and thread count")
    args = ap.parse_args()

    from edgespec.runtime.runner import set_threads

    if args.threads:
        set_threads(args.threads)
    _, _, runner = open_bundle(args.bundle)
    curve = forward_curve(runner, args.context, reps=9, rows=tuple(range(1, MAX_ROWS + 1)))
    ceiling = ceilings(curve)
    best = max(ceiling, key=ceiling.get)
    report = {
        "bundle": args.bundle,
        "cpu": cpu_name(),
        "threads": args.threads or "default",
        "context": args.context,
        "forward_ms_by_rows": {n: round(1000 * t, 3) for n, t in curve.items()},
        "cost_vs_one_row": {n: round(t / curve[1], 3) for n, t in curve.items()},
        "perfect_drafter_speedup_by_chain": {chain: round(c, 3) for chain, c in ceiling.items()},
        "best_chain": {"length": best, "speedup": round(ceiling[best], 3)},
    }
    if args.results:  # each file's decoders, under the file's name
        report["decoders"] = {str(f): reached(json.loads(f.read_text()), ceiling) for f in args.results}
    report["command"] = " ".join(["python", "bench/spec_ceiling.py", *sys.argv[1:]])
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
