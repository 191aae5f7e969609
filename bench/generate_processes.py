"""What a user gets from `edgespec generate`: one fresh process per prompt, each speculative
bundle's default decoding against the default bundle's autoregressive decoding. Prints JSON.

A process starts with nothing in memory: it imports, loads the program, and the adaptive
policy starts from what this device's cache holds (session.device_policy, beside the kernel
plan) instead of what an earlier prompt taught it. On a short generation that start is a large
share of the time, which one long-lived process (bench/spec_vs_ar.py) never shows.

The methodology is edgespec's one (edgespec.runtime.speed.measure / row_stats / summarize):
each decoder here is `edgespec generate --json` run in a new process, rounds alternate the
order, the median run per prompt is kept, and the speedup is the median over prompts of the
per-prompt ratio of decode tokens/s. Beside it, `process_speedup`: the same median over the
processes' whole wall time (start, load, prefill and decode), what the user waits for.

Warm-up: one process per bundle before any timed one, so the kernel plan and the device
policy are cached as on a machine that has run edgespec before.

    python bench/generate_processes.py --ar-bundle bundles/default --bundle bundles/spec [--bundle ...] \\
        --threads 1 --max-new-tokens 96 --runs 3 > docs/results/generate_processes_NAME.json

--prompt TEXT (repeatable) or --prompts-file FILE (one prompt per line) replace the built-in
general chat prompts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from edgespec.host import cpu_name
from edgespec.runtime.generate import GenerationResult
from edgespec.runtime.speed import measure, row_stats, summarize

GENERAL_PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a bicycle's gears make climbing hills easier.",
    "What should I pack for a three-day hiking trip?",
    "Describe the taste of a ripe mango to someone who has never had one.",
    "Give me some advice for my first day at a new job.",
    "Why do cats purr? Explain it simply.",
    "Write a friendly email inviting my neighbours to a garden party.",
    "What are the pros and cons of working from home?",
)


def _edgespec() -> list[str]:
    exe = shutil.which("edgespec")
    return [exe] if exe else [sys.executable, "-m", "edgespec.cli"]


def process_decoder(bundle: str, mode: str | None, threads: int, texts: dict[tuple[int, ...], str], walls: dict):
    """A decoder for `measure`: `edgespec generate --json` on `bundle` in a fresh process (the
    bundle's default mode when mode is None). Each call's (decode seconds, wall seconds) is
    appended to walls[ids]."""

    def run(ids: list[int], *, max_new_tokens: int, **_) -> GenerationResult:
        cmd = [*_edgespec(), "generate", "--bundle", bundle, "--prompt", texts[tuple(ids)], "--max-new-tokens", str(max_new_tokens)]
        cmd += ["--threads", str(threads), "--json", *(["--mode", mode] if mode else [])]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if out.returncode:
            raise SystemExit(f"{' '.join(cmd[:4])} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
        j = json.loads(out.stdout.strip().splitlines()[-1])
        walls.setdefault(tuple(ids), []).append((j["decode_s"], wall))
        return GenerationResult(
            prompt_ids=j["prompt_ids"],
            completion_ids=j["completion_ids"],
            stopped_by_eos=j["stopped_by_eos"],
            prefill_s=j["prefill_s"],
            decode_s=j["decode_s"],
            step_times_s=[ms / 1000 for ms in j["step_ms"]],
            tokens_per_call=j["step_tokens"],
            speculative_calls=j["step_speculative"],
            adaptive_events=j["adaptive_events"],
        )

    return run


def _median_wall(runs: list[tuple[float, float]], kept: GenerationResult) -> float:
    """The wall time of the run `measure` kept (the median decode time)."""
    return next(w for d, w in runs if d == kept.decode_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, action="append", help="a speculative bundle, decoded in its default mode (auto, its lookup); repeatable")
    ap.add_argument("--ar-bundle", required=True, help="the bundle whose autoregressive decoding is the reference (the default bundle)")
    ap.add_argument("--mode", choices=("auto", "spec", "ar"), help="decode --bundle in this mode instead of its default")
    ap.add_argument("--threads", type=int, default=0, help="ExecuTorch threads in every process (0: its default)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--runs", type=int, default=3, help="processes per prompt and decoder (the median one is kept)")
    ap.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable); default: eight general chat prompts")
    ap.add_argument("--prompts-file", type=Path, help="one prompt per line")
    args = ap.parse_args()
    prompts = list(args.prompt) + ([ln.strip() for ln in args.prompts_file.read_text().splitlines() if ln.strip()] if args.prompts_file else [])
    prompts = prompts or list(GENERAL_PROMPTS)

    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.session import bundle_tokenizer

    tokenizer = bundle_tokenizer(args.bundle[0])
    ids = [encode_prompt(tokenizer, p, True) for p in prompts]
    texts = {tuple(i): p for i, p in zip(ids, prompts)}
    walls: dict = {}  # decoder name -> {prompt ids: [(decode s, wall s) of each run]}
    names = [Path(b).name for b in args.bundle]  # each bundle's decoder is named by its folder
    if len(set(names)) < len(names) or "ar" in names:
        raise SystemExit(f"--bundle folders {names}: give bundles whose folder names differ (and none named 'ar')")
    decoders = {"ar": process_decoder(args.ar_bundle, "ar", args.threads, texts, walls.setdefault("ar", {}))}
    decoders |= {n: process_decoder(b, args.mode, args.threads, texts, walls.setdefault(n, {})) for n, b in zip(names, args.bundle)}
    rows = []
    for i, res in zip(ids, measure(decoders, ids, max_new_tokens=args.max_new_tokens, max_seq_len=1 << 30, eos_ids=(), warmup=1, runs=args.runs)):
        row = row_stats(res, len(i))
        for name, kept in res.items():  # the wall time of the run `measure` kept
            row[name]["process_s"] = round(_median_wall(walls[name].pop(tuple(i)), kept), 3)
        rows.append(row)
        print(f"prompt {len(rows)}/{len(ids)}: " + ", ".join(f"{n} {row[n]['tokens_per_s']}" for n in decoders) + " tok/s", file=sys.stderr)
    summary = summarize(rows)
    for n in names:
        summary[n]["process_speedup"] = round(statistics.median(r["ar"]["process_s"] / r[n]["process_s"] for r in rows), 3)
    report = {
        "bundles": args.bundle,
        "ar_bundle": args.ar_bundle,
        "mode": args.mode or "the bundle's default",
        "threads": args.threads or None,
        "max_new_tokens": args.max_new_tokens,
        "runs": args.runs,
        "cpu": cpu_name(),
        "overall": summary,
        "prompts_text": prompts,
        "command": " ".join(["python", "bench/generate_processes.py", *sys.argv[1:]]),
        "rows": rows,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
