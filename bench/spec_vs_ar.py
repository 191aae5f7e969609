"""Speculative vs autoregressive decoding on one program, side by side, over the held-out suites.

For every held-out prompt (math, reasoning, code; chat template; greedy; EOS stops) the same
program decodes autoregressively (`forward`, one token per call) and speculatively
(`spec_step`), in alternating order. Reported per task and overall: median decode tokens/s
of each, the median per-prompt speedup, mean tokens per call, median ms per call, and
losslessness (spec output == AR output; at a divergence the AR logits' top-2 margin there).

Optional, each in its own fresh process (so peak RSS is the decoder's own):
  --stock PTE     ExecuTorch's TextLLMRunner on a program from ExecuTorch's export_llm, same prompts
  --ar-bundle DIR peak RSS of AR decoding on an autoregressive-only bundle vs spec decoding here

    python bench/spec_vs_ar.py --bundle bundles/default --prompts 100 --max-new-tokens 96 \\
        --stock /tmp/edgespec-bench/stock-8da4w.pte --ar-bundle bundles/ar > docs/results/spec_vs_ar_8da4w.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def _load(bundle: str):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))
    from edgespec.cli import _load_bundle

    return _load_bundle(bundle)


def _prompts(n: int, tokenizer) -> list[tuple[str, str, list[int]]]:
    from edgespec.spec.data import mixed_prompts

    return [(p.task, p.text, tokenizer.encode(tokenizer.apply_chat_template(p.text))) for p in mixed_prompts("heldout", n, ("math", "reasoning", "code"))]


def _margin(runner, ids: list[int]) -> float:
    """Top-1 minus top-2 logit of the program's AR prediction after `ids`."""
    import torch

    top = runner.forward(torch.tensor([ids]), 0).topk(2).values
    return float(top[0] - top[1])


def run_suite(bundle: str, n: int, max_new_tokens: int, lookup: int) -> dict:
    from edgespec.runtime.generate import generate, generate_spec

    _, tokenizer, runner = _load(bundle)
    if not runner.has_spec:
        raise SystemExit(f"{bundle}: the program has no speculative methods")
    kw = dict(max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
    rows = []
    warm = _prompts(1, tokenizer)[0][2]
    generate(runner.forward, warm, **kw)  # warm-up, both modes
    generate_spec(runner, warm, lookup=lookup, **kw)
    for i, (task, _, ids) in enumerate(_prompts(n, tokenizer)):
        runs = {}
        for mode in (("ar", "spec") if i % 2 == 0 else ("spec", "ar")):
            runs[mode] = generate(runner.forward, ids, **kw) if mode == "ar" else generate_spec(runner, ids, lookup=lookup, **kw)
        a, s = runs["ar"], runs["spec"]
        row = {
            "task": task,
            "prompt_tokens": len(ids),
            "new_tokens": len(a.completion_ids),
            "ar_tps": a.decode_tokens_per_s,
            "spec_tps": s.decode_tokens_per_s,
            "ar_ms_per_call": 1000 * statistics.median(a.step_times_s) if a.step_times_s else None,
            "spec_ms_per_call": 1000 * statistics.median(s.step_times_s) if s.step_times_s else None,
            "calls": len(s.step_times_s),
            "decode_tokens": s.decode_tokens,
            "tokens_per_call": s.tokens_per_call,
            "lossless": s.completion_ids == a.completion_ids,
        }
        if not row["lossless"]:
            j = next(k for k, (x, y) in enumerate(zip(a.completion_ids + [-1], s.completion_ids + [-2])) if x != y)
            row["divergence"] = {"index": j, "ar_top2_margin": _margin(runner, ids + a.completion_ids[:j])}
        rows.append(row)
        print(f"[{i + 1}/{n}] {task}: ar {row['ar_tps']:.1f} spec {row['spec_tps']:.1f} tok/s, {s.mean_accepted:.2f}/call, lossless {row['lossless']}", file=sys.stderr)
    return {"rows": rows, "pte_bytes": runner.path.stat().st_size, "branching": list(runner.branching)}


def summarize(rows: list[dict]) -> dict:
    med = statistics.median
    ok = [r for r in rows if r["calls"] > 0 and r["ar_tps"] > 0]
    calls = sum(r["calls"] for r in ok)
    hist: dict[int, int] = {}
    for r in ok:
        for t in r["tokens_per_call"]:
            hist[t] = hist.get(t, 0) + 1
    return {
        "prompts": len(rows),
        "ar_decode_tokens_per_s": round(med(r["ar_tps"] for r in ok), 2),
        "spec_decode_tokens_per_s": round(med(r["spec_tps"] for r in ok), 2),
        "speedup_median_of_ratios": round(med(r["spec_tps"] / r["ar_tps"] for r in ok), 3),
        "mean_tokens_per_call": round(sum(r["decode_tokens"] for r in ok) / max(1, calls), 3),
        "ar_ms_per_call": round(med(r["ar_ms_per_call"] for r in ok), 3),
        "spec_ms_per_call": round(med(r["spec_ms_per_call"] for r in ok), 3),
        "tokens_per_call_histogram": dict(sorted(hist.items())),
        "lossless": f"{sum(r['lossless'] for r in rows)}/{len(rows)}",
        "divergence_margins": [round(r["divergence"]["ar_top2_margin"], 4) for r in rows if "divergence" in r],
    }


def worker_stock(pte: str, tokenizer_json: str, texts: list[str], max_new_tokens: int) -> dict:
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    from edgespec.runtime.bench import peak_rss_mb

    runner = TextLLMRunner(pte, tokenizer_json)
    tps = []
    for i, text in enumerate([texts[0]] + texts):
        runner.reset()
        stats = {}
        runner.generate(text, GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0, echo=False), token_callback=lambda s: None, stats_callback=lambda s: stats.update(s=s))
        s = stats["s"]
        if i > 0:  # the first is a warm-up
            dec_s = (s.inference_end_ms - s.prompt_eval_end_ms) / 1000
            if s.num_generated_tokens > 1 and dec_s > 0:
                tps.append((s.num_generated_tokens - 1) / dec_s)
    return {"decode_tokens_per_s": statistics.median(tps), "prompts": len(tps), "peak_rss_mb": peak_rss_mb()}


def worker_rss(bundle: str, mode: str, prompts: list[list[int]], max_new_tokens: int) -> dict:
    from edgespec.cli import _decoder
    from edgespec.runtime.bench import peak_rss_mb

    _, _, runner = _load(bundle)
    _, run = _decoder(runner, mode)
    for ids in prompts:
        run(ids, max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
    return {"bundle": bundle, "mode": mode, "peak_rss_mb": peak_rss_mb(), "pte_bytes": runner.path.stat().st_size}


def _subprocess(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--lookup", type=int, default=0, help="also draft by prompt lookup (max n-gram; 0 = streams only)")
    ap.add_argument("--stock", help="a .pte made by ExecuTorch's export_llm for the same model and quantization")
    ap.add_argument("--ar-bundle", help="an autoregressive-only bundle of the same model, for the memory/size ratio")
    ap.add_argument("--worker", choices=["stock", "rss"], help=argparse.SUPPRESS)
    ap.add_argument("--inputs", help=argparse.SUPPRESS)  # worker prompts (JSON), prepared by the parent
    ap.add_argument("--mode", default="spec", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:  # a fresh process that only loads the program and decodes: its peak RSS is the decoder's
        inputs = json.loads(Path(args.inputs).read_text())
        if args.worker == "stock":
            print(json.dumps(worker_stock(args.stock, str(Path(args.bundle) / "tokenizer.json"), inputs["texts"], args.max_new_tokens)))
        else:
            print(json.dumps(worker_rss(args.bundle, args.mode, inputs["ids"], args.max_new_tokens)))
        return

    result = run_suite(args.bundle, args.prompts, args.max_new_tokens, args.lookup)
    rows = result["rows"]
    report = {
        "bundle": args.bundle,
        "branching": result["branching"],
        "lookup": args.lookup,
        "pte_bytes": result["pte_bytes"],
        "max_new_tokens": args.max_new_tokens,
        "overall": summarize(rows),
        "per_task": {t: summarize([r for r in rows if r["task"] == t]) for t in sorted({r["task"] for r in rows})},
    }
    import tempfile

    _, tokenizer, _ = _load(args.bundle)
    prepared = _prompts(min(args.prompts, 30), tokenizer)
    inputs = Path(tempfile.mkdtemp()) / "inputs.json"
    inputs.write_text(json.dumps({"texts": [tokenizer.apply_chat_template(t) for _, t, _ in prepared], "ids": [ids for _, _, ids in prepared][:10]}))
    if args.stock:
        stock = _subprocess(["--worker", "stock", "--inputs", str(inputs), "--bundle", args.bundle, "--stock", args.stock, "--max-new-tokens", str(args.max_new_tokens)])
        report["stock"] = {**stock, "pte_bytes": Path(args.stock).stat().st_size}
        report["spec_over_stock"] = round(report["overall"]["spec_decode_tokens_per_s"] / stock["decode_tokens_per_s"], 3)
    if args.ar_bundle:
        ar = _subprocess(["--worker", "rss", "--inputs", str(inputs), "--bundle", args.ar_bundle, "--mode", "ar", "--max-new-tokens", str(args.max_new_tokens)])
        sp = _subprocess(["--worker", "rss", "--inputs", str(inputs), "--bundle", args.bundle, "--mode", "spec", "--max-new-tokens", str(args.max_new_tokens)])
        report["memory"] = {
            "ar_peak_rss_mb": round(ar["peak_rss_mb"], 1),
            "spec_peak_rss_mb": round(sp["peak_rss_mb"], 1),
            "rss_ratio": round(sp["peak_rss_mb"] / ar["peak_rss_mb"], 3),
            "ar_pte_bytes": ar["pte_bytes"],
            "spec_pte_bytes": sp["pte_bytes"],
            "size_ratio": round(sp["pte_bytes"] / ar["pte_bytes"], 4),
        }
    report["rows"] = rows
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
