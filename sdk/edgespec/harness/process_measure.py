"""Speed measurements that need a process of their own; the methodology itself (warm-up,
interleaved runs, per-prompt medians, median per-prompt speedup, the JSON shape) is
edgespec.runtime.speed, shared with `edgespec bench` and bench/spec_vs_ar.py.

- Peak RSS and program size: each decoder in a fresh process (VmHWM), so one decoder's memory
  (or the harness's own eager reference model) does not count against another.
- ExecuTorch's stock runner (`TextLLMRunner`) on a program of its own, same prompts.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path


def stock_decode(pte: str, tokenizer_json: str, texts: list[str], max_new_tokens: int) -> dict:
    """ExecuTorch's stock LLM runner on its own program: median decode tokens/s over `texts`
    (raw prompts; the first is a warm-up) and this process's peak RSS."""
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    from edgespec.runtime.runner import load_runtime_kernels
    from edgespec.runtime.speed import peak_rss_mb

    load_runtime_kernels(Path(pte))
    runner = TextLLMRunner(pte, tokenizer_json)
    tps = []
    for i, text in enumerate([texts[0], *texts]):
        runner.reset()
        stats: dict = {}
        runner.generate(
            text,
            GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0, echo=False),
            token_callback=lambda s: None,
            stats_callback=lambda s, stats=stats: stats.update(s=s),
        )
        s = stats["s"]
        dec_s = (s.inference_end_ms - s.prompt_eval_end_ms) / 1000
        if i > 0 and s.num_generated_tokens > 1 and dec_s > 0:
            tps.append((s.num_generated_tokens - 1) / dec_s)
    return {"decode_tokens_per_s": round(statistics.median(tps), 2) if tps else None, "prompts": len(tps), "peak_rss_mb": round(peak_rss_mb(), 1)}


def _rss_worker(bundle: str, mode: str, prompts: list[list[int]], max_new_tokens: int) -> dict:
    from edgespec.runtime.session import decoder, open_bundle
    from edgespec.runtime.speed import peak_rss_mb

    _, _, runner = open_bundle(bundle)
    _, run = decoder(runner, mode)
    for ids in prompts:
        run(ids, max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
    return {"mode": mode, "peak_rss_mb": round(peak_rss_mb(), 1)}


def peak_rss_fresh(bundle: str, mode: str, prompts: list[list[int]], max_new_tokens: int) -> float:
    """Peak RSS (MB) of a fresh process that loads the bundle and decodes `prompts` in `mode`."""
    payload = json.dumps({"bundle": str(bundle), "mode": mode, "prompts": prompts, "max_new_tokens": max_new_tokens})
    out = subprocess.run([sys.executable, "-m", "edgespec.harness.process_measure"], input=payload, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"peak-RSS worker failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"]


if __name__ == "__main__":  # the fresh process of peak_rss_fresh
    args = json.loads(sys.stdin.read())
    print(json.dumps(_rss_worker(args["bundle"], args["mode"], args["prompts"], args["max_new_tokens"])))
