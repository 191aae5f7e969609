"""Batched decoding on one program: generated tokens per second over held-out prompts when
`decode_rows` carries B sequences per call (edgespec.runtime.batch_decode, `edgespec generate
--batch B`), against one prompt at a time through `forward` (B = 1, today's loop). Prints JSON.

For each B (rounds alternate the order): every prompt decoded greedily to its budget (EOS
stops), wall seconds of the whole set; tokens/s, the ratio to B = 1 in the same round (median
over rounds), each sequence's latency (first feed to last token, median and p90), and whether
every completion equals B = 1's. Beside it, what the program's row curve allows: the cost of
forward over B rows at the prompts' typical context against one row (`forward_curve`), so
B / cost(B) is the ceiling the batched throughput is read against, and the cost of one
`decode_rows` call over B rows each in its own slot against B rows in one slot (rows of one
sequence share their keys in the exact attention; rows of B sequences read B slots). Peak RSS
of the process.

    python bench/batch_throughput.py --bundle bundles/batched --batch 1 4 8 16 --prompts 200 > docs/results/batch_throughput.json

The bundle needs `export.batch_slots` >= the largest B (edgespec export export.batch_slots=16 -o bundles/batched).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from edgespec.runtime.batch_decode import decode_batch
from edgespec.runtime.generate import generate
from edgespec.runtime.session import open_bundle
from edgespec.runtime.speed import forward_curve, peak_rss_mb, time_call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4, 8, 16], help="slots per call to measure (1: one prompt at a time through forward)")
    ap.add_argument("--prompts", type=int, default=200, help="held-out prompts (edgespec.corpus.prompts, mixed suites)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="ExecuTorch's threads (0: its default)")
    args = ap.parse_args()

    import torch

    from edgespec.corpus.prompts import mixed_prompts
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.runner import set_threads

    if args.threads:
        set_threads(args.threads)
    _, tk, runner = open_bundle(args.bundle)
    if max(args.batch) > runner.batch_slots:
        sys.exit(f"bundle '{args.bundle}' has {runner.batch_slots} batch slot(s); export it with export.batch_slots={max(args.batch)}")
    encoded = [encode_prompt(tk, p.text, True) for p in mixed_prompts("heldout", args.prompts)]
    prompts = [p for p in encoded if len(p) < runner.max_seq_len - 1]  # the rest cannot be decoded by either
    kw = dict(max_new_tokens=args.max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
    call_rows = runner.call_tokens + runner.batch_slots

    def run(b: int) -> tuple[float, list[list[int]], list[float]]:
        t0 = time.perf_counter()
        if b == 1:
            results = [generate(runner.forward, p, **kw) for p in prompts]
        else:
            done = dict(decode_batch(runner.decode_rows, ((i, p, {}) for i, p in enumerate(prompts)), slots=b, call_rows=call_rows, **kw))
            results = [done[i] for i in range(len(prompts))]
        return time.perf_counter() - t0, [r.completion_ids for r in results], [r.prefill_s + r.decode_s for r in results]

    run(max(args.batch))  # warm-up: the kernel plan, every method loaded
    seconds: dict[int, list[float]] = {b: [] for b in args.batch}
    latency: dict[int, list[float]] = {b: [] for b in args.batch}
    outputs: dict[int, list[list[int]]] = {}
    for r in range(args.rounds):
        for b in args.batch if r % 2 == 0 else reversed(args.batch):
            s, outs, lat = run(b)
            seconds[b].append(s)
            latency[b] = lat
            outputs[b] = outs
            print(f"round {r} B={b}: {s:.1f} s", file=sys.stderr)
    tokens = sum(len(o) for o in outputs[args.batch[0]])
    base = args.batch[0]
    contexts = sorted(len(p) + args.max_new_tokens // 2 for p in prompts)
    context = contexts[len(contexts) // 2]
    curve = forward_curve(runner, context, rows=tuple(sorted({1, *args.batch})))

    def rows_call(b: int, one_slot: bool) -> float:
        """Seconds of one decode_rows call over b rows at `context`: each in a slot of its own,
        or all in slot 0 (then they share keys, as a forward's rows do)."""
        slots = torch.zeros(b, dtype=torch.long) if one_slot else torch.arange(b)
        positions = context + (torch.arange(b) if one_slot else torch.zeros(b, dtype=torch.long))
        return time_call(lambda: runner.decode_rows(torch.zeros((1, b), dtype=torch.long), slots, positions, torch.arange(b)))

    decode_rows_ms = {b: {"own_slots": round(1000 * rows_call(b, False), 3), "one_slot": round(1000 * rows_call(b, True), 3)} for b in args.batch}
    rows = {}
    for b in args.batch:
        lat = sorted(latency[b])
        rows[b] = {
            "tokens_per_s": round(tokens / statistics.median(seconds[b]), 2),
            f"vs_B{base}": round(statistics.median(s0 / s for s0, s in zip(seconds[base], seconds[b])), 3),
            "row_curve_ceiling": round(b * curve[1] / curve[b], 3),
            "latency_s_median": round(statistics.median(lat), 3),
            "latency_s_p90": round(lat[int(0.9 * (len(lat) - 1))], 3),
            "same_completions_as_B1": sum(a == c for a, c in zip(outputs[b], outputs[base])),
        }
    print(
        json.dumps(
            {
                "bundle": args.bundle,
                "prompts": len(prompts),
                "prompts_longer_than_the_context": len(encoded) - len(prompts),
                "max_new_tokens": args.max_new_tokens,
                "generated_tokens": tokens,
                "rounds": args.rounds,
                "threads": args.threads or "default",
                "batch_slots": runner.batch_slots,
                "context": context,
                "forward_ms_by_rows": {n: round(1000 * t, 3) for n, t in curve.items()},
                "decode_rows_ms_by_rows": decode_rows_ms,
                "by_batch": rows,
                "peak_rss_mb": round(peak_rss_mb(), 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
