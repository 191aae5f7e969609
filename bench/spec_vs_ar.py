"""Speculative vs autoregressive decoding on one program, side by side, over held-out prompts.

The methodology is edgespec's one (edgespec.runtime.speed, as `edgespec bench` and
`edgespec validate`): for every held-out prompt (math, reasoning, code; chat template; greedy;
EOS stops) the same program decodes with `forward` (one token per call) and `spec_step`,
interleaved in alternating order after a warm-up; medians, median per-prompt speedup, tokens
per call, losslessness (at a divergence: the AR logits' top-2 margin there). Fields:
docs/benchmarks.md.

Optional, each in its own fresh process (so peak RSS is the decoder's own):
  --stock PTE     ExecuTorch's TextLLMRunner on a program from ExecuTorch's export_llm, same prompts
  --ar-bundle DIR peak RSS of AR decoding on an autoregressive-only bundle vs spec decoding here
  --against DIR   AR decoding of another bundle (e.g. the default 8da4w one) timed in the same
                  rounds: every decoder's speedup over it (median of per-prompt ratios)
  --lookup N ...  more decoders, spec_lookupN: suffix-match drafts of >= N tokens first (the hybrid)
  --auto          more decoders, auto (and auto_lookupN): speculative steps only while they pay,
                  `edgespec generate`'s default (edgespec.runtime.adaptive)

    python bench/spec_vs_ar.py --bundle bundles/spec --prompts 100 --max-new-tokens 64 \\
        --stock /tmp/edgespec-bench/stock-8da4w.pte --ar-bundle bundles/default > docs/results/spec_vs_ar_8da4w.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from edgespec.harness import process_measure
from edgespec.host import cpu_name
from edgespec.models.tokenizer import encode_prompt
from edgespec.runtime.session import decoder, open_bundle
from edgespec.runtime.speed import first_divergence, measure, row_stats, summarize, top2_margin

DEFAULT_SUITES = ("math", "reasoning", "code")  # () = all nine (edgespec.corpus.prompts.PROMPT_SOURCES)


def _prompts(n: int, tokenizer, suites: tuple[str, ...] = DEFAULT_SUITES) -> list[tuple[str, str, list[int]]]:
    from edgespec.corpus.prompts import PROMPT_SOURCES, mixed_prompts

    if any(s.startswith("task:") for s in suites):  # a fine-tune task's held-out split (a task program's own prompts)
        from edgespec.harness.suites import load_suite

        if len(suites) != 1:
            raise SystemExit(f"--suites {','.join(suites)}: a task split is measured alone")

        return [(ex.suite, ex.prompt, encode_prompt(tokenizer, ex.prompt, True)) for ex in load_suite(suites[0], n)]
    return [(p.task, p.text, encode_prompt(tokenizer, p.text, True)) for p in mixed_prompts("heldout", n, suites or tuple(PROMPT_SOURCES))]


AGAINST = "ar_against"  # autoregressive decoding of another bundle (--against), timed in the same rounds


def run_suite(
    bundle: str,
    n: int,
    max_new_tokens: int,
    lookups: tuple[int, ...] = (),
    runs: int = 1,
    against: str | None = None,
    suites: tuple[str, ...] = DEFAULT_SUITES,
    auto: bool = False,
) -> tuple[list[dict], object, object]:
    _, tokenizer, runner = open_bundle(bundle)
    if not runner.has_spec:
        raise SystemExit(f"{bundle}: the program has no speculative methods")
    decoders = {"ar": decoder(runner, "ar")[1], "spec": decoder(runner, "spec")[1]}
    for n_min in lookups:
        decoders[f"spec_lookup{n_min}"] = decoder(runner, "spec", n_min)[1]
    if auto:
        decoders["auto"] = decoder(runner, "auto", 0)[1]
        for n_min in lookups:
            decoders[f"auto_lookup{n_min}"] = decoder(runner, "auto", n_min)[1]
    if against:
        other = open_bundle(against)[2]
        if other.max_seq_len != runner.max_seq_len:
            raise SystemExit(f"{against}: context {other.max_seq_len}, {bundle}: {runner.max_seq_len}; compare bundles of one context length")
        decoders[AGAINST] = decoder(other, "ar")[1]
    prompts = _prompts(n, tokenizer, suites)
    measured = measure(
        decoders, [ids for _, _, ids in prompts], max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids, warmup=1, runs=runs
    )
    rows = []
    for i, ((task, _, ids), res) in enumerate(zip(prompts, measured)):
        ref = res.pop(AGAINST, None)  # another program's output: not judged for losslessness
        row = {"task": task, **row_stats(res, len(ids))}
        if ref is not None:
            row[AGAINST] = row_stats({AGAINST: ref}, len(ids))[AGAINST]
        a = res["ar"].completion_ids
        for name in (n for n in res if n != "ar" and res[n].completion_ids != a):  # where it left AR's output
            s = res[name].completion_ids
            j = first_divergence(a, s)
            row.setdefault("divergence", {})[name] = {"index": j, "ar_top2_margin": top2_margin(runner, ids + a[:j])}
        rows.append(row)
        print(f"[{i + 1}/{n}] {task}: ar {row['ar']['tokens_per_s']} spec {row['spec']['tokens_per_s']} tok/s, lossless {row['lossless']}", file=sys.stderr)
    return rows, tokenizer, runner


def _over_against(rows: list[dict]) -> dict:
    """Per decoder of this bundle: the median over prompts of its tokens/s over the other
    bundle's autoregressive tokens/s in the same round, overall and per task."""
    import statistics

    def ratios(rs: list[dict]) -> dict:
        names = [k for k, v in rs[0].items() if isinstance(v, dict) and "calls" in v and k != AGAINST]
        ok = [r for r in rs if r[AGAINST]["tokens_per_s"] and all(r[n]["tokens_per_s"] for n in names)]
        return {n: round(statistics.median(r[n]["tokens_per_s"] / r[AGAINST]["tokens_per_s"] for r in ok), 3) for n in names} if ok else {}

    return {
        "ar_tokens_per_s": round(statistics.median(r[AGAINST]["tokens_per_s"] for r in rows if r[AGAINST]["tokens_per_s"]), 2),
        "speedup_over_it": ratios(rows),
        "per_task": {t: ratios([r for r in rows if r["task"] == t]) for t in sorted({r["task"] for r in rows})},
    }


def _stock_worker(pte: str, tokenizer_json: str, texts: list[str], max_new_tokens: int) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json,sys; from edgespec.harness.process_measure import stock_decode; a=json.load(sys.stdin); print(json.dumps(stock_decode(**a)))",
        ],
        input=json.dumps({"pte": pte, "tokenizer_json": tokenizer_json, "texts": texts, "max_new_tokens": max_new_tokens}),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--runs", type=int, default=1, help="runs per prompt and decoder (the median one is kept)")
    ap.add_argument(
        "--lookup", type=int, nargs="+", default=[], help="also decode with suffix-match drafts of at least N tokens (decoder spec_lookupN), for each N"
    )
    ap.add_argument("--auto", action="store_true", help="also decode with the adaptive policy (decoders auto, auto_lookupN): spec only while it pays")
    ap.add_argument("--against", help="also time autoregressive decoding of this bundle (e.g. the default 8da4w one) in the same rounds")
    ap.add_argument("--stock", help="a .pte made by ExecuTorch's export_llm for the same model and quantization")
    ap.add_argument("--ar-bundle", help="an autoregressive-only bundle of the same model, for the memory/size ratio")
    ap.add_argument("--threads", type=int, default=0, help="ExecuTorch threadpool size (0 = its default, one per core)")
    ap.add_argument(
        "--suites",
        default=",".join(DEFAULT_SUITES),
        help="held-out prompt suites, comma-separated round-robin ('all': the nine), or one task split (task:sql_chinook:heldout_fillings)",
    )
    args = ap.parse_args()
    suites = () if args.suites == "all" else tuple(args.suites.split(","))
    from edgespec.runtime.runner import set_threads

    set_threads(args.threads)  # before any program is loaded

    rows, tokenizer, runner = run_suite(
        args.bundle, args.prompts, args.max_new_tokens, tuple(n for n in args.lookup if n > 0), args.runs, args.against, suites, args.auto
    )
    report = {
        "bundle": args.bundle,
        "suites": list(suites) or "all",
        "branching": list(runner.branching),
        "lookup": args.lookup,
        "threads": args.threads or None,
        "cpu": cpu_name(),
        "pte_bytes": runner.path.stat().st_size,
        "max_new_tokens": args.max_new_tokens,
        "runs": args.runs,
        "overall": summarize(rows),
        "per_task": {t: summarize([r for r in rows if r["task"] == t]) for t in sorted({r["task"] for r in rows})},
        "divergence_margins": {
            n: [round(r["divergence"][n]["ar_top2_margin"], 4) for r in rows if n in r.get("divergence", {})] for n in rows[0] if n.startswith("spec")
        },
    }
    if args.against:
        report["against"] = {"bundle": args.against, **_over_against(rows)}
    prepared = _prompts(min(args.prompts, 30), tokenizer, suites)
    if args.stock:
        texts = [tokenizer.apply_chat_template(t) for _, t, _ in prepared]
        stock = _stock_worker(args.stock, str(Path(args.bundle) / "tokenizer.json"), texts, args.max_new_tokens)
        report["stock"] = {**stock, "pte_bytes": Path(args.stock).stat().st_size}
        ours, theirs = report["overall"]["spec"]["tokens_per_s"], stock["decode_tokens_per_s"]
        report["spec_over_stock"] = round(ours / theirs, 3) if ours and theirs else None
    if args.ar_bundle:
        ids = [p for _, _, p in prepared][:10]
        ar = process_measure.peak_rss_fresh(args.ar_bundle, "ar", ids, args.max_new_tokens)
        sp = process_measure.peak_rss_fresh(args.bundle, "spec", ids, args.max_new_tokens)
        ar_bytes = (Path(args.ar_bundle) / "model.pte").stat().st_size
        report["memory"] = {
            "ar_peak_rss_mb": ar,
            "spec_peak_rss_mb": sp,
            "rss_ratio": round(sp / ar, 3),
            "ar_pte_bytes": ar_bytes,
            "spec_pte_bytes": report["pte_bytes"],
            "size_ratio": round(report["pte_bytes"] / ar_bytes, 4),
        }
    report["command"] = " ".join(["python", "bench/spec_vs_ar.py", *sys.argv[1:]])
    report["rows"] = rows
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
