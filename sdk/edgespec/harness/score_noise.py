"""How far the task-score ratio could be from what a few dozen prompts measured.

The suites score a program and the fp32 model on the same prompts (paired), a handful per
suite, often 0/1 per prompt (retrieval QA answers, SQL results): one prompt flipping moves a
suite's mean by 1/8. The overall ratio (mean over suites of the program's mean score, over
the same for the fp32 model) therefore carries noise of the order of its distance from 1.
`score_ratio_upper_bound` resamples the prompts of each suite with replacement (a paired,
stratified bootstrap: a prompt keeps both its scores) and returns the ratio's one-sided upper
confidence bound: the min_score_ratio gate fails a program when even that is below the bar,
i.e. when the prompts show it worse beyond their own noise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def score_ratio_upper_bound(
    suites: Sequence[str], scores: Sequence[float], reference_scores: Sequence[float], confidence: float = 0.95, resamples: int = 4000, seed: int = 0
) -> float | None:
    """One-sided `confidence` upper bound of mean_suites(score) / mean_suites(reference) over
    prompts resampled within their suite (fixed seed: the same report gives the same bound).
    None when no resample has a positive reference score."""
    names = list(dict.fromkeys(suites))
    rng = np.random.default_rng(seed)
    s, r = np.asarray(scores, float), np.asarray(reference_scores, float)
    prog, ref = np.zeros(resamples), np.zeros(resamples)
    for name in names:
        idx = np.flatnonzero(np.asarray(suites) == name)
        pick = idx[rng.integers(0, len(idx), (resamples, len(idx)))]  # [resamples, prompts of the suite]
        prog += s[pick].mean(1) / len(names)
        ref += r[pick].mean(1) / len(names)
    ok = ref > 0
    if not ok.any():
        return None
    return float(np.quantile(prog[ok] / ref[ok], confidence))
