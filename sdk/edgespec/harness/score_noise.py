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
    d = w * (np.asarray(scores, float) - ratio * np.asarray(reference_scores, float))
    observed = d.sum()
    if observed >= 0:
        return 1.0
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(flips, len(d)))
    return float((1 + np.count_nonzero(signs @ d <= observed + 1e-12)) / (1 + flips))
