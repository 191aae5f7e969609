"""The one speed methodology (edgespec.runtime.speed) and `edgespec bench`, on fake decoders:
pure logic, no model, no program."""

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgespec.runtime.speed import measure, row_stats, summarize


@dataclass
class FakeResult:
    """The public fields of GenerationResult that the methodology reads."""

    completion_ids: list[int]
    prefill_s: float
    decode_s: float
    step_times_s: list[float] = field(default_factory=list)
    tokens_per_call: list[int] = field(default_factory=list)
    speculative_calls: list[bool] = field(default_factory=list)
    adaptive_events: list[str] = field(default_factory=list)


def fake_decoder(name: str, log: list, *, per_call: int = 1, call_s: float = 0.01, prefill_s: float = 0.1, times: list[float] | None = None):
    """A decoder emitting `max_new_tokens` tokens: the first from prefill, then `per_call` per
    decode call of `call_s` seconds (the last call's tokens may run past the budget, as
    spec_step's do). `times`: decode_s of successive runs, to check which run is kept."""

    def decode(ids, *, max_new_tokens, max_seq_len, eos_ids):
        log.append((name, tuple(ids), max_new_tokens))
        calls = -(-(max_new_tokens - 1) // per_call)
        steps = [call_s] * calls
        decode_s = times.pop(0) if times else sum(steps)
        return FakeResult(list(range(max_new_tokens)), prefill_s, decode_s, steps, [per_call] * calls if per_call > 1 else [])

    return decode


def test_warmup_then_interleaved_runs_in_alternating_order():
    log: list = []
    decoders = {"ar": fake_decoder("ar", log), "spec": fake_decoder("spec", log, per_call=2)}
    prompts = [[1, 2], [3], [4, 5, 6]]
    out = list(measure(decoders, prompts, max_new_tokens=[5, 6, 7], max_seq_len=64, eos_ids=(), warmup=2, runs=2))
    assert len(out) == 3 and all(set(r) == {"ar", "spec"} for r in out)
    # warm-up: every decoder, on the first prompt, not counted
    assert log[:4] == [("ar", (1, 2), 5), ("spec", (1, 2), 5)] * 2
    # then per prompt `runs` rounds, the order alternating round after round, across prompts
    order = [n for n, _, _ in log[4:]]
    assert order == ["ar", "spec", "spec", "ar", "ar", "spec", "spec", "ar", "ar", "spec", "spec", "ar"]
    assert [b for _, ids, b in log[4:] if ids == (4, 5, 6)] == [7] * 4


def test_the_run_with_the_median_decode_time_is_kept():
    log: list = []
    decoders = {"ar": fake_decoder("ar", log, times=[9.0, 3.0, 1.0, 2.0, 5.0])}
    (res,) = measure(decoders, [[1]], max_new_tokens=4, max_seq_len=64, eos_ids=(), warmup=0, runs=5)
    assert res["ar"].decode_s == 3.0


def _rows(ar_tps: list[float], spec_tps: list[float]) -> list[dict]:
    """Rows of prompts with 9 new tokens: AR 8 calls, spec 2 calls of 4 tokens."""
    rows = []
    for a, s in zip(ar_tps, spec_tps):
        res = {
            "ar": FakeResult(list(range(9)), 0.1, 8 / a, [1 / a] * 8),
            "spec": FakeResult(list(range(9)), 0.1, 8 / s, [4 / s] * 2, [4, 4]),
        }
        rows.append(row_stats(res, prompt_tokens=20))
    return rows


def test_speedup_is_the_median_of_per_prompt_ratios():
    s = summarize(_rows([100, 200, 100], [150, 200, 300]))
    assert s["prompts"] == s["timed_prompts"] == 3 and s["lossless"] == {"identical": 3, "prompts": 3} and "note" not in s
    assert s["ar"]["tokens_per_s"] == 100 and s["spec"]["tokens_per_s"] == 200
    assert s["spec"]["speedup"] == 1.5  # ratios 1.5, 1.0, 3.0; the ratio of medians would be 2.0
    assert s["ar"]["tokens_per_call"] == 1.0 and s["spec"]["tokens_per_call"] == 4.0
    assert s["spec"]["tokens_per_call_histogram"] == {4: 6} and "speedup" not in s["ar"]
    assert s["ar"]["prefill_tokens_per_s"] == 200.0 and s["ar"]["new_tokens"] == 9 and s["spec"]["calls"] == 6


def test_row_fields():
    (row,) = _rows([100], [250])
    assert row["prompt_tokens"] == 20 and row["new_tokens"] == 9 and row["lossless"] is True
    assert row["ar"] == {
        "tokens_per_s": 100.0,
        "prefill_tokens_per_s": 200.0,
        "new_tokens": 9,
        "calls": 8,
        "decode_tokens": 8,
        "ms_per_call": 10.0,
        "tokens_per_call": None,
        "speculative_calls": None,
    }
    assert row["spec"]["tokens_per_call"] == [4, 4] and row["spec"]["decode_tokens"] == 8 and row["spec"]["ms_per_call"] == 16.0


def test_autoregressive_calls_listed_or_not_count_the_same():
    listed = FakeResult(list(range(5)), 0.1, 0.04, [0.01] * 4, [1] * 4)
    unlisted = FakeResult(list(range(5)), 0.1, 0.04, [0.01] * 4)
    a, b = row_stats({"ar": listed}, 3)["ar"], row_stats({"ar": unlisted}, 3)["ar"]
    assert {**a, "tokens_per_call": None} == b and b["tokens_per_s"] == 100.0 and b["decode_tokens"] == 4


def test_losslessness_compares_with_the_autoregressive_tokens():
    res = {"ar": FakeResult([1, 2, 3], 0.1, 0.2, [0.1, 0.1]), "spec": FakeResult([1, 2, 4], 0.1, 0.1, [0.1], [2])}
    assert row_stats(res, 5)["lossless"] is False
    assert row_stats({"spec": res["spec"]}, 5)["lossless"] is None  # nothing to compare with
    assert summarize([row_stats({"spec": res["spec"]}, 5)])["lossless"] is None


def test_prompts_without_decode_calls_are_left_out_of_the_decode_numbers():
    log: list = []
    decoders = {"ar": fake_decoder("ar", log), "spec": fake_decoder("spec", log, per_call=3)}
    rows = [row_stats(r, 1) for r in measure(decoders, [[1], [2]], max_new_tokens=[1, 7], max_seq_len=64, eos_ids=(), runs=1)]
    assert rows[0]["ar"]["calls"] == 0 and rows[0]["ar"]["tokens_per_s"] is None and rows[0]["ar"]["ms_per_call"] is None
    s = summarize(rows)
    assert s["timed_prompts"] == 1 and "1 of 2 prompts made no decode call" in s["note"]
    assert s["ar"]["tokens_per_s"] == 100.0 and s["spec"]["speedup"] == 3.0  # 6 tokens in 2 calls vs 6 calls of the same cost


# --- `edgespec bench` ----------------------------------------------------------------------


class FakeRunner:
    max_seq_len = 64
    has_spec = True
    has_next_token = False  # no screened head
    kernel_plan = None  # a program without block linears

    def __init__(self, path: Path):
        self.path = path


def _bench_cli(tmp_path, monkeypatch, *args):
    import edgespec.cli as cli
    import edgespec.cli.run as run
    import edgespec.runtime.session as session

    pte = tmp_path / "model.pte"
    pte.write_bytes(b"\0" * 1000)
    log: list = []
    monkeypatch.setattr(run, "_load_bundle", lambda bundle: ({}, None, FakeRunner(pte)))
    monkeypatch.setattr(run, "_prompt_ids", lambda tok, prompt, chat: [ord(c) for c in prompt])
    monkeypatch.setattr(session, "decoder", lambda runner, mode, lookup, manifest: (mode, fake_decoder(mode, log, per_call=2 if mode == "spec" else 1)))
    res = CliRunner().invoke(cli.main, ["bench", "--bundle", str(tmp_path), *args])
    return res, log


def test_bench_json_shape(tmp_path, monkeypatch):
    res, log = _bench_cli(tmp_path, monkeypatch, "--json", "--max-new-tokens", "9", "--runs", "3", "--prompt", "ab", "--prompt", "cde")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert len(log) == 3 + 3 * 3 * 2  # one warm-up per decoder, then 3 runs x 2 prompts x 3 decoders (ar, spec, auto)
    assert [name for name, _, _ in log[:3]] == ["ar", "spec", "auto"]
    assert out["program_bytes"] == 1000 and out["max_new_tokens"] == 9 and out["warmup"] == 1 and out["runs"] == 3
    assert out["prompts"] == out["timed_prompts"] == 2 and out["lossless"] == {"identical": 2, "prompts": 2} and out["peak_rss_mb"] > 0
    assert out["ar"]["tokens_per_s"] == 100.0 and out["spec"]["speedup"] == 2.0 and out["spec"]["tokens_per_call"] == 2.0
    assert [r["prompt_tokens"] for r in out["rows"]] == [2, 3]
    assert set(out["spec"]) == {
        "tokens_per_s",
        "prefill_tokens_per_s",
        "new_tokens",
        "calls",
        "ms_per_call",
        "tokens_per_call",
        "speedup",
        "tokens_per_call_histogram",
    }


@pytest.mark.parametrize("as_json", [True, False])
def test_bench_with_one_new_token_reports_decode_speed_unavailable(tmp_path, monkeypatch, as_json):
    # regression: used to end in statistics.StatisticsError (no median for empty data)
    res, _ = _bench_cli(tmp_path, monkeypatch, "--max-new-tokens", "1", "--runs", "2", *(["--json"] if as_json else []))
    assert res.exit_code == 0, res.output
    if as_json:
        out = json.loads(res.output)
        assert out["timed_prompts"] == 0 and out["ar"]["tokens_per_s"] is None and out["spec"]["speedup"] is None
        assert out["ar"]["prefill_tokens_per_s"] > 0 and out["lossless"] == {"identical": 1, "prompts": 1}
        assert "decode speed is unavailable" in out["note"]
    else:
        assert "ar.tokens_per_s: n/a" in res.output and "decode speed is unavailable" in res.output


def test_time_call_is_the_median_of_the_timed_calls_after_the_warmup():
    from edgespec.runtime.speed import time_call

    calls = []
    assert time_call(lambda: calls.append(1), warmup=2, reps=5) >= 0 and len(calls) == 7


def test_first_divergence_and_the_reference_margin_there():
    from types import SimpleNamespace

    import torch

    from edgespec.runtime.speed import first_divergence, top2_margin

    assert first_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert first_divergence([1, 2], [1, 2, 3]) == 2 and first_divergence([1, 2, 3], [1, 2]) == 2  # one a prefix of the other
    assert first_divergence([5], [6]) == 0
    fed = []
    runner = SimpleNamespace(forward=lambda t, pos: fed.append((t.tolist(), pos)) or torch.tensor([0.5, 3.0, 2.25]))
    assert top2_margin(runner, [7, 8]) == 0.75 and fed == [([[7, 8]], 0)]
