"""Decoding's cost by position: how a program's one-token call grows with the context. For
each position P: a prompt of P tokens, then --rounds x 20 one-token calls at P, P + 1, ...;
the median ms per call. A model with sliding-window layers (Gemma 3's local layers) should
stop growing past its window but for its global layers.

    python bench/decode_by_position.py --bundle /path/gemma-bundle --threads 1 --positions 100 500 900
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=Path("bundles/default"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--positions", type=int, nargs="+", default=[100, 500, 900])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import edgespec  # noqa: F401  (before torch: its OpenMP workers stay quiet)

    # isort: split
    import torch

    from edgespec.host import cpu_name
    from edgespec.runtime.runner import ProgramRunner, set_threads

    set_threads(a.threads)
    runner = ProgramRunner(a.bundle / "model.pte")
    ms = {}
    for pos in a.positions:
        runner.forward(torch.arange(1000, 1000 + pos).reshape(1, pos), 0)
        times = []
        for i in range(20 * a.rounds):
            t0 = time.perf_counter()
            runner.forward(torch.tensor([[5]]), pos + i)
            times.append(time.perf_counter() - t0)
        ms[pos] = round(1000 * statistics.median(times), 3)
    print(json.dumps({"cpu": cpu_name(), "program": str(a.bundle / "model.pte"), "threads": a.threads, "ms_per_token_at_position": ms}, indent=1))


if __name__ == "__main__":
    main()
