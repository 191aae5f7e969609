"""The test run's shared directories (conftest.shared_dir), on which the bundles that several
tests read are built once for both xdist workers: made once whoever asks, nothing left behind
by a failed make, one maker among concurrent processes."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import shared_dir


def test_made_once_and_then_read(tmp_path):
    made = []

    def make(d: Path) -> None:
        made.append(d)
        (d / "f").write_text("x")

    first = shared_dir(tmp_path, "a", make)
    assert shared_dir(tmp_path, "a", make) == first == tmp_path / "a"
    assert len(made) == 1 and (first / "f").read_text() == "x"
    assert shared_dir(tmp_path, "b", make) != first and len(made) == 2  # another name, another directory


def test_a_failed_make_leaves_nothing_and_the_next_caller_makes_it(tmp_path):
    def fail(d: Path) -> None:
        (d / "half").write_text("x")
        raise RuntimeError("export failed")

    with pytest.raises(RuntimeError, match="export failed"):
        shared_dir(tmp_path, "a", fail)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == []
    assert (shared_dir(tmp_path, "a", lambda d: (d / "f").write_text("y")) / "f").read_text() == "y"


def test_concurrent_processes_make_it_once(tmp_path):
    worker = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from conftest import shared_dir

        def make(d):
            with open({str(tmp_path / "log")!r}, "a") as f:
                f.write("made\\n")
            time.sleep(1.0)  # the others arrive while it is being made
            (d / "f").write_text("x")

        print((shared_dir(Path({str(tmp_path / "root")!r}), "a", make) / "f").read_text())
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0] and outs == ["x\n"] * 3
    assert (tmp_path / "log").read_text() == "made\n"
