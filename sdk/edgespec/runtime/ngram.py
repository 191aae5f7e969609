"""Repeated n-gram blocking (FastSeq's incremental form).

A token is banned when appending it would repeat an n-gram already in the context. Each step
compares only the context's last n-1 tokens against every earlier (n-1)-window, vectorized,
and bans the token that followed each match: O(L) tensor work per step, no n-gram dictionary
rebuilt or kept. `banned_naive` is the dictionary form (fairseq's) kept as the reference.
"""

from __future__ import annotations

import torch


def banned_tokens(context: torch.Tensor, n: int) -> torch.Tensor:
    """Ids that would complete a repeated n-gram after `context` (int64 [L]); may repeat."""
    L = context.numel()
    if n < 1 or L < n - 1 or (n > 1 and L < n):
        return context.new_empty(0)
    if n == 1:
        return context  # every seen token
    key = context[L - n + 1 :]  # [n-1] the last n-1 tokens
    windows = context[: L - 1].unfold(0, n - 1, 1)  # [L-n+1, n-1] windows that have a successor
    hits = (windows == key).all(1)  # [L-n+1]
    return context[n - 1 :][hits]


def banned_naive(context: list[int], n: int) -> set[int]:
    """The same bans from a dictionary of every (n-1)-gram -> following tokens, rebuilt from the
    whole context (the straightforward algorithm the incremental one replaces)."""
    if n < 1 or len(context) < n:
        return set(context) if n == 1 else set()
    table: dict[tuple[int, ...], set[int]] = {}
    for i in range(len(context) - n + 1):
        table.setdefault(tuple(context[i : i + n - 1]), set()).add(context[i + n - 1])
    return table.get(tuple(context[len(context) - n + 1 :]), set())


def block_(logits: torch.Tensor, context: torch.Tensor, n: int) -> torch.Tensor:
    """Set the logits [V] of banned tokens to -inf, in place; returns logits."""
    if n > 0:
        ban = banned_tokens(context, n)
        if ban.numel():
            logits[ban] = float("-inf")
    return logits


def is_banned(context: list[int], token: int, n: int) -> bool:
    """Whether appending `token` to `context` repeats an n-gram."""
    if n <= 0:
        return False
    return bool((banned_tokens(torch.tensor(context, dtype=torch.long), n) == token).any())
