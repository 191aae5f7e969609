"""bench/vs_llama_cpp.py's measurement of one tool: its output and peak RSS, or a failure that
names the tool, how it ended and its last words (the comparison goes on without that figure)."""

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("vs_llama_cpp", Path(__file__).parents[1] / "bench" / "vs_llama_cpp.py")
vs_llama_cpp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vs_llama_cpp)


def test_a_tool_that_runs_gives_its_output_and_its_peak_rss():
    out, peak = vs_llama_cpp.run_measured([sys.executable, "-c", "x = bytearray(64 << 20); x[::4096] = b'1' * len(x[::4096]); print('ok')"])
    assert out.strip() == "ok" and peak >= 64  # MB: the 64 MB it touched


@pytest.mark.parametrize(
    "code, said",
    [
        ("import os, signal; os.kill(os.getpid(), signal.SIGILL)", "killed by signal 4: no output on stderr"),
        ("import sys; print('bad model file', file=sys.stderr); sys.exit(3)", "exit status 3: bad model file"),
    ],
)
def test_a_tool_that_dies_is_named_with_how_it_ended(code, said):
    with pytest.raises(vs_llama_cpp.Failed, match=said):
        vs_llama_cpp.run_measured([sys.executable, "-c", code])
