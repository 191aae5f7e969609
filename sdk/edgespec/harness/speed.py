"""Speed methodology, in one place.

- Side by side: for every prompt, each decoder (autoregressive `forward`, speculative
  `spec_step`, prompt lookup through `spec_step`) runs on the same loaded program, in an
  order that alternates from prompt to prompt, so drift on a shared machine hits all alike.
- Warm-up generations first (not counted); `runs` repetitions per prompt, median decode time.
- Reported: median decode tokens/s per decoder, the median of the per-prompt ratios
  (speedup), mean tokens per call and its histogram, median ms per call, losslessness.
- Peak RSS and program size: each decoder in a fresh process (VmHWM), so one decoder's memory
  (or the harness's own eager reference model) does not count against another.
- ExecuTorch's stock runner (`TextLLMRunner`) on a program of its own, same prompts.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Callable

from edgespec.runtime.generate import GenerationResult

Decoder = Callable[..., GenerationResult]


def side_by_side(decoders: dict[str, Decoder], ids: list[int], *, max_new_tokens: int, max_seq_len: int, eos_ids: tuple[int, ...], runs: int = 1, flip: bool = False) -> dict[str, GenerationResult]:
    """Every decoder on one prompt, `runs` times each (order reversed when `flip`); per decoder
    the run with the median decode time."""
    names = list(decoders)[::-1] if flip else list(decoders)
    got: dict[str, list[GenerationResult]] = {n: [] for n in names}
    for _ in range(runs):
        for n in names:
            got[n].append(decoders[n](ids, max_new_tokens=max_new_tokens, max_seq_len=max_seq_len, eos_ids=eos_ids))
    return {n: sorted(r, key=lambda x: x.decode_s)[len(r) // 2] for n, r in got.items()}


def row_stats(results: dict[str, GenerationResult]) -> dict:
    """One prompt's numbers: tokens/s, ms per call and tokens per call of each decoder, and
    whether every speculative decoder reproduced the autoregressive tokens."""
    row: dict = {"new_tokens": len(results["ar"].completion_ids)}
    for name, r in results.items():
        row[name] = {
            "tokens_per_s": round(r.decode_tokens_per_s, 3),
            "calls": len(r.step_times_s),
            "decode_tokens": r.decode_tokens,
            "ms_per_call": round(1000 * statistics.median(r.step_times_s), 3) if r.step_times_s else None,
            "tokens_per_call": list(r.tokens_per_call) if r.tokens_per_call else None,
        }
    row["lossless"] = all(r.completion_ids == results["ar"].completion_ids for r in results.values())
    return row


def summarize(rows: list[dict]) -> dict:
    """Medians over prompts for each decoder; speedups as the median of per-prompt ratios."""
    med = statistics.median
    timed = [r for r in rows if r["ar"]["calls"] > 0 and r["ar"]["tokens_per_s"] > 0]
    names = [n for n in rows[0] if isinstance(rows[0][n], dict)] if rows else []
    out: dict = {"prompts": len(rows), "timed_prompts": len(timed), "lossless": f"{sum(r['lossless'] for r in rows)}/{len(rows)}"}
    for n in names:
        ok = [r for r in timed if r[n]["calls"] > 0]
        if not ok:
            continue
        calls = sum(r[n]["calls"] for r in ok)
        s = {
            "tokens_per_s": round(med(r[n]["tokens_per_s"] for r in ok), 2),
            "ms_per_call": round(med(r[n]["ms_per_call"] for r in ok), 3),
            "tokens_per_call": round(sum(r[n]["decode_tokens"] for r in ok) / calls, 3),
        }
        if n != "ar":
            s["speedup"] = round(med(r[n]["tokens_per_s"] / r["ar"]["tokens_per_s"] for r in ok), 3)
            hist: dict[int, int] = {}
            for r in ok:
                for t in r[n]["tokens_per_call"] or ():
                    hist[t] = hist.get(t, 0) + 1
            s["tokens_per_call_histogram"] = dict(sorted(hist.items()))
        out[n] = s
    return out


def stock_decode(pte: str, tokenizer_json: str, texts: list[str], max_new_tokens: int) -> dict:
    """ExecuTorch's stock LLM runner on its own program: median decode tokens/s over `texts`
    (raw prompts; the first is a warm-up) and this process's peak RSS."""
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    from edgespec.runtime.bench import peak_rss_mb
    from edgespec.runtime.program import load_runtime_kernels

    load_runtime_kernels()
    runner = TextLLMRunner(pte, tokenizer_json)
    tps = []
    for i, text in enumerate([texts[0], *texts]):
        runner.reset()
        stats: dict = {}
        runner.generate(text, GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0, echo=False), token_callback=lambda s: None, stats_callback=lambda s: stats.update(s=s))
        s = stats["s"]
        dec_s = (s.inference_end_ms - s.prompt_eval_end_ms) / 1000
        if i > 0 and s.num_generated_tokens > 1 and dec_s > 0:
            tps.append((s.num_generated_tokens - 1) / dec_s)
    return {"decode_tokens_per_s": round(statistics.median(tps), 2), "prompts": len(tps), "peak_rss_mb": round(peak_rss_mb(), 1)}


def _rss_worker(bundle: str, mode: str, prompts: list[list[int]], max_new_tokens: int) -> dict:
    from edgespec.runtime.bench import peak_rss_mb
    from edgespec.runtime.session import decoder, open_bundle

    _, _, runner = open_bundle(bundle)
    _, run = decoder(runner, mode)
    for ids in prompts:
        run(ids, max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
    return {"mode": mode, "peak_rss_mb": round(peak_rss_mb(), 1)}


def peak_rss_fresh(bundle: str, mode: str, prompts: list[list[int]], max_new_tokens: int) -> float:
    """Peak RSS (MB) of a fresh process that loads the bundle and decodes `prompts` in `mode`."""
    payload = json.dumps({"bundle": str(bundle), "mode": mode, "prompts": prompts, "max_new_tokens": max_new_tokens})
    out = subprocess.run([sys.executable, "-m", "edgespec.harness.speed"], input=payload, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"peak-RSS worker failed: {out.stderr.strip().splitlines()[-1:] }")
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"]


if __name__ == "__main__":  # the fresh process of peak_rss_fresh
    args = json.loads(sys.stdin.read())
    print(json.dumps(_rss_worker(args["bundle"], args["mode"], args["prompts"], args["max_new_tokens"])))
