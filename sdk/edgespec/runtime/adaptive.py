"""Speculate only while it pays: the decode loop's choice, call by call, between a speculative
step and one autoregressive token, from what both cost on this device now.

A speculative step emits `t` tokens (accepted drafts plus the bonus token) in `s` seconds; an
autoregressive call emits one in `a`. Speculation pays by the factor

    gain = t * a / s

measured over the last `window` speculative steps (mean tokens, median seconds) and the last
autoregressive calls (median seconds). Steps are judged in two classes, because what they
emit differs by far: steps whose draft starts with a suffix match of the context (prompt
lookup: free to find before the call, often accepted whole) and steps that verify the
drafter's own draft alone. Each class has its own measurements and back-off; an
autoregressive call's time is the same for both. `generate` asks `speculate(matched)` before
each call and reports the call with `record`:

- No autoregressive time known yet: the first `ar_probe` calls are autoregressive (never
  slower than autoregressive decoding).
- A try: after `window` of a class's steps, a gain below `min_gain` (1.05: speculation that
  does not pay clearly is not worth its variance) makes that class's calls autoregressive for
  `backoff` calls; a clear loss (below 0.8 `min_gain`) does so after half a window, so a try
  where speculation does not pay costs a few steps. Where even a step that accepts every draft
  (`max_tokens`: the tree's depth plus the bonus token) would not pay, the fall-back comes
  after the first step: its cost alone decides. A try that pays resets the back-off.
- Then the class keeps speculating while the gain over its last `4 window` steps (the try's
  included) stays at `min_gain` or above: a longer window, so a few poor steps (tokens per
  step vary from 1 to the whole tree) do not end a streak that pays.
- After a back-off the class tries again (a step right after autoregressive calls verifies a
  stale drafter draft: its tokens are not counted). Each failed try doubles the back-off (up
  to `max_backoff`): where the text becomes predictable again (a list, code, a repeated
  passage), speculation comes back.

The decision uses wall-clock times, so with sampling (temperature > 0) which calls speculate
depends on the machine's load: the output is distributed as autoregressive sampling either
way, but a seed no longer fixes it exactly (`--mode spec` does). Greedy output is the same
token for token whatever is chosen. One policy per loaded program: its times carry over from
one generation to the next, and so does a class's streak that paid (the next prompt goes on
speculating, no try to pay for); a back-off does not: each prompt is tried afresh, for a
prompt of another kind may be one where drafting pays. `knowledge` / `learn` carry the
measurements to a later process (edgespec.runtime.session keeps them beside the kernel plan).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

CLASSES = {True: "steps after a suffix match", False: "drafter steps"}
CLEAR_LOSS = 0.8  # a gain below this share of min_gain after half a window ends the try early
LONG = 4  # windows a streak that paid is judged over


@dataclass
class _Track:
    """One class of steps: its recent steps, and its back-off."""

    window: int
    backoff: int
    step_s: deque = field(default_factory=deque)  # seconds of the last steps (stale ones too)
    tokens: deque = field(default_factory=deque)  # tokens of the last counted steps
    ar_left: int = 0  # autoregressive calls before the next try
    paid: int = 0  # counted steps of this try so far

    def __post_init__(self) -> None:
        self.step_s = deque(maxlen=LONG * self.window)
        self.tokens = deque(maxlen=LONG * self.window)


@dataclass
class AdaptiveSpeculation:
    """The speculate-or-not state of one loaded program (module docstring)."""

    min_gain: float = 1.05
    window: int = 8
    ar_probe: int = 3
    first_backoff: int = 16
    max_backoff: int = 512
    _ar_s: deque = field(default_factory=lambda: deque(maxlen=16), repr=False)
    _tracks: dict = field(default_factory=dict, repr=False)  # matched (bool) -> _Track
    _max_tokens: int = field(default=0, repr=False)  # tokens a step emits at most (0: unknown)
    _stale: bool = field(default=True, repr=False)  # the drafter's draft predates autoregressive calls
    events: list[str] = field(default_factory=list, repr=False)  # each switch, with its reason

    def __post_init__(self) -> None:
        if not (self.min_gain > 0 and self.window >= 1 and self.ar_probe >= 1 and 1 <= self.first_backoff <= self.max_backoff):
            raise ValueError("AdaptiveSpeculation needs min_gain > 0, window >= 1, ar_probe >= 1 and 1 <= first_backoff <= max_backoff")
        self._tracks = {m: _Track(self.window, self.first_backoff) for m in CLASSES}

    def start(self, max_tokens: int = 0) -> None:
        """A new generation, whose steps emit at most `max_tokens` (0: unknown): the draft is
        stale; the times are kept, and a class that was backing off tries again from the first
        back-off (a class whose steps paid goes on with its measurements)."""
        self._stale = True
        self._max_tokens = max_tokens
        self.events = []
        for track in self._tracks.values():
            if track.ar_left > 0 or track.backoff != self.first_backoff:
                track.ar_left, track.backoff, track.paid = 0, self.first_backoff, 0
                track.step_s.clear()
                track.tokens.clear()

    def knowledge(self) -> dict:
        """What this policy measured on this device, as JSON-able data (`learn` takes it):
        autoregressive seconds, and per class its steps' seconds and tokens."""
        return {
            "ar_s": list(self._ar_s),
            "classes": {CLASSES[m]: {"step_s": list(t.step_s), "tokens": list(t.tokens)} for m, t in self._tracks.items()},
        }

    def learn(self, knowledge: dict) -> None:
        """Start from another process's measurements of the same program on this device
        (`knowledge`): no autoregressive probe, and each class judged from them at once."""
        self._ar_s.extend(float(x) for x in knowledge["ar_s"])
        for m, name in CLASSES.items():
            known = knowledge["classes"].get(name, {})
            self._tracks[m].step_s.extend(float(x) for x in known.get("step_s", ()))
            self._tracks[m].tokens.extend(float(x) for x in known.get("tokens", ()))

    def speculate(self, matched: bool = False) -> bool:
        """Whether the next call is a speculative step; `matched`: its draft would start with a
        suffix match of the context."""
        return len(self._ar_s) >= self.ar_probe and self._tracks[matched].ar_left == 0

    def record(self, speculative: bool, seconds: float, tokens: int, matched: bool = False) -> None:
        """One decode call: its kind, wall time, tokens emitted, and whether a suffix match was
        there to draft from (as asked of `speculate`)."""
        track = self._tracks[matched]
        if not speculative:
            self._ar_s.append(seconds)
            self._stale = True
            if track.ar_left > 0:
                track.ar_left -= 1
                if track.ar_left == 0:  # a new try measures itself
                    track.step_s.clear()
                    track.tokens.clear()
                    track.paid = 0
            return
        track.step_s.append(seconds)
        counted = matched or not self._stale  # a stale drafter draft predates the autoregressive calls: its cost counts, its tokens not
        self._stale = False
        if counted:
            track.tokens.append(tokens)
            track.paid += 1
        ratio = self._cost_ratio(track)
        if self._max_tokens and self._max_tokens * ratio < self.min_gain:
            return self._fall_back(matched, f"a step costs {1 / ratio:.2f}x an autoregressive call, more than the {self._max_tokens} tokens it can emit")
        n = len(track.tokens)
        if n < max(1, self.window // 2) or (n < self.window and self.gain(matched) >= CLEAR_LOSS * self.min_gain):
            return
        if self.gain(matched) < self.min_gain:
            self._fall_back(matched, self.explain(matched))
        elif track.paid == self.window and track.backoff != self.first_backoff:  # a try that pays
            track.backoff = self.first_backoff
            self.events.append(f"speculating ({CLASSES[matched]}): {self.explain(matched)}")

    def _fall_back(self, matched: bool, why: str) -> None:
        track = self._tracks[matched]
        track.ar_left = track.backoff
        self.events.append(f"autoregressive for {track.backoff} calls ({CLASSES[matched]}): {why}")
        track.backoff = min(2 * track.backoff, self.max_backoff)

    def _cost_ratio(self, track: _Track) -> float:
        """Median autoregressive seconds over median step seconds."""
        step_s = statistics.median(track.step_s)
        return statistics.median(self._ar_s) / step_s if step_s > 0 else float("inf")

    def gain(self, matched: bool = False) -> float | None:
        """tokens per step x autoregressive seconds / step seconds over the class's window, or
        None before both are measured."""
        track = self._tracks[matched]
        if not self._ar_s or not track.tokens:
            return None
        return statistics.fmean(track.tokens) * self._cost_ratio(track)

    def explain(self, matched: bool = False) -> str:
        """What the class's last measurements say, in words."""
        g = self.gain(matched)
        if g is None:
            return "not measured yet"
        track = self._tracks[matched]
        return f"{statistics.fmean(track.tokens):.2f} tokens per step at {1 / self._cost_ratio(track):.2f}x an autoregressive call's time = {g:.2f}x"
