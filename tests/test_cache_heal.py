"""Caches that heal (kernels/library.py, kernels/plan.py): a cached library that does not load
is built again, once; a build is fsynced into place; a plan cache that cannot be written is
skipped with a note; a cached plan this CPU cannot install is measured again."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings

import click
import pytest
from click.testing import CliRunner

from edgespec.cli.terminal import friendly, quiet_runtime_logs
from edgespec.errors import EdgespecNote
from edgespec.kernels import library, plan

SHAPES = [(64, 64, 1), (32, 64, 3)]  # what the fake forward "calls" (plan.record_shapes)

# loads the library in a child process: this one may hold another copy of it already
CHILD = """
import ctypes, sys
from edgespec.errors import EdgespecError
from edgespec.kernels import library
try:
    path = library.load()
except EdgespecError as e:
    sys.exit(f"EdgespecError: {e}")
print(ctypes.CDLL(str(path)).edgespec_path_supported(0))
"""


@pytest.fixture(scope="module")
def good_library() -> bytes:
    """A working build (the one every test of the suite loads, built once)."""
    return library.load().read_bytes()


def _fake_compiler(tmp_path, output: bytes) -> str:
    """A `$CXX` that writes `output` to its `-o` path and logs each call to `cxx.log`."""
    (tmp_path / "cxx.out").write_bytes(output)
    cxx = tmp_path / "cxx"
    cxx.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/cxx.log\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && cp {tmp_path}/cxx.out "$2"; shift; done\nexit 0\n')
    cxx.chmod(0o755)
    return str(cxx)


def _load_in_child(tmp_path, output: bytes) -> subprocess.CompletedProcess:
    env = {**os.environ, "EDGESPEC_CACHE": str(tmp_path / "cache"), "CXX": _fake_compiler(tmp_path, output)}
    return subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env)


def _cached_library(tmp_path, monkeypatch, content: bytes):
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    path = library.library_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_a_cached_library_that_does_not_load_is_built_again(tmp_path, monkeypatch, good_library, damage):
    path = _cached_library(tmp_path, monkeypatch, b"" if damage == "empty" else good_library[: len(good_library) // 3])
    child = _load_in_child(tmp_path, good_library)
    assert child.returncode == 0 and child.stdout.strip() == "1", child.stderr
    assert f"EdgespecNote: the cached kernel library '{path}' does not load" in child.stderr  # one note says why it builds
    assert len((tmp_path / "cxx.log").read_text().splitlines()) == 1  # built again once
    assert path.read_bytes() == good_library
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


def test_a_rebuilt_library_that_still_does_not_load_is_one_clear_error(tmp_path, monkeypatch):
    path = _cached_library(tmp_path, monkeypatch, b"")
    child = _load_in_child(tmp_path, b"not a library " * 100)
    error = child.stderr.splitlines()[-1]
    assert child.returncode == 1 and error.startswith("EdgespecError: "), child.stderr
    assert str(path) in error and "invalid ELF header" in error  # the path and the loader's own words
    assert len((tmp_path / "cxx.log").read_text().splitlines()) == 1  # built again once, not in a loop


def test_a_build_is_fsynced_before_and_after_its_rename(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", _fake_compiler(tmp_path, b"a build"))
    events = []
    fsync, replace = os.fsync, os.replace

    def record_fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def record_replace(src, dst):
        events.append(("replace", os.fspath(dst)))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", record_fsync)
    monkeypatch.setattr(os, "replace", record_replace)
    path = library.build()
    assert path.read_bytes() == b"a build"
    assert [e[0] for e in events] == ["fsync", "replace", "fsync"], events
    assert os.path.basename(events[0][1]).startswith(".build-")  # the temporary, before the rename
    assert events[1][1] == str(path) and events[2][1] == str(path.parent)  # the directory, after it


@pytest.fixture(scope="module")
def flags_plan() -> plan.KernelPlan:
    """A plan of the flags' choice in every regime (loads the library into this process)."""
    choice = plan.flags_choice()
    return plan.KernelPlan(1, len(SHAPES), 0.01, {r: plan.RegimePlan(rows, choice, 1.0, 1.0, {choice.label(): 1.0}) for r, rows in plan.REGIMES.items()}, 0.0)


class _QuietLoad:
    """plan._LoadMeter's stand-in: every timing on a quiet machine."""

    def __enter__(self):
        self.load = QUIET
        return self

    def __exit__(self, *exc):
        return None


QUIET = plan.TimingLoad(0.0, 2)


def _untimed(p: plan.KernelPlan) -> plan.KernelPlan:
    """The plan without when and under what load it was timed (what a measurement adds)."""
    return dataclasses.replace(p, timed_at="", load=None)


@pytest.fixture()
def plan_cache(tmp_path, monkeypatch, flags_plan):
    """Plans under `tmp_path`; the program records `SHAPES`, each measurement gives
    `flags_plan` on a quiet machine (yields the list of what was measured)."""
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path))
    monkeypatch.delenv(plan.ENV, raising=False)
    monkeypatch.setattr(plan, "record_shapes", lambda forward: list(SHAPES))
    monkeypatch.setattr(plan, "_LoadMeter", _QuietLoad)
    measured = []
    monkeypatch.setattr(plan, "tune", lambda shapes, threads, forward: measured.append(shapes) or flags_plan)
    yield measured
    plan.install_flags_choice()


def _program(rows):
    raise AssertionError("the fake program is never run")


def _assert_installed(p: plan.KernelPlan) -> None:
    assert all(plan.current(name) == r.choice for name, r in p.regimes.items())


def _refuse_temporaries(monkeypatch) -> None:
    """A directory nothing can be written into (chmod does not stop root)."""

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", kwargs.get("dir"))

    monkeypatch.setattr("tempfile.mkstemp", refuse)


@pytest.mark.parametrize("how", ["under a regular file", "permission denied"])
def test_an_unwritable_plan_cache_is_skipped_with_a_note(tmp_path, monkeypatch, plan_cache, flags_plan, how):
    if how == "under a regular file":
        (tmp_path / "file").write_text("")
        monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "file"))
    else:
        _refuse_temporaries(monkeypatch)
    with pytest.warns(EdgespecNote, match="kernel plan could not be cached") as notes:
        got = plan.plan_program(_program, 1)
    assert _untimed(got) == flags_plan and got.load == QUIET and len(plan_cache) == 1 and len(notes) == 1
    assert "\n" not in str(notes[0].message)
    _assert_installed(got)


def test_a_read_only_plan_cache_is_used_as_it_is(tmp_path, monkeypatch, plan_cache, flags_plan):
    path = plan.plan_path(SHAPES, 1)
    path.parent.mkdir(parents=True)
    cached = dataclasses.replace(flags_plan, tune_s=2.5, load=QUIET)  # timed on a quiet machine: final
    path.write_text(json.dumps(cached.to_json()))
    _refuse_temporaries(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plan.plan_program(_program, 1) == cached
    assert plan_cache == []


def _missing_path() -> str:
    return next(p for p in plan.PATHS if p not in plan.supported_paths() and p != "portable")


EDITS = {  # each edits a cached plan's JSON in place
    "an unknown path name": lambda d: d["regimes"]["one_row"]["choice"].update(path="sse9"),
    "a path this CPU lacks": lambda d: d["regimes"]["one_row"]["choice"].update(path=_missing_path()),
    "a negative prefetch": lambda d: d["regimes"]["few_rows"]["choice"].update(prefetch=-8),
    "a prefetch as text": lambda d: d["regimes"]["one_row"]["choice"].update(prefetch="16"),
    "a time as text": lambda d: d["regimes"]["many_rows"].update(ms="fast"),
    "a regime missing": lambda d: d["regimes"].pop("many_rows"),
    "an unknown regime": lambda d: d["regimes"].update(huge_rows=d["regimes"]["one_row"]),
    "regimes as a list": lambda d: d.update(regimes=list(d["regimes"].values())),
    "a field missing": lambda d: d.pop("threads"),
}
FILES = {"corrupt JSON": b"{ not json", "not UTF-8": b"\xff", "a list": b"[]", "null": b"null"}


@pytest.mark.parametrize("damage", [*EDITS, *FILES])
def test_an_invalid_cached_plan_is_measured_again(tmp_path, plan_cache, flags_plan, damage):
    path = plan.plan_path(SHAPES, 1)
    path.parent.mkdir(parents=True)
    if damage in FILES:
        path.write_bytes(FILES[damage])
    else:
        d = flags_plan.to_json()
        EDITS[damage](d)
        path.write_text(json.dumps(d))
    got = plan.plan_program(_program, 1)
    assert _untimed(got) == flags_plan and len(plan_cache) == 1
    assert plan.KernelPlan.from_json(json.loads(path.read_text())) == got  # the measured plan replaced it
    _assert_installed(got)


def test_a_note_reaches_the_terminal_of_a_quiet_command():
    @click.command()
    @friendly
    def command():
        quiet_runtime_logs()
        warnings.warn("the cache was skipped", EdgespecNote, stacklevel=1)

    res = CliRunner().invoke(command, [])
    assert res.exit_code == 0 and res.output == "note: the cache was skipped\n", res.output
