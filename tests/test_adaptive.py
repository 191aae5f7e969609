"""Speculate only while it pays (edgespec.runtime.adaptive): the policy's decisions from given
call times, and the decode loop under it (greedy output unchanged)."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from edgespec.config import DrafterConfig
from edgespec.runtime.adaptive import AdaptiveSpeculation
from edgespec.runtime.generate import eager_step, generate
from edgespec.speculative.step import EagerSpecMethods, SpecProgram
from edgespec.speculative.streams import StreamParams, StreamsModel
from edgespec.speculative.tree import Tree


def _drive(policy: AdaptiveSpeculation, calls: int, ar_s: float, step_s: float, tokens: int) -> list[bool]:
    """`calls` decode calls under `policy`: an autoregressive call takes ar_s, a step step_s and
    emits `tokens`. Returns which calls speculated."""
    kinds = []
    for _ in range(calls):
        spec = policy.speculate()
        policy.record(spec, step_s if spec else ar_s, tokens if spec else 1)
        kinds.append(spec)
    return kinds


def test_measures_autoregressive_calls_first_then_keeps_speculating_where_it_pays():
    p = AdaptiveSpeculation(window=4, ar_probe=3)
    kinds = _drive(p, 40, ar_s=0.010, step_s=0.015, tokens=2)  # 2 tokens at 1.5x: 1.33x
    assert kinds[:3] == [False] * 3 and all(kinds[3:])
    assert p.gain() == pytest.approx(2 * 0.010 / 0.015) and p.events == []


def test_falls_back_where_it_does_not_pay_and_tries_again_less_often():
    p = AdaptiveSpeculation(window=4, ar_probe=2, first_backoff=8, max_backoff=32)
    kinds = _drive(p, 200, ar_s=0.010, step_s=0.020, tokens=2)  # 2 tokens at 2x: 1.0x < 1.05
    # 2 autoregressive calls, then a try: one uncounted step (stale draft) + a window of 4
    assert kinds[:2] == [False, False] and kinds[2:7] == [True] * 5 and not any(kinds[7:15])
    runs = [len(list(g)) for k, g in itertools.groupby(kinds) if not k]  # the autoregressive stretches
    assert runs[:5] == [2, 8, 16, 32, 32]  # doubling back-off, capped
    assert sum(kinds) / len(kinds) < 0.2 and "1.00x" in p.events[0] and "autoregressive for 8 calls" in p.events[0]


def test_comes_back_when_speculation_pays_again():
    p = AdaptiveSpeculation(window=4, ar_probe=1, first_backoff=4)
    _drive(p, 30, ar_s=0.010, step_s=0.020, tokens=1)  # never pays: backing off
    assert p._tracks[False].backoff > p.first_backoff
    kinds = _drive(p, 80, ar_s=0.010, step_s=0.020, tokens=4)  # the text became predictable: 2x
    assert all(kinds[-30:]) and p._tracks[False].backoff == p.first_backoff and p.events[-1].startswith("speculating")


def test_steps_after_a_suffix_match_are_judged_apart_from_the_drafters_own():
    p = AdaptiveSpeculation(window=4, ar_probe=1, first_backoff=16)
    p.start(max_tokens=4)
    kinds = []
    for call in range(200):
        matched = call % 5 == 0  # every fifth call has a suffix match to draft from
        spec = p.speculate(matched)
        # the drafter alone: 1.5 tokens at 2x (0.75x); after a match: 4 tokens at 2x (2x)
        p.record(spec, 0.020 if spec else 0.010, (4 if matched else 1.5) if spec else 1, matched)
        kinds.append((matched, spec))
    late = kinds[100:]
    assert all(spec for matched, spec in late if matched)  # matched steps keep speculating
    assert sum(spec for matched, spec in late if not matched) <= 6  # the drafter's mostly not: one try of 5 steps at most
    assert any("drafter steps" in e for e in p.events) and not any("suffix match" in e for e in p.events)


def test_rejects_nonsense_settings():
    with pytest.raises(ValueError):
        AdaptiveSpeculation(first_backoff=64, max_backoff=16)
    with pytest.raises(ValueError):
        AdaptiveSpeculation(window=0)


@pytest.mark.parametrize("lookup", [0, 1])
def test_the_decode_loop_under_the_policy_is_greedy_decoding(tiny_model, lookup):
    torch.manual_seed(1)
    params = StreamParams(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, f_rank=4, tree=(1, 1)))
    m = EagerSpecMethods(SpecProgram(StreamsModel(tiny_model, params), Tree((1, 1))).eval())
    prompt, kw = [3, 1, 4, 1, 5, 9, 2, 6], dict(max_new_tokens=40, max_seq_len=96, eos_ids=())
    ar = generate(eager_step(tiny_model), prompt, **kw)
    policy = AdaptiveSpeculation(window=2, ar_probe=2, first_backoff=2, max_backoff=4)
    for _ in range(2):  # the policy's times carry over to the next generation
        auto = generate(m.forward, prompt, spec=m, adaptive=policy, lookup=lookup, **kw)
        assert auto.completion_ids == ar.completion_ids
        assert len(auto.speculative_calls) == len(auto.step_times_s) and any(auto.speculative_calls)
    assert ar.speculative_calls == [False] * len(ar.step_times_s)


def test_a_clear_loss_ends_the_try_after_half_a_window():
    p = AdaptiveSpeculation(window=8, ar_probe=1, first_backoff=16)
    kinds = _drive(p, 30, ar_s=0.010, step_s=0.020, tokens=1)  # 0.5x
    assert kinds[:6] == [False, True, True, True, True, True] and not any(kinds[6:22])  # 1 stale + 4 counted steps


def test_a_step_that_cannot_pay_even_accepting_everything_is_dropped_after_one_call():
    p = AdaptiveSpeculation(window=8, ar_probe=1, first_backoff=16)
    p.start(max_tokens=4)
    kinds = _drive(p, 60, ar_s=0.010, step_s=0.045, tokens=4)  # 4 tokens at most, at 4.5x
    assert kinds[:3] == [False, True, False] and sum(kinds) == 3  # one step per try: calls 1, 18, 51
    assert "more than the 4 tokens it can emit" in p.events[0]


def test_each_prompt_gets_its_own_try_and_a_streak_that_paid_goes_on():
    """A back-off ends with its prompt: the next one tries again at once (one stale step and
    a window), where a class whose steps paid speculates from the next prompt's first call."""
    p = AdaptiveSpeculation(window=4, ar_probe=2, first_backoff=8)
    p.start(max_tokens=4)
    _drive(p, 12, ar_s=0.010, step_s=0.020, tokens=1)  # 0.5x: backing off
    assert p._tracks[False].ar_left > 0
    p.start(max_tokens=4)
    kinds = _drive(p, 30, ar_s=0.010, step_s=0.020, tokens=3)  # this prompt's text is predictable: 1.5x
    assert all(kinds)
    p.start(max_tokens=4)
    assert _drive(p, 5, ar_s=0.010, step_s=0.020, tokens=3) == [True] * 5


def test_a_policy_learns_another_process_measurements():
    """knowledge() of a policy that measured speculation paying, learned by a fresh one: no
    autoregressive probe, it speculates from the first call; one that measured a loss backs off
    after its first step."""
    paid = AdaptiveSpeculation(window=4, ar_probe=3)
    _drive(paid, 20, ar_s=0.010, step_s=0.015, tokens=2)
    fresh = AdaptiveSpeculation(window=4, ar_probe=3)
    fresh.learn(json.loads(json.dumps(paid.knowledge())))
    fresh.start(max_tokens=4)
    assert _drive(fresh, 6, ar_s=0.010, step_s=0.015, tokens=2) == [True] * 6
    lost = AdaptiveSpeculation(window=4, ar_probe=3)
    _drive(lost, 20, ar_s=0.010, step_s=0.030, tokens=1)
    fresh = AdaptiveSpeculation(window=4, ar_probe=3)
    fresh.learn(lost.knowledge())
    fresh.start(max_tokens=4)
    kinds = _drive(fresh, 6, ar_s=0.010, step_s=0.030, tokens=1)
    assert kinds[0] and not any(kinds[1:])


def test_what_a_policy_measured_is_kept_for_the_next_process(tmp_path, monkeypatch):
    """device_policy: the knowledge of one process's policy is cached by the program's checksum
    and the kernel plan's timing; the next process's policy starts from it; another program,
    or a plan timed anew, starts afresh."""
    from types import SimpleNamespace

    from edgespec.manifest import LAYOUT
    from edgespec.runtime.session import device_policy

    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path))

    def program(sha: str, timed_at: str):
        runner = SimpleNamespace(kernel_plan=SimpleNamespace(timed_at=timed_at))
        return runner, SimpleNamespace(files={LAYOUT.program: SimpleNamespace(sha256=sha * 64)})

    policy, remember = device_policy(*program("a", "t1"))
    _drive(policy, 20, ar_s=0.010, step_s=0.015, tokens=2)
    remember()
    again, _ = device_policy(*program("a", "t1"))
    assert again.knowledge() == policy.knowledge() and again.speculate()  # no probe
    for other in (program("b", "t1"), program("a", "t2")):
        assert device_policy(*other)[0].knowledge()["ar_s"] == []
