"""Speed methodology, in one place: `edgespec bench`, `edgespec validate` and
bench/spec_vs_ar.py all measure with `measure` and report `row_stats` / `summarize`; single
program calls are timed with `time_call` (`edgespec tune`'s call costs, `forward_curve` and
`step_cost`; bench/step_cost.py, bench/mkl_threads.py).

- Side by side: every decoder (autoregressive `forward`, speculative `spec_step`, prompt
  lookup through `spec_step`) runs on the same loaded program for every prompt.
- Warm-up first: `warmup` generations of every decoder on the first prompt, not counted.
- `runs` rounds per prompt; each round runs every decoder once, in an order that alternates
  from round to round (ar, spec | spec, ar | ...), counted across prompts, so drift and load
  on a shared machine hit all decoders alike. Per prompt and decoder, the run with the median
  decode time is kept (so its tokens/s, ms per call and tokens per call belong together).
- Per prompt: decode tokens/s, prefill tokens/s, decode calls, tokens per call (the
  accepted draft tokens plus the bonus token the verifier adds), losslessness (every decoder
  emitted the autoregressive tokens).
- Over prompts: medians per decoder; the speedup of a decoder is the **median over prompts
  of the per-prompt ratio** (its tokens/s over the autoregressive tokens/s, measured side
  by side), not a ratio of medians.
- A prompt whose generation made no decode call (max_new_tokens 1, or EOS right after
  prefill: every new token came from prefill) has no decode speed; it is left out of the
  decode numbers, which are null when no prompt is left, and the summary says so in `note`.
- One call (`time_call`): `warmup` untimed calls, then the median of `reps` timed ones.

Field by field: docs/benchmarks.md. Nothing here imports torch at import time (the decoders
do; the call timers import it when called).
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgespec.runtime.generate import GenerationResult

Decoder = Callable[..., "GenerationResult"]

REFERENCE = "ar"  # the decoder others are compared with (speedup, losslessness)


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


def time_call(fn: Callable[[], object], warmup: int = 2, reps: int = 7) -> float:
    """Median seconds of fn() over `reps` calls, after `warmup` calls not counted."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


CURVE_ROWS = (1, 2, 4, 8)  # row counts tune measures forward at


def forward_curve(runner, context: int, reps: int = 7, rows: tuple[int, ...] = CURVE_ROWS) -> dict[int, float]:
    """Seconds of the program's forward (an `edgespec.runtime.runner.ProgramRunner`) over n
    tokens at position `context`, for n in `rows` (one prefill: each call rewrites the same
    cache slots)."""
    import torch

    runner.forward(torch.zeros((1, context), dtype=torch.long), 0)
    return {n: time_call(lambda n=n: runner.forward(torch.zeros((1, n), dtype=torch.long), context), reps=reps) for n in rows}


def step_cost(runner, context: int, reps: int = 7) -> float:
    """Seconds of one greedy spec_step at position `context` (after a prefill), drafting from
    the draft the program itself made there."""
    import torch

    from edgespec.speculative.tree import placeholder_draft

    runner.forward(torch.zeros((1, context), dtype=torch.long), 0)
    half, noise = torch.full((runner.tree_size, runner.topk), 0.5), torch.zeros(runner.vocab_size)
    _, draft = runner.spec_step(0, placeholder_draft(runner.depth, runner.topk), context, 0.0, half, noise)
    return time_call(lambda: runner.spec_step(0, draft, context, 0.0, half, noise), reps=reps)


def measure(
    decoders: dict[str, Decoder],
    prompts: Sequence[list[int]],
    *,
    max_new_tokens: int | Sequence[int],
    max_seq_len: int,
    eos_ids: tuple[int, ...],
    warmup: int = 1,
    runs: int = 1,
) -> Iterator[dict[str, GenerationResult]]:
    """For each prompt in turn, {decoder name: its median run} (see the module docstring).

    max_new_tokens: one budget for all prompts, or one per prompt. A generator: the caller
    can score or print each prompt's results as they come."""
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    budgets = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(budgets) != len(prompts):
        raise ValueError(f"{len(budgets)} max_new_tokens for {len(prompts)} prompts")
    kw = dict(max_seq_len=max_seq_len, eos_ids=eos_ids)
    if prompts:
        for _ in range(warmup):
            for decode in decoders.values():
                decode(prompts[0], max_new_tokens=budgets[0], **kw)
    names = list(decoders)
    round_ = 0
    for ids, budget in zip(prompts, budgets):
        got: dict[str, list[GenerationResult]] = {n: [] for n in names}
        for _ in range(runs):
            for n in names[::-1] if round_ % 2 else names:
                got[n].append(decoders[n](ids, max_new_tokens=budget, **kw))
            round_ += 1
        yield {n: _median_run(got[n]) for n in names}


def _median_run(results: list[GenerationResult]) -> GenerationResult:
    """The run with the median decode time (the upper one of an even count)."""
    return sorted(results, key=lambda r: r.decode_s)[len(results) // 2]


def _calls(r: GenerationResult) -> tuple[int, int]:
    """(decode calls, tokens they emitted); the first new token comes from prefill. An empty
    `tokens_per_call` means one token per call (autoregressive)."""
    calls = len(r.step_times_s)
    return calls, (sum(r.tokens_per_call) if r.tokens_per_call else calls)


def row_stats(results: dict[str, GenerationResult], prompt_tokens: int) -> dict:
    """One prompt's numbers (docs/benchmarks.md, "Per-prompt row")."""
    first = results.get(REFERENCE) or next(iter(results.values()))
    row: dict = {"prompt_tokens": prompt_tokens, "new_tokens": len(first.completion_ids)}
    for name, r in results.items():
        calls, decode_tokens = _calls(r)
        row[name] = {
            "tokens_per_s": round(decode_tokens / r.decode_s, 3) if calls and r.decode_s > 0 else None,
            "prefill_tokens_per_s": round(prompt_tokens / r.prefill_s, 3) if r.prefill_s > 0 else None,
            "new_tokens": len(r.completion_ids),
            "calls": calls,
            "decode_tokens": decode_tokens,
            "ms_per_call": round(1000 * statistics.median(r.step_times_s), 3) if calls else None,
            "tokens_per_call": list(r.tokens_per_call) if r.tokens_per_call else None,
            "speculative_calls": sum(r.speculative_calls) if r.speculative_calls else None,  # spec_step calls among them ('auto' mixes)
        }
        if r.adaptive_events:
            row[name]["adaptive_events"] = list(r.adaptive_events)
    ref = results.get(REFERENCE)
    row["lossless"] = all(r.completion_ids == ref.completion_ids for r in results.values()) if ref is not None else None
    return row


def _decoder_names(row: dict) -> list[str]:
    return [k for k, v in row.items() if isinstance(v, dict) and "calls" in v]


def _timed(row: dict, names: list[str]) -> bool:
    return all(row[n]["calls"] > 0 and row[n]["tokens_per_s"] for n in names)


def summarize(rows: list[dict]) -> dict:
    """Over prompts (docs/benchmarks.md, "Summary"): medians per decoder, speedup as the
    median of per-prompt ratios, tokens per call and its histogram, losslessness."""
    med = statistics.median
    names = _decoder_names(rows[0]) if rows else []
    timed = [r for r in rows if _timed(r, names)]
    judged = [r for r in rows if r["lossless"] is not None]
    out: dict = {
        "prompts": len(rows),
        "timed_prompts": len(timed),
        "lossless": {"identical": sum(r["lossless"] for r in judged), "prompts": len(judged)} if judged else None,
    }
    if len(timed) < len(rows):
        untimed = len(rows) - len(timed)
        out["note"] = (
            f"{untimed} of {len(rows)} prompts made no decode call (every new token came from prefill: max_new_tokens 1, or end of sequence right after prefill); "
            + ("decode numbers are over the other prompts" if timed else "decode speed is unavailable (null)")
        )
    for n in names:
        calls = sum(r[n]["calls"] for r in timed)
        s = {
            "tokens_per_s": round(med(r[n]["tokens_per_s"] for r in timed), 2) if timed else None,
            "prefill_tokens_per_s": _median_or_none([r[n]["prefill_tokens_per_s"] for r in rows], 2),
            "new_tokens": statistics.median_low(r[n]["new_tokens"] for r in rows),
            "calls": calls,
            "ms_per_call": round(med(r[n]["ms_per_call"] for r in timed), 3) if timed else None,
            "tokens_per_call": round(sum(r[n]["decode_tokens"] for r in timed) / calls, 3) if calls else None,
        }
        spec_calls = [r[n]["speculative_calls"] for r in timed if r[n].get("speculative_calls") is not None]
        if spec_calls and calls:
            s["speculative_share"] = round(sum(spec_calls) / calls, 3)
        if n != REFERENCE:
            s["speedup"] = round(med(r[n]["tokens_per_s"] / r[REFERENCE]["tokens_per_s"] for r in timed), 3) if timed and REFERENCE in names else None
            hist: dict[int, int] = {}
            for r in timed:
                for t in r[n]["tokens_per_call"] or ():
                    hist[t] = hist.get(t, 0) + 1
            s["tokens_per_call_histogram"] = dict(sorted(hist.items()))
        out[n] = s
    return out


def first_divergence(reference: Sequence[int], other: Sequence[int]) -> int:
    """Index of the first token where `other` leaves `reference` (the shorter length when one
    is a prefix of the other)."""
    return next((k for k, (x, y) in enumerate(zip(reference, other)) if x != y), min(len(reference), len(other)))


def top2_margin(runner, ids: list[int]) -> float:
    """Top-1 minus top-2 logit of the program's autoregressive prediction after `ids`: how
    near a tie the reference's choice was where another decoding left it."""
    import torch

    top = runner.forward(torch.tensor([ids]), 0).topk(2).values
    return float(top[0] - top[1])


def _median_or_none(xs: list, ndigits: int) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), ndigits) if xs else None
