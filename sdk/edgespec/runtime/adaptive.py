"""Speculate only while it pays: the decode loop's choice, call by call, between a speculative
step and one autoregressive token, from what both cost on this device now.

A speculative step emits `t` tokens (accepted drafts plus the bonus token) in `s` seconds; an
autoregressive call emits one in `a`. Speculation pays by the factor

    gain = t * a / s

measured over the last `window` speculative calls (mean tokens per call, median seconds) and
the last autoregressive calls (median seconds). `generate` asks `speculate()` before each
call and reports each call with `record`:

- No autoregressive time known yet: the first `ar_probe` calls are autoregressive (they are
  never slower than autoregressive decoding).
- Speculating: once `window` steps are known, a gain below `min_gain` (1.05: speculation that
  does not pay clearly is not worth its variance) falls back to autoregressive decoding for
  `backoff` calls. Where even a step that accepts every draft (`max_tokens`: the tree's depth
  plus the bonus token) would not pay, the fall-back comes after the first step: its cost alone
  decides.
- After the back-off, speculation is tried again (`window` steps; the first step after
  autoregressive calls verifies a stale draft and is not counted). Each failed try doubles
  the back-off (up to `max_backoff`), a try that pays resets it: where the text becomes
  predictable again (a list, code, a repeated passage), speculation comes back.

The decision uses wall-clock times, so with sampling (temperature > 0) which calls speculate
depends on the machine's load: the output is distributed as autoregressive sampling either
way, but a seed no longer fixes it exactly (`--mode spec` does). Greedy output is the same
token for token whatever is chosen. One policy per loaded program: its times carry over from
one generation to the next.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field


@dataclass
class AdaptiveSpeculation:
    """The speculate-or-not state of one loaded program (module docstring)."""

    min_gain: float = 1.05
    window: int = 8
    ar_probe: int = 3
    first_backoff: int = 16
    max_backoff: int = 512
    _ar_s: deque = field(default_factory=lambda: deque(maxlen=16), repr=False)
    _step_s: deque = field(default_factory=deque, repr=False)  # seconds of the last steps (stale ones too)
    _tokens: deque = field(default_factory=deque, repr=False)  # tokens of the last counted steps
    _max_tokens: int = field(default=0, repr=False)  # tokens a step emits at most (0: unknown)
    _backoff: int = field(default=0, repr=False)
    _ar_left: int = field(default=0, repr=False)  # autoregressive calls before the next try
    _stale: bool = field(default=True, repr=False)  # the next step verifies a draft made before autoregressive calls
    events: list[str] = field(default_factory=list, repr=False)  # each switch, with its reason

    def __post_init__(self) -> None:
        if not (self.min_gain > 0 and self.window >= 1 and self.ar_probe >= 1 and 1 <= self.first_backoff <= self.max_backoff):
            raise ValueError("AdaptiveSpeculation needs min_gain > 0, window >= 1, ar_probe >= 1 and 1 <= first_backoff <= max_backoff")
        self._step_s = deque(maxlen=self.window)
        self._tokens = deque(maxlen=self.window)
        self._backoff = self.first_backoff

    def start(self, max_tokens: int = 0) -> None:
        """A new generation, whose steps emit at most `max_tokens` (0: unknown): the draft is
        stale (the times are kept)."""
        self._stale = True
        self._max_tokens = max_tokens
        self.events = []

    def speculate(self) -> bool:
        """Whether the next call is a speculative step."""
        return len(self._ar_s) >= self.ar_probe and self._ar_left == 0

    def record(self, speculative: bool, seconds: float, tokens: int) -> None:
        """One decode call's kind, wall time and tokens emitted."""
        if not speculative:
            self._ar_s.append(seconds)
            self._stale = True
            if self._ar_left > 0:
                self._ar_left -= 1
                if self._ar_left == 0:  # a new try measures itself
                    self._step_s.clear()
                    self._tokens.clear()
            return
        self._step_s.append(seconds)
        if self._stale:  # its draft predates the autoregressive calls: its cost counts, its tokens not
            self._stale = False
        else:
            self._tokens.append(tokens)
        ceiling = self._max_tokens * self._cost_ratio() if self._max_tokens else None
        if ceiling is not None and ceiling < self.min_gain:
            return self._fall_back(f"a step costs {1 / self._cost_ratio():.2f}x an autoregressive call, more than the {self._max_tokens} tokens it can emit")
        if len(self._tokens) < self.window:
            return
        if self.gain() < self.min_gain:
            self._fall_back(self.explain())
        elif self._backoff != self.first_backoff:
            self._backoff = self.first_backoff
            self.events.append(f"speculating: {self.explain()}")

    def _fall_back(self, why: str) -> None:
        self._ar_left = self._backoff
        self.events.append(f"autoregressive for {self._backoff} calls: {why}")
        self._backoff = min(2 * self._backoff, self.max_backoff)

    def _cost_ratio(self) -> float:
        """Median autoregressive seconds over median step seconds."""
        step_s = statistics.median(self._step_s)
        return statistics.median(self._ar_s) / step_s if step_s > 0 else float("inf")

    def gain(self) -> float | None:
        """tokens per step x autoregressive seconds / step seconds over the window, or None
        before both are measured."""
        if not self._ar_s or not self._tokens:
            return None
        return statistics.fmean(self._tokens) * self._cost_ratio()

    def explain(self) -> str:
        """What the last measurements say, in words."""
        g = self.gain()
        if g is None:
            return "not measured yet"
        return f"{statistics.fmean(self._tokens):.2f} tokens per step at {1 / self._cost_ratio():.2f}x an autoregressive call's time = {g:.2f}x"
