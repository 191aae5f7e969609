"""The suffix matcher against a brute-force search, on random and repetitive sequences."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgespec.speculative.suffix import SuffixMatcher


def _brute(text, length):
    """Longest suffix (shorter than the text) that also ends earlier; what followed its first earlier occurrence."""
    for n in range(len(text) - 1, 0, -1):
        tail = text[-n:]
        ends = [e for e in range(n - 1, len(text) - 1) if text[e - n + 1 : e + 1] == tail]
        if ends:
            return text[ends[0] + 1 : ends[0] + 1 + length], n
    return [], 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60))
def test_matches_brute_force_after_every_token(tokens):
    m = SuffixMatcher()
    for i, t in enumerate(tokens):
        m.extend(t)
        assert m.draft(4) == _brute(tokens[: i + 1], 4), (tokens[: i + 1], m.draft(4))


@pytest.mark.parametrize("alphabet", [2, 5, 50])
def test_long_random_sequences(alphabet):
    rng = random.Random(alphabet)
    tokens = [rng.randrange(alphabet) for _ in range(400)]
    m = SuffixMatcher(tokens[:200])
    for i in range(200, 400):
        m.extend(tokens[i])
        if i % 20 == 0:
            assert m.draft(3) == _brute(tokens[: i + 1], 3)


def test_copies_a_span_of_the_prompt():
    prompt = [7, 1, 2, 3, 4, 5, 9, 8]
    m = SuffixMatcher(prompt + [1, 2])
    assert m.draft(3) == ([3, 4, 5], 2)
    assert m.draft(3, min_match=3) == ([], 2)
    assert SuffixMatcher([1, 2, 3]).draft(3) == ([], 0)
