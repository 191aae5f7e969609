"""Faults injected into real runs: SIGKILL at spread-out points of `edgespec export`, and a
full disk (injected ENOSPC) during export and during batch output. Whatever happens, the
bundle directory is the old complete bundle or the new complete one, never a mix; the CLI
says one `error:` line; a rerun succeeds and leaves no staging directories behind."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgespec import bundle as B
from edgespec.cli import main

pytestmark = pytest.mark.slow


def _recipe(tmp_path, src, seq=512):
    r = tmp_path / f"r{seq}.yaml"
    r.write_text(
        f"name: tiny\nmodel: {{source: {src}, max_seq_len: {seq}}}\nquant: {{scheme: fp32}}\nnumerics: {{search: false}}\nvalidate: {{enabled: false}}\n"
    )
    return r


def _complete(out: Path):
    m = B.read_manifest(out)
    B.verify_checksums(out, m)
    return m


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def test_sigkill_during_export_never_leaves_a_half_written_bundle(tiny_hf_dir, tmp_path):
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "edgespec.cli", "export", "-o", str(out)]
    t0 = time.perf_counter()
    subprocess.run([*cmd, str(_recipe(tmp_path, tiny_hf_dir, 512))], check=True, capture_output=True, timeout=900)
    full = time.perf_counter() - t0
    old = _complete(out)
    outcomes, stranded = [], []
    for frac in (0.15, 0.4, 0.65, 0.85, 0.97):  # another context length: a different program
        proc = subprocess.Popen([*cmd, str(_recipe(tmp_path, tiny_hf_dir, 384))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(frac * full)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        m = _complete(out)  # complete whatever the moment: the old bundle or the new one
        outcomes.append("old" if m == old else "new")
        stranded += _leftovers(out)  # the killed run's staging directory, if it had one
        if m != old:
            old = m
    assert "old" in outcomes and stranded  # at least one kill landed mid-export, mid-staging
    res = subprocess.run([*cmd, str(_recipe(tmp_path, tiny_hf_dir, 320))], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    assert B.read_manifest(out).model.max_seq_len == 320
    _complete(out)
    assert _leftovers(out) == []  # the rerun removed what the killed runs left beside the bundle


def test_disk_full_during_export_is_one_error_line_and_nothing_written(tiny_hf_dir, tmp_path, monkeypatch):
    out = tmp_path / "bundle"
    real = Path.write_bytes

    def full(self, data):
        if self.suffix == ".pte":
            real(self, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    res = CliRunner().invoke(main, ["export", str(_recipe(tmp_path, tiny_hf_dir)), "-o", str(out)])
    assert res.exit_code == 1, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "Traceback" not in res.output
    assert not out.exists() and _leftovers(out) == []
    monkeypatch.setattr(Path, "write_bytes", real)
    assert CliRunner().invoke(main, ["export", str(_recipe(tmp_path, tiny_hf_dir)), "-o", str(out)]).exit_code == 0
    _complete(out)


def test_disk_full_during_batch_output_keeps_whole_lines_and_resumes(tiny_bundle, tmp_path, monkeypatch):
    from edgespec.runtime import batch

    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"count {i}"}) + "\n" for i in range(12)))
    out = tmp_path / "out.jsonl"
    args = ["generate", "--bundle", str(tiny_bundle), "--input", str(inp), "--output", str(out), "--max-new-tokens", "8", "--no-chat-template"]
    written = [0]

    class FullDisk:  # the output file: the 5th line is cut in half by a full disk
        def __init__(self, f):
            self.f = f

        def write(self, s):
            written[0] += 1
            if written[0] == 5:
                self.f.write(s[: len(s) // 2])
                self.f.flush()
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.f.write(s)

        def __getattr__(self, name):
            return getattr(self.f, name)

    real_open = open
    monkeypatch.setattr(batch, "open", lambda p, mode="r", **kw: FullDisk(real_open(p, mode, **kw)) if "a" in mode else real_open(p, mode, **kw), raising=False)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1 and "No space left on device" in res.output and "Traceback" not in res.output, res.output
    assert not out.read_bytes().endswith(b"\n")  # the torn line is there until the next run
    monkeypatch.undo()
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]  # every line whole
    assert sorted(r["id"] for r in rows) == sorted(f"p{i}" for i in range(12))
