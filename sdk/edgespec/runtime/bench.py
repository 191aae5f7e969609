"""`edgespec bench`: the speed of one program's decoders, measured with the one methodology
of edgespec.runtime.speed (warm-up, interleaved runs, per-prompt medians, median per-prompt
speedup), plus program size and peak RSS. Field by field: docs/benchmarks.md.
"""

from __future__ import annotations

from edgespec.runtime.runner import ProgramRunner
from edgespec.runtime.speed import Decoder, measure, peak_rss_mb, row_stats, summarize

__all__ = ["Decoder", "bench_generation", "peak_rss_mb"]


def bench_generation(runner: ProgramRunner, prompts: list[list[int]], decoders: dict[str, Decoder], *, max_new_tokens: int, warmup: int, runs: int) -> dict:
    """Greedy generation of every prompt by every decoder, EOS ignored (fixed length)."""
    measured = measure(decoders, prompts, max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=(), warmup=warmup, runs=runs)
    rows = [row_stats(res, len(ids)) for ids, res in zip(prompts, measured)]
    return {
        "program": str(runner.path),
        "program_bytes": runner.path.stat().st_size,
        "max_new_tokens": max_new_tokens,
        "warmup": warmup,
        "runs": runs,
        **summarize(rows),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        # what edgespec's block kernel runs on this CPU, and why (edgespec.kernels.plan)
        "kernel_plan": None if runner.kernel_plan is None else runner.kernel_plan.summary(),
        "rows": rows,
    }
