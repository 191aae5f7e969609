"""The errors edgespec raises for bad input and failed gates, and the notes it gives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class EdgespecError(Exception):
    """A user-facing error: the message says what is wrong and how to fix it (the CLI prints it as one line, exit 2)."""


class EdgespecNote(UserWarning):
    """Something the user should know that needs nothing of them (a cache skipped or built again): the CLI prints it as one `note:` line."""


class GateFailure(EdgespecError):
    """One or more validation gates failed; the bundle is not written (the CLI exits 1)."""

    exit_code = 1

    def __init__(self, failed: Sequence[Any], report_dir=None):
        self.failed = list(failed)  # edgespec.manifest.GateResult
        where = f" (report: {report_dir}/report.md)" if report_dir else ""
        super().__init__("validation gate(s) failed, bundle not written: " + "; ".join(f"{g.name}: {g.message}" for g in self.failed) + where)
