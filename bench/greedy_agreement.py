"""Do two bundles decode the same greedy text? Their autoregressive outputs on held-out prompts,
side by side, with the speed of each. Prints JSON.

For a change that is not bitwise (an fp16 KV cache, another rounding), the fidelity report
(top-1, perplexity ratio, KL over held-out text) says how far the logits moved; this says what
a user sees: how many of the prompts' greedy completions stay identical, where the others
leave the reference, and how close the reference's own choice was there (its top-1 minus top-2
logit: a near tie flips on any rounding).

The methodology is edgespec's one (edgespec.runtime.speed): both bundles decode every prompt in
the same process, rounds alternating, the median run kept; `speedup` is the candidate's decode
tokens/s over the reference's, median of per-prompt ratios.

    python bench/greedy_agreement.py --reference bundles/default --candidate bundles/kv16 \\
        --prompts 108 --max-new-tokens 64 --threads 2 > docs/results/greedy_agreement_NAME.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from edgespec.host import cpu_name  # edgespec before torch: its OpenMP workers stay quiet
from edgespec.runtime.session import decoder, open_bundle
from edgespec.runtime.speed import first_divergence, measure, row_stats, summarize, top2_margin


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", required=True, help="the bundle whose greedy output is the reference (e.g. the default)")
    ap.add_argument("--candidate", required=True, help="the bundle compared with it")
    ap.add_argument("--prompts", type=int, default=108, help="held-out prompts, round-robin over the nine types")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=1, help="runs per prompt and bundle (the median one is kept)")
    ap.add_argument("--threads", type=int, default=0, help="ExecuTorch threads (0: its default)")
    args = ap.parse_args()
    from edgespec.corpus.prompts import PROMPT_SOURCES, mixed_prompts
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.runner import set_threads

    set_threads(args.threads)
    _, tokenizer, ref = open_bundle(args.reference)
    cand = open_bundle(args.candidate)[2]
    if cand.max_seq_len != ref.max_seq_len:
        raise SystemExit(f"context {cand.max_seq_len} vs {ref.max_seq_len}: compare bundles of one context length")
    prompts = mixed_prompts("heldout", args.prompts, tuple(PROMPT_SOURCES))
    ids = [encode_prompt(tokenizer, p.text, True) for p in prompts]
    decoders = {"ar": decoder(ref, "ar")[1], "candidate": decoder(cand, "ar")[1]}
    rows = []
    results = measure(decoders, ids, max_new_tokens=args.max_new_tokens, max_seq_len=ref.max_seq_len, eos_ids=ref.eos_ids, runs=args.runs)
    for p, i, res in zip(prompts, ids, results):
        row = {"task": p.task, **row_stats(res, len(i))}
        a, b = res["ar"].completion_ids, res["candidate"].completion_ids
        if a != b:
            at = first_divergence(a, b)
            row["divergence"] = {"token": at, "of": len(a), "reference_top2_margin": round(top2_margin(ref, i + a[:at]), 4)}
        rows.append(row)
        said = "identical" if a == b else f"diverges at token {row['divergence']['token']}"
        print(f"[{len(rows)}/{len(ids)}] {p.task}: {said}", file=sys.stderr)
    divergences = [r["divergence"] for r in rows if "divergence" in r]
    report = {
        "reference": args.reference,
        "candidate": args.candidate,
        "threads": args.threads or None,
        "max_new_tokens": args.max_new_tokens,
        "runs": args.runs,
        "cpu": cpu_name(),
        "overall": summarize(rows),  # `lossless` here: completions identical to the reference's
        "per_task": {t: summarize([r for r in rows if r["task"] == t]) for t in sorted({r["task"] for r in rows})},
        "divergences": {
            "count": len(divergences),
            "median_token": statistics.median(d["token"] for d in divergences) if divergences else None,
            "reference_top2_margins": sorted(d["reference_top2_margin"] for d in divergences),
        },
        "command": " ".join(["python", "bench/greedy_agreement.py", *sys.argv[1:]]),
        "rows": rows,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
