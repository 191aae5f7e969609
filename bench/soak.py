"""Soak: many consecutive generations in one process on one bundle; does memory or the number
of open files grow? Every `--every` generations the process's resident set (VmRSS) and open
file descriptors are recorded; growth is measured from the end of the warm-up (allocators and
caches settle during the first generations) to the last sample. Prompts cycle through the
held-out mixed suite (chat template). Prints JSON; `--plot` writes the RSS curve.

    python bench/soak.py --bundle bundles/default --generations 2000 --plot docs/soak_rss.png \\
        > docs/results/soak.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

from edgespec.corpus.prompts import mixed_prompts
from edgespec.models.tokenizer import encode_prompt
from edgespec.runtime.runner import load_runtime_kernels
from edgespec.runtime.session import decoder, open_bundle


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--generations", type=int, default=2000)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--mode", choices=["auto", "ar", "spec"], default="auto")
    ap.add_argument("--lookup", type=int, default=0, help="suffix-match drafts (spec mode), minimum match length; 0 = off")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plot")
    args = ap.parse_args()

    load_runtime_kernels()
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    _unsafe_reset_threadpool(args.threads)
    manifest, tokenizer, runner = open_bundle(args.bundle)
    mode, decode = decoder(runner, args.mode, args.lookup)
    prompts = [encode_prompt(tokenizer, p.text, True) for p in mixed_prompts("heldout", args.prompts)]
    prompts = [p for p in prompts if len(p) + args.max_new_tokens < runner.max_seq_len]
    samples = [{"generations": 0, "rss_mb": round(rss_mb(), 1), "open_fds": open_fds(), "seconds": 0.0}]
    t0 = time.perf_counter()
    tokens = 0
    for i in range(1, args.generations + 1):
        res = decode(prompts[i % len(prompts)], max_new_tokens=args.max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
        tokens += len(res.completion_ids)
        if i % args.every == 0 or i == args.generations:
            gc.collect()
            samples.append({"generations": i, "rss_mb": round(rss_mb(), 1), "open_fds": open_fds(), "seconds": round(time.perf_counter() - t0, 1)})
    after_warmup = next(s for s in samples if s["generations"] >= min(args.warmup, args.generations))
    last = samples[-1]
    out = {
        "bundle": str(args.bundle),
        "precision": manifest.precision,
        "mode": mode,
        "lookup": args.lookup,
        "generations": args.generations,
        "max_new_tokens": args.max_new_tokens,
        "new_tokens": tokens,
        "threads": args.threads,
        "seconds": last["seconds"],
        "rss_mb_start": samples[0]["rss_mb"],
        "rss_mb_after_warmup": after_warmup["rss_mb"],
        "rss_mb_end": last["rss_mb"],
        "rss_growth_after_warmup_mb": round(last["rss_mb"] - after_warmup["rss_mb"], 1),
        "rss_max_mb": max(s["rss_mb"] for s in samples),
        "open_fds_start": samples[0]["open_fds"],
        "open_fds_end": last["open_fds"],
        "samples": samples,
    }
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.2))
        ax.plot([s["generations"] for s in samples], [s["rss_mb"] for s in samples], marker=".")
        ax.axvline(after_warmup["generations"], color="grey", lw=0.8, ls="--", label="end of warm-up")
        ax.set_xlabel("generations in one process")
        ax.set_ylabel("resident set (MB)")
        ax.set_title(f"soak: {Path(args.bundle).name}, {mode}, {args.max_new_tokens} new tokens each")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
