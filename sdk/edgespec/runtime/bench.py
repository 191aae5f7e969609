"""Speed measurement of one program: warm-up, repeated runs, medians, peak RSS.

Several decoders (autoregressive, speculative) are measured side by side: their runs are
interleaved (ar, spec, ar, spec, ...) so that load on a shared machine hits them alike.
"""

from __future__ import annotations

import resource
import statistics
from typing import Callable

from edgespec.runtime.generate import GenerationResult
from edgespec.runtime.program import ProgramRunner

Decoder = Callable[..., GenerationResult]


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB.

    Linux: VmHWM of this process image. (getrusage's ru_maxrss survives exec, so a worker
    started by fork + exec from a big parent would report the parent's size.)"""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def summarize(results: list[GenerationResult]) -> dict:
    """Medians over runs of one decoder."""
    med = statistics.median
    return {
        "new_tokens": len(results[0].completion_ids),
        "prefill_tokens_per_s": round(med(r.prefill_tokens_per_s for r in results), 2),
        "decode_tokens_per_s": round(med(r.decode_tokens_per_s for r in results), 2),
        "ms_per_call": round(1000 * med(med(r.step_times_s) for r in results), 3),
        "tokens_per_call": round(med(r.mean_accepted for r in results), 3),
    }


def bench_generation(runner: ProgramRunner, prompt_ids: list[int], decoders: dict[str, Decoder], *, max_new_tokens: int, warmup: int, runs: int) -> dict:
    """Greedy generation, `warmup + runs` rounds of every decoder (EOS ignored: fixed length)."""
    results: dict[str, list[GenerationResult]] = {name: [] for name in decoders}
    for i in range(warmup + runs):
        for name, decode in decoders.items():
            res = decode(prompt_ids, max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=())
            if i >= warmup:
                results[name].append(res)
    out = {
        "program": str(runner.path),
        "pte_mb": round(runner.path.stat().st_size / 1e6, 2),
        "prompt_tokens": len(prompt_ids),
        "runs": runs,
        **{name: summarize(r) for name, r in results.items()},
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
    if "ar" in results and "spec" in results:
        out["speedup"] = round(out["spec"]["decode_tokens_per_s"] / out["ar"]["decode_tokens_per_s"], 3)
        out["lossless"] = all(a.completion_ids == s.completion_ids for a, s in zip(results["ar"], results["spec"]))
    return out
