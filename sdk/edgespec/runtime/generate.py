"""Autoregressive decoding over any `step(tokens [1, T], start_pos) -> logits [V]` function.

The same loop drives the `.pte` (ProgramRunner.forward) and the eager model, so the two
are compared on equal terms. Timing is returned as stats, never printed here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from edgespec.errors import EdgespecError
from edgespec.runtime.sampling import sample

StepFn = Callable[[torch.Tensor, int], torch.Tensor]


@dataclass
class GenerationResult:
    prompt_ids: list[int]
    completion_ids: list[int]
    stopped_by_eos: bool
    prefill_s: float
    decode_s: float
    step_times_s: list[float] = field(default_factory=list)

    @property
    def prefill_tokens_per_s(self) -> float:
        return len(self.prompt_ids) / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        # the first completion token comes from prefill; the rest from decode calls
        n = len(self.step_times_s)
        return n / self.decode_s if self.decode_s > 0 else 0.0


def generate(
    step: StepFn,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    max_seq_len: int,
    eos_ids: tuple[int, ...],
    temperature: float = 0.0,
    seed: int = 0,
    on_token: Callable[[int], None] | None = None,
) -> GenerationResult:
    """Prefill the whole prompt in one call, then decode one token per call."""
    if not prompt_ids:
        raise EdgespecError("the prompt is empty")
    if len(prompt_ids) >= max_seq_len:
        raise EdgespecError(
            f"the prompt has {len(prompt_ids)} tokens but the program's context is {max_seq_len}; shorten the prompt or export with a larger model.max_seq_len"
        )
    max_new_tokens = min(max_new_tokens, max_seq_len - len(prompt_ids))
    gen = torch.Generator().manual_seed(seed)

    t0 = time.perf_counter()
    logits = step(torch.tensor([prompt_ids], dtype=torch.long), 0)
    prefill_s = time.perf_counter() - t0

    out: list[int] = []
    steps: list[float] = []
    pos = len(prompt_ids)
    stopped = False
    t_dec = time.perf_counter()
    while True:
        tok = sample(logits, temperature, gen)
        if tok in eos_ids:
            stopped = True
            break
        out.append(tok)
        if on_token:
            on_token(tok)
        if len(out) >= max_new_tokens or pos >= max_seq_len:
            break
        t = time.perf_counter()
        logits = step(torch.tensor([[tok]], dtype=torch.long), pos)
        steps.append(time.perf_counter() - t)
        pos += 1
    return GenerationResult(prompt_ids, out, stopped, prefill_s, time.perf_counter() - t_dec, steps)


def eager_step(model: torch.nn.Module) -> StepFn:
    """A StepFn over an eager `Transformer` (same contract as the program's forward)."""

    @torch.no_grad()
    def step(tokens: torch.Tensor, start_pos: int) -> torch.Tensor:
        return model(tokens, torch.tensor([start_pos], dtype=torch.long))[0]

    return step
