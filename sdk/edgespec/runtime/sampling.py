"""Token selection from logits: greedy at temperature 0, else softmax sampling."""

from __future__ import annotations

import torch


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None) -> int:
    """logits: [V] -> token id."""
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))
