"""Whether a program's task scores are below a fraction of the fp32 model's beyond the noise of
the few prompts that measured them.

The suites score a program and the fp32 model on the same prompts (paired), a handful per
suite, often 0 or 1 per prompt (retrieval answers, SQL results): one prompt flipping moves a
suite's mean by 1/8, and the overall ratio (mean over suites of the program's mean score over
the same for the fp32 model) carries noise of the order of its distance from 1.

`shortfall_p_value` tests it with a paired sign-flip (randomization) test: with per-prompt
differences d_i = score_i - ratio * reference_i, each weighted 1 / (suites x prompts of its
suite) as in the overall mean, the observed weighted sum is compared with the sums the same
differences give under random signs (what they would look like if the program were, on
average, exactly `ratio` x the fp32 model). A small p-value: the prompts show the program
below the bar beyond their own noise; the min_score_ratio gate fails only then.

`detectable_ratio` states the test's power at the suites' size: the highest score ratio at
which it finds a program below the bar when the program loses the fp32 model's best-weighted
answers first (the most concentrated loss, the easiest to detect; a loss spread over many
prompts needs a lower ratio). With k prompts on which the fp32 model scored, the smallest
p-value a sign-flip test can give is about 2^-k: with few of them the gate cannot fail at
all, and it then says so instead of passing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def shortfall_p_value(
    suites: Sequence[str], scores: Sequence[float], reference_scores: Sequence[float], ratio: float, flips: int = 20000, seed: int = 0
) -> float:
    """One-sided p-value that mean_suites(score) < ratio x mean_suites(reference) (fixed seed:
    the same report gives the same value). 1.0 when the program is not below the bar at all."""
    names = np.asarray(suites)
    counts = {n: int((names == n).sum()) for n in dict.fromkeys(suites)}
    w = np.array([1.0 / (len(counts) * counts[n]) for n in suites])
    return sign_flip_p_below(w * (np.asarray(scores, float) - ratio * np.asarray(reference_scores, float)), flips, seed)


def sign_flip_p_below(d: np.ndarray, flips: int = 20000, seed: int = 0) -> float:
    """The paired sign-flip (randomization) test of both gates: the one-sided p-value that the
    per-prompt differences d sum this far below 0 when each one's sign is random (fixed seed:
    the same differences give the same value). 1.0 when their sum is not below 0."""
    observed = d.sum()
    if observed >= 0:
        return 1.0
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(flips, len(d)))
    return float((1 + np.count_nonzero(signs @ d <= observed + 1e-12)) / (1 + flips))


def detectable_ratio(suites: Sequence[str], reference_scores: Sequence[float], ratio: float, alpha: float = 0.05) -> float | None:
    """The highest overall score ratio (mean over suites of the program's, over the fp32
    model's) at which the shortfall test finds a program below `ratio` at p < alpha, the
    program scoring as the fp32 model but 0 on its best-weighted prompts (zeroed one at a time,
    most weight first). None: not even a program scoring 0 everywhere is found below the bar."""
    names = np.asarray(suites)
    counts = {n: int((names == n).sum()) for n in dict.fromkeys(suites)}
    ref = np.asarray(reference_scores, float)
    weighted = ref * np.array([1.0 / (len(counts) * counts[n]) for n in suites])
    total = weighted.sum()
    if total <= 0:
        return None
    program = ref.copy()
    for i in np.argsort(-weighted, kind="stable"):
        if weighted[i] <= 0:
            break
        program[i] = 0.0
        if shortfall_p_value(suites, program, ref, ratio) < alpha:
            return float(1.0 - weighted[program == 0].sum() / total)
    return None
