"""Answer likelihood: how much less likely a program finds each suite prompt's reference answer
than the fp32 source model does. A paired, continuous measure per prompt where the suites'
task scores (often 0 or 1, and 0 for both models on a 135M model's hard suites) carry too
little signal for a gate to fail.

Per prompt: the reference answer's tokens (`Example.reference`, at most MAX_ANSWER_TOKENS)
after the prompt's ids (chat template included, as the program is prompted), teacher-forced.
The program: the prompt in one `forward` call, then one answer token per call (the decode
path), as `harness.fidelity` does; the source model: one eager pass over prompt + answer.
nll = mean over the answer's tokens of -log p(token | everything before), nats; the per-prompt
increase is nll_program - nll_source.

The gate (`max_answer_nll_increase`) fails when the mean increase is above its bar and a
one-sided sign-flip test of the per-prompt increases minus the bar gives p < 0.05, so noise
in a few prompts fails nothing; `detectable_increase` states the power: the smallest mean
increase the test would find at this size with the observed spread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from edgespec.harness.fidelity import eager_logits, teacher_forced_logits
from edgespec.harness.score_noise import sign_flip_p_below

MAX_ANSWER_TOKENS = 48  # bounds a prompt's decode calls; the answers' first tokens carry most of the signal
ALPHA = 0.05


def answer_tokens(tokenizer, reference: str) -> list[int]:
    """A reference answer's ids as a continuation of the prompt (no BOS), capped."""
    return tokenizer.encode_continuation(reference)[:MAX_ANSWER_TOKENS]


def program_nll(forward: Callable[[torch.Tensor, int], torch.Tensor], prompt: Sequence[int], answer: Sequence[int]) -> float:
    """Mean NLL (nats per token) of `answer` after `prompt` under a program's
    `forward(tokens [1, T], start_pos) -> logits [V]`, teacher-forced."""
    return _mean_nll(teacher_forced_logits(forward, [*prompt, *answer], len(prompt)), answer)


def reference_nll(model, prompt: Sequence[int], answer: Sequence[int]) -> float:
    """Mean NLL of `answer` after `prompt` under an eager `Transformer` (one pass)."""
    return _mean_nll(eager_logits(model, [*prompt, *answer], len(prompt)), answer)


def _mean_nll(logits: torch.Tensor, answer: Sequence[int]) -> float:
    lp = logits.double().log_softmax(-1)
    return float(-lp.gather(-1, torch.tensor(list(answer))[:, None]).mean())


def increase_p_value(increases: Sequence[float], bar: float, flips: int = 20000, seed: int = 0) -> float:
    """One-sided p-value that the mean per-prompt increase is above `bar` (paired sign-flip test
    of increase - bar; fixed seed). 1.0 when the mean is not above the bar at all."""
    return sign_flip_p_below(bar - np.asarray(increases, float), flips, seed)


def detectable_increase(increases: Sequence[float], bar: float, alpha: float = ALPHA) -> float | None:
    """The smallest mean increase the test finds above `bar` at this size: the observed
    per-prompt spread around its mean, shifted until p < alpha (bisection). None with fewer
    than 5 prompts (2^-4 > alpha: a sign-flip test cannot reach it)."""
    x = np.asarray(increases, float)
    if len(x) < 5:
        return None
    spread = x - x.mean()
    lo, hi = 0.0, max(1e-6, 4 * float(np.abs(spread).max()) + 1e-6)
    while increase_p_value(bar + spread + hi, bar) >= alpha:
        hi *= 2
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if increase_p_value(bar + spread + mid, bar) >= alpha else (lo, mid)
    return bar + hi
