"""One task example of a validation suite (what suites produce and metrics score)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Example:
    id: str
    suite: str
    prompt: str  # the user message (the chat template is applied by the runner)
    reference: str
    metric: str
    max_new_tokens: int
    extra: dict = field(default_factory=dict, compare=False)
    source: str = ""  # the source item (package, question id, generated question): what split exclusion compares
