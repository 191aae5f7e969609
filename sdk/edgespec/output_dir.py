"""Directories edgespec writes into, claimed before anything is written or replaced.

A command that writes files into a directory (a training run, distillation shards, a report)
claims it with `claim_dir`: the directory is created, or accepted when it is empty or holds
only names that command writes itself; anything else is an EdgespecError naming the path,
what is in it and the way out. So a typo in `-o` (`-o .`, `-o ~`) writes and overwrites
nothing. Nothing here deletes: a command replaces only what it has claimed (a bundle
directory is claimed by `edgespec.bundle.staged_bundle`, which adds the manifest's check).
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from edgespec.errors import EdgespecError

NameRule = Callable[[str], bool]


def written_names(*patterns: str) -> NameRule:
    """The rule 'a name this command writes': shell patterns (`shard-*.pt`), matched whole."""
    return lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns)


def listing(names: Iterable[str], limit: int = 5) -> str:
    """A few names for a message: 'a, b, c and 4 more'."""
    names = sorted(names)
    head = ", ".join(names[:limit])
    return head if len(names) <= limit else f"{head} and {len(names) - limit} more"


def claim_dir(path: str | Path, ours: NameRule, what: str) -> Path:
    """`path` created, or accepted when every entry in it is a name `ours` accepts (so the
    command may overwrite those); EdgespecError otherwise, with nothing written. `what` names
    the directory's role in messages ("train.out_dir", "report directory")."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise EdgespecError(f"{what} '{p}' exists and is not a directory; choose a new or empty directory")
    if p.is_dir():
        try:
            foreign = [e.name for e in p.iterdir() if not ours(e.name)]
        except OSError as e:
            raise EdgespecError(f"cannot read {what} '{p}': {e.strerror}") from None
        if foreign:
            raise EdgespecError(
                f"{what} '{p}' holds files edgespec did not write there ({listing(foreign)}); nothing was written: choose a new or empty directory"
            )
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EdgespecError(f"cannot create {what} '{p}': {e.strerror}") from None
    return p


@contextmanager
def renamed_into_place(path: Path, prefix: str, suffix: str) -> Iterator[Path]:
    """A temporary in `path`'s directory for the block to write, renamed onto `path` when the
    block ends (fsynced before the rename, and the directory after it: the name never holds a
    partial file, even after a power loss); removed if the block raises."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(path.parent)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _fsync(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
