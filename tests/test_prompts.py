"""Training and held-out prompt suites: exclusion of validation and held-out items, mixing."""

import hashlib

import pytest

from edgespec.corpus import prompts as P


def _fake_suite(items):
    def build(split, n):
        return [P.Prompt(f"{split}/{i}", "fake", f"text {s}", None, s) for i, s in enumerate(items[:n])]

    return build


def test_training_prompts_drop_excluded_and_repeated_sources_and_texts(monkeypatch):
    monkeypatch.setattr(P, "PROMPT_SOURCES", {"fake": _fake_suite(["a", "b", "a", "c", "d", "b", "e"])})
    monkeypatch.setattr(P, "excluded_keys", lambda: frozenset({"c"}))
    assert [p.source for p in P.suite_prompts("fake", "train", 3)] == ["a", "b", "d"]
    assert [p.source for p in P.suite_prompts("fake", "train", 10)] == ["a", "b", "d", "e"]  # source ran out
    assert [p.source for p in P.suite_prompts("fake", "heldout", 4)] == ["a", "b", "a", "c"]  # only training is filtered
    monkeypatch.setattr(P, "excluded_keys", lambda: frozenset(P._keys("text e", "elsewhere")))  # same text, another source
    assert [p.source for p in P.suite_prompts("fake", "train", 10)] == ["a", "b", "c", "d"]


def test_templated_suite_that_only_repeats_does_not_loop_forever(monkeypatch):
    monkeypatch.setattr(P, "PROMPT_SOURCES", {"fake": lambda split, n: [P.Prompt(str(i), "fake", "same", None, "same") for i in range(n)]})
    monkeypatch.setattr(P, "excluded_keys", lambda: frozenset())
    assert len(P.suite_prompts("fake", "train", 50)) == 1


def test_mix_gives_a_short_suites_share_to_the_others(monkeypatch):
    monkeypatch.setattr(P, "PROMPT_SOURCES", {"few": _fake_suite(list("xy")), "many": _fake_suite([f"m{i}" for i in range(100)])})
    monkeypatch.setattr(P, "excluded_keys", lambda: frozenset())
    mix = P.mixed_prompts("train", 10, ("few", "many"))
    assert len(mix) == 10 and [p.source for p in mix][:4] == ["x", "m0", "y", "m1"]
    assert sum(p.source.startswith("m") for p in mix) == 8


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.slow  # reads apt's Translation files, fanoutqa, Chinook, chitchat-dataset
def test_training_mix_excludes_every_validation_and_heldout_prompt_by_hash():
    from edgespec.corpus.validation_sets import SUITES as TASKS

    train = P.mixed_prompts("train", 6000)
    assert {p.task for p in train} == set(P.PROMPT_SOURCES)  # the six validation task types, code and chat
    validation = [e for t in TASKS.values() for e in t.build(P.VALIDATION_MAX, 0)]
    heldout = [p for build in P.PROMPT_SOURCES.values() for p in build("heldout", P.HELDOUT_MAX)]
    train_text, train_src = {_sha(p.text) for p in train}, {p.source for p in train}
    assert len(train_text) == len(train)
    assert not train_text & {_sha(e.prompt) for e in validation}
    assert not train_text & {_sha(p.text) for p in heldout}
    assert not train_src & ({e.source for e in validation} | {p.source for p in heldout})
    # the hashed collections' held-out slices are disjoint from validation by construction
    hashed = {"summarization", "translation", "qa"}
    assert not {p.source for p in heldout if p.task in hashed} & {e.source for e in validation if e.suite in hashed}


_DIGEST = """
import hashlib
from edgespec.corpus.prompts import PROMPT_SOURCES, suite_prompts
from edgespec.harness.suites import load_suite
from edgespec.config import SUITE_NAMES
h = hashlib.sha256()
for task in PROMPT_SOURCES:
    for split in ("train", "heldout"):
        for p in suite_prompts(task, split, 40):
            h.update(f"{p.id}|{p.text}|{p.reference}".encode())
for name in SUITE_NAMES:
    for ex in load_suite(name, 4):
        h.update(f"{ex.id}|{ex.prompt}|{ex.reference}".encode())
print(h.hexdigest())
"""


def test_prompts_and_suites_do_not_depend_on_the_hash_seed():
    """Every process must see the same prompts (the draft vocabulary, data fingerprints and
    resumed training depend on them): Python's string-hash seed must not change any."""
    import os
    import subprocess
    import sys

    def digest(seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        return subprocess.run([sys.executable, "-c", _DIGEST], env=env, capture_output=True, text=True, check=True).stdout.strip()

    first = digest("1")
    assert len(first) == 64
    assert digest("2") == first
