"""Speed measurement of one program: warm-up, repeated runs, medians, peak RSS."""

from __future__ import annotations

import resource
import statistics

from edgespec.runtime.generate import generate
from edgespec.runtime.program import ProgramRunner


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_generation(runner: ProgramRunner, prompt_ids: list[int], *, max_new_tokens: int, warmup: int, runs: int) -> dict:
    """Greedy generation `warmup + runs` times (EOS ignored, fixed length); medians of the runs."""
    results = []
    for i in range(warmup + runs):
        res = generate(runner.forward, prompt_ids, max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=())
        if i >= warmup:
            results.append(res)
    return {
        "program": str(runner.path),
        "pte_mb": round(runner.path.stat().st_size / 1e6, 2),
        "prompt_tokens": len(prompt_ids),
        "new_tokens": len(results[0].completion_ids),
        "runs": runs,
        "prefill_tokens_per_s": round(statistics.median(r.prefill_tokens_per_s for r in results), 2),
        "decode_tokens_per_s": round(statistics.median(r.decode_tokens_per_s for r in results), 2),
        "decode_ms_per_token": round(1000 * statistics.median(statistics.median(r.step_times_s) for r in results), 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
