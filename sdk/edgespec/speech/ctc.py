"""Greedy CTC decoding of per-frame log-probabilities into phonemes and words."""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLANK, WORD_BOUNDARY = "<blank>", "<wb>"


@dataclass(frozen=True)
class Transcript:
    phonemes: list[str]  # without word boundaries
    words: list[list[str]]  # phonemes grouped by the word-boundary token
    frames: int

    @property
    def phoneme_text(self) -> str:
        """Words as space-separated phonemes joined by ' | ' (the form hama's P2G reads)."""
        return " | ".join(" ".join(w) for w in self.words)


def greedy_ids(log_probs: torch.Tensor, blank_id: int, temperature: float = 1.0, blank_bias: float = 0.0) -> list[int]:
    """Frame argmax of log_probs [T, V] (optionally / temperature, + blank_bias on blank),
    repeats collapsed, blanks removed."""
    scores = log_probs / temperature
    scores[:, blank_id] += blank_bias
    best = scores.argmax(-1).tolist()
    return [t for i, t in enumerate(best) if t != blank_id and (i == 0 or t != best[i - 1])]


def decode(log_probs: torch.Tensor, tokens: list[str], temperature: float = 1.0, blank_bias: float = 0.0) -> Transcript:
    """log_probs [T, V] over `tokens` (which hold `<blank>` and `<wb>`) -> Transcript."""
    ids = greedy_ids(log_probs.float().clone(), tokens.index(BLANK), temperature, blank_bias)
    words: list[list[str]] = [[]]
    for i in ids:
        if tokens[i] == WORD_BOUNDARY:
            words.append([])
        else:
            words[-1].append(tokens[i])
    words = [w for w in words if w]
    return Transcript([p for w in words for p in w], words, int(log_probs.shape[0]))
