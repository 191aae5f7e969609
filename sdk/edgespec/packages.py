"""Data files shipped inside installed packages, found without importing those packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from edgespec.errors import EdgespecError


def package_dir(package: str) -> Path | None:
    """The directory of an installed package, or None when it is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def package_file(package: str, relpath: str, needed_by: str, pip_hint: str) -> Path:
    """A file inside an installed package; EdgespecError naming what needs it and how to
    install it when the package or the file is missing."""
    root = package_dir(package)
    if root is None:
        raise EdgespecError(f"{needed_by} needs the package '{package}' ({pip_hint})")
    path = root / relpath
    if not path.is_file():
        raise EdgespecError(f"package '{package}' is installed but has no {relpath}; reinstall it ({pip_hint})")
    return path
