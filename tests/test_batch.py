"""The batch pipeline: resumable, crash-safe, malformed lines skipped; and killed for real."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from edgespec.errors import EdgespecError
from edgespec.runtime.batch import finished_ids, run_batch
from edgespec.runtime.generate import GenerationResult


def _fake_decode(fail_at=None):
    calls = []

    def decode(ids, **kw):
        calls.append(ids)
        if fail_at is not None and len(calls) == fail_at:
            raise RuntimeError("simulated crash")
        if len(ids) > 40:
            raise EdgespecError("the prompt has too many tokens")
        out = [(sum(ids) + k) % 50 for k in range(kw["max_new_tokens"])]
        return GenerationResult(ids, out, False, 0.001, 0.002, [0.001] * len(out))

    return decode, calls


def _encode(text):
    return [ord(c) % 50 for c in text]


def _text(ids):
    return " ".join(map(str, ids))


def _write_input(path, n, extra=()):
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"p{i}", "prompt": f"prompt number {i}"}) + "\n")
        for line in extra:
            f.write(line + "\n")


def _lines(path):
    return [json.loads(line) for line in open(path)]


@pytest.mark.parametrize("pipelined", [True, False])
def test_batch_writes_every_line_and_reports_bad_ones(tmp_path, pipelined):
    _write_input(
        tmp_path / "in.jsonl",
        20,
        extra=["{oops", json.dumps({"id": "x"}), json.dumps({"id": "p3", "prompt": "dup"}), json.dumps({"id": "long", "prompt": "y" * 100})],
    )
    decode, _ = _fake_decode()
    stats = run_batch(decode, _encode, _text, tmp_path / "in.jsonl", tmp_path / "out.jsonl", gen_kwargs={"max_new_tokens": 4}, pipelined=pipelined)
    rows = _lines(tmp_path / "out.jsonl")
    errors = [r for r in rows if "error" in r]  # recorded with their ids (a duplicate id is not: its first line is there)
    rows = [r for r in rows if "error" not in r]
    assert [r["id"] for r in rows] == [f"p{i}" for i in range(20)]  # input order kept
    assert [e["id"] for e in errors] == [errors[0]["id"], "x", "long"] and errors[0]["id"].startswith("sha256:")
    assert rows[5]["completion"] == _text([(sum(_encode("prompt number 5")) + k) % 50 for k in range(4)])
    assert stats.generated == 20 and len(stats.errors) == 4
    msgs = " | ".join(e["error"] for e in stats.errors)
    assert "malformed input" in msgs and "duplicate id" in msgs and "too many tokens" in msgs


def test_resume_skips_finished_ids_and_cuts_a_torn_line(tmp_path):
    _write_input(tmp_path / "in.jsonl", 10)
    out = tmp_path / "out.jsonl"
    decode, calls = _fake_decode()
    run_batch(decode, _encode, _text, tmp_path / "in.jsonl", out, gen_kwargs={"max_new_tokens": 3})
    full = out.read_text()
    # keep 4 complete lines and half of the fifth, as a writer killed mid-line leaves it
    lines = full.splitlines(keepends=True)
    out.write_text("".join(lines[:4]) + lines[4][: len(lines[4]) // 2])
    assert finished_ids(out) == {"p0", "p1", "p2", "p3"} and out.read_text() == "".join(lines[:4])
    decode, calls = _fake_decode()
    stats = run_batch(decode, _encode, _text, tmp_path / "in.jsonl", out, gen_kwargs={"max_new_tokens": 3})
    assert stats.skipped_done == 4 and stats.generated == 6 and len(calls) == 6
    assert out.read_text() == full  # nothing lost, nothing duplicated


def test_a_crash_loses_no_finished_line(tmp_path):
    _write_input(tmp_path / "in.jsonl", 12)
    out = tmp_path / "out.jsonl"
    decode, _ = _fake_decode(fail_at=7)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_batch(decode, _encode, _text, tmp_path / "in.jsonl", out, gen_kwargs={"max_new_tokens": 3})
    assert [r["id"] for r in _lines(out)] == [f"p{i}" for i in range(6)]
    decode, _ = _fake_decode()
    run_batch(decode, _encode, _text, tmp_path / "in.jsonl", out, gen_kwargs={"max_new_tokens": 3})
    assert [r["id"] for r in _lines(out)] == [f"p{i}" for i in range(12)]


def test_missing_input_is_a_clear_error(tmp_path):
    decode, _ = _fake_decode()
    with pytest.raises(EdgespecError, match="input file .* not found"):
        run_batch(decode, _encode, _text, tmp_path / "none.jsonl", tmp_path / "out.jsonl", gen_kwargs={})


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 3])
def test_kill_and_resume_with_a_real_program(tiny_bundle, tiny_batched_bundle, tmp_path, batch):
    """SIGKILL the CLI mid-batch, run it again: every id exactly once, as an uninterrupted run
    (one prompt at a time, and three per call through a batched program)."""
    bundle = tiny_bundle if batch == 1 else tiny_batched_bundle
    _write_input(tmp_path / "in.jsonl", 300)
    # no prefix reuse: a resumed run starts from an empty cache, and this test is about the pipeline
    cmd = [
        sys.executable,
        "-m",
        "edgespec.cli",
        "generate",
        "--bundle",
        str(bundle),
        "--input",
        str(tmp_path / "in.jsonl"),
        "--max-new-tokens",
        "32",
        "--no-chat-template",
        "--no-reuse-prefix",
        "--batch",
        str(batch),
    ]
    ref = subprocess.run([*cmd, "--output", str(tmp_path / "ref.jsonl")], capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr[-2000:]
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen([*cmd, "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 20):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = out.read_bytes().count(b"\n")
    assert 20 <= killed_at < 300
    res = subprocess.run([*cmd, "--output", str(out)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])["already_done"] >= 20
    got = [r["id"] for r in _lines(out)]
    assert sorted(got) == sorted(f"p{i}" for i in range(300)) and len(got) == len(set(got))
    strip = lambda r: {k: v for k, v in r.items() if k not in ("decode_tokens_per_s",)}  # noqa: E731
    assert sorted(map(json.dumps, map(strip, _lines(out)))) == sorted(map(json.dumps, map(strip, _lines(tmp_path / "ref.jsonl"))))
