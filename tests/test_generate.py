"""The decode loop's logic, driven by a scripted step function (no model)."""

import pytest
import torch

from edgespec.errors import EdgespecError
from edgespec.runtime.generate import generate
from edgespec.runtime.sampling import sample

V = 10


def scripted(next_tokens):
    """A step function whose argmax after each call follows `next_tokens`; records calls."""
    calls = []

    def step(tokens, start_pos):
        calls.append((tokens.tolist()[0], start_pos))
        logits = torch.zeros(V)
        logits[next_tokens[len(calls) - 1]] = 1.0
        return logits

    return step, calls


def test_prefill_in_one_call_then_one_token_per_call():
    step, calls = scripted([4, 5, 6, 7])
    res = generate(step, [1, 2, 3], max_new_tokens=4, max_seq_len=32, eos_ids=(9,))
    assert res.completion_ids == [4, 5, 6, 7]
    assert calls == [([1, 2, 3], 0), ([4], 3), ([5], 4), ([6], 5)]
    assert not res.stopped_by_eos


def test_stops_at_eos_without_emitting_it():
    step, calls = scripted([4, 9, 6])
    seen = []
    res = generate(step, [1], max_new_tokens=10, max_seq_len=32, eos_ids=(9,), on_token=seen.append)
    assert res.completion_ids == [4] == seen and res.stopped_by_eos


def test_context_limit_caps_new_tokens():
    step, _ = scripted(list(range(1, 9)) * 4)
    res = generate(step, [1, 2, 3, 4, 5, 6], max_new_tokens=100, max_seq_len=8, eos_ids=())
    assert len(res.prompt_ids) + len(res.completion_ids) == 8


@pytest.mark.parametrize("prompt, match", [([], "empty"), (list(range(8)), "8 tokens but the program's context is 8")])
def test_bad_prompts(prompt, match):
    step, _ = scripted([1])
    with pytest.raises(EdgespecError, match=match):
        generate(step, prompt, max_new_tokens=4, max_seq_len=8, eos_ids=())


def test_sampling_is_seeded_and_greedy_at_zero():
    logits = torch.tensor([0.0, 2.0, 1.0])
    assert sample(logits, 0.0) == 1
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a = [sample(logits, 1.0, g1) for _ in range(20)]
    b = [sample(logits, 1.0, g2) for _ in range(20)]
    assert a == b and len(set(a)) > 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_greedy_is_torch_argmax_ties_and_nan_included(dtype):
    """The greedy pick (numpy's argmax where the dtype allows) is torch.argmax's: the first of
    tied maxima, and a NaN wins."""
    from edgespec.runtime.sampling import greedy

    g = torch.Generator().manual_seed(0)
    cases = [torch.randn(49152, generator=g), torch.tensor([1.0, 3.0, 3.0, 2.0]), torch.tensor([1.0, float("nan"), 5.0, float("nan")])]
    cases.append(torch.full((7,), -float("inf")))
    for logits in cases:
        x = logits.to(dtype)
        assert greedy(x) == int(torch.argmax(x))
