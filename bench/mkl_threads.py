"""Does pinning torch's own threads (OpenMP and MKL, which `llama::custom_sdpa`'s GEMMs call)
to one pay, next to ExecuTorch's XNNPACK pool? Issue 29 asks for no thread of an op's own
beside the pool; this measures what pinning costs before anything pins.

Each mode runs in a fresh process (the setting must precede the first op), alternating
modes for --rounds rounds: `default` (torch's default threads) and `pinned`
(`torch.set_num_threads(1)` before the program loads). Per process: the thread count after
loading, after a prefill and after multi-row calls (/proc/self/status), and the median ms of a
prefill of --context tokens, a 1-token and a 4-token `forward` at that position.

    python bench/mkl_threads.py bundles/default --threads 2 --rounds 3 > docs/results/mkl_threads.json

Prints one JSON object: the rows and, per measure, the median pinned/default ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys


def _threads() -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def _median_ms(fn, reps: int) -> float:
    from edgespec.runtime.speed import time_call

    return round(1000 * time_call(fn, warmup=1, reps=reps), 3)


def _worker(bundle: str, mode: str, threads: int, context: int) -> dict:
    import torch

    if mode == "pinned":
        torch.set_num_threads(1)
    from edgespec.runtime.runner import set_threads
    from edgespec.runtime.session import open_bundle

    set_threads(threads)
    _, _, runner = open_bundle(bundle)
    loaded = _threads()
    ids = torch.randint(100, runner.vocab_size - 100, (1, context), generator=torch.Generator().manual_seed(0))
    pos = torch.tensor([context])
    prefill = _median_ms(lambda: runner.call_forward(ids, torch.tensor([0])), 5)
    after_prefill = _threads()
    one = _median_ms(lambda: runner.call_forward(ids[:, :1], pos), 15)
    four = _median_ms(lambda: runner.call_forward(ids[:, :4], pos), 15)
    return {
        "mode": mode,
        "threads_loaded": loaded,
        "threads_after_prefill": after_prefill,
        "threads_after_rows": _threads(),
        "prefill_ms": prefill,
        "t1_ms": one,
        "t4_ms": four,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--threads", type=int, default=2, help="ExecuTorch threads")
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", choices=["default", "pinned"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.bundle, args.worker, args.threads, args.context)))
        return
    rows = []
    for r in range(args.rounds):
        for mode in ("default", "pinned") if r % 2 == 0 else ("pinned", "default"):
            cmd = [sys.executable, __file__, args.bundle, "--threads", str(args.threads), "--context", str(args.context), "--worker", mode]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]) | {"round": r})
    ratios = {}
    for key in ("prefill_ms", "t1_ms", "t4_ms"):
        pairs = [(a[key], b[key]) for a in rows for b in rows if a["round"] == b["round"] and a["mode"] == "pinned" and b["mode"] == "default"]
        ratios[key] = round(statistics.median(p / d for p, d in pairs), 3)
    print(json.dumps({"bundle": args.bundle, "threads": args.threads, "context": args.context, "pinned_over_default": ratios, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
