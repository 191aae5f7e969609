"""bench/head_screen.py's bound: on random Q8_0 heads the screened rows always hold the full
head's argmax, and keeping all eight bits leaves the argmax alone."""

import importlib.util
from pathlib import Path

import torch

from edgespec.models.blocks import BlockWeights

_spec = importlib.util.spec_from_file_location("head_screen", Path(__file__).parents[1] / "bench" / "head_screen.py")
head_screen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(head_screen)


def test_the_screen_keeps_the_argmax_and_eight_bits_keep_only_it():
    g = torch.Generator().manual_seed(0)
    V, n = 3000, 128
    codes = torch.randint(-127, 128, (V, n), generator=g).to(torch.int8)
    scales = torch.rand(V, n // 32, generator=g).half().float() * 0.01 + 1e-3
    head = BlockWeights("Q8_0", 8, codes, scales)
    h = torch.randn(12, n, generator=g) * 3
    h[:, :4] *= 20  # a few large inputs, as final hidden states have
    out = head_screen.screen_counts(h, head, [3, 5, 8])  # asserts the argmax is among the rows left
    assert out["8"]["rows_left_max"] == 1 and out["8"]["rows_left_median"] == 1
    assert out["3"]["rows_left_median"] >= out["5"]["rows_left_median"] >= 1
    assert out["5"]["screen_mb"] < out["8"]["screen_mb"] < out["8"]["full_head_mb"] + 1e-9
