"""The one export path of every task: staging, stage timing and the rejection policy.

A task module (edgespec.tasks) builds the bundle's files and validates them; `run_export`
stages them beside the destination (edgespec.bundle.staged_bundle), writes the recipe and
the manifest, runs the task's validation, and either renames the bundle into place or
writes the report to `<outdir>.rejected/` and raises GateFailure.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from edgespec.bundle import staged_bundle, write_manifest
from edgespec.errors import GateFailure
from edgespec.manifest import LAYOUT, GateResult, Manifest
from edgespec.output_dir import claim_dir


class StageClock:
    """Calling it with a stage name ends the previous stage and starts that one; `seconds`
    holds each finished stage's wall time."""

    def __init__(self, on_stage: Callable[[str], None] = lambda s: None):
        self.on_stage = on_stage
        self.seconds: dict[str, float] = {}
        self._current: str | None = None
        self._t0 = 0.0

    def __call__(self, name: str) -> None:
        self.stop()
        self._current, self._t0 = name, time.perf_counter()
        self.on_stage(name)

    def stop(self) -> None:
        if self._current is not None:
            self.seconds[self._current] = time.perf_counter() - self._t0
            self._current = None


class ExportTask(Protocol):
    """What a task (language model, speech) supplies to `run_export` (edgespec.tasks)."""

    def build_bundle_files(self, recipe: Any, stage_dir: Path, stage: StageClock) -> Manifest:
        """Run the stages before validation into `stage_dir`; the manifest without files."""

    def run_validation(self, bundle_dir: Path, recipe: Any, on_progress: Callable[[str, int, int], None]) -> dict:
        """The validation report of a bundle: at least `passed` and `gates` (GateResult fields)."""

    def summarize_validation(self, report: dict) -> Any:
        """The validation record the manifest keeps of a passed report."""

    def write_validation_report(self, report: dict, out_dir: Path, bundle: str | None = None) -> list[str]:
        """The report's files into `out_dir` (`bundle`: where the bundle lands); their names."""


@dataclass(frozen=True)
class ExportResult:
    bundle_dir: Path
    manifest: Manifest
    stage_seconds: dict[str, float]


def run_export(
    task: ExportTask,
    recipe: Any,
    outdir: str | Path,
    on_stage: Callable[[str], None] = lambda s: None,
    on_progress: Callable[[str, int, int], None] = lambda *a: None,
) -> ExportResult:
    """Export `recipe` with `task` into the bundle `outdir`, atomically.

    The task builds the program into a staging directory; the recipe and a provisional
    manifest go beside it, then (unless the recipe turns validation off) the task validates
    the staged bundle. A failed gate writes the report to `<outdir>.rejected/` and raises
    GateFailure: no bundle is written. Otherwise the report joins the bundle, the manifest
    gets the validation summary and the directory is renamed into place."""
    from edgespec.config import recipe_to_yaml

    outdir = Path(outdir).resolve()
    rejected = LAYOUT.rejected(outdir)
    stage = StageClock(on_stage)
    with staged_bundle(outdir) as stage_dir:
        manifest = task.build_bundle_files(recipe, stage_dir, stage)
        (stage_dir / LAYOUT.recipe).write_text(recipe_to_yaml(recipe))
        manifest = write_manifest(stage_dir, manifest)  # provisional: the validation opens the staged bundle
        stage("validate")
        if recipe.validate.enabled:
            report = task.run_validation(stage_dir, recipe, on_progress)
            if not report["passed"]:
                claim_dir(rejected, LAYOUT.is_report, "rejection report directory")
                task.write_validation_report(report, rejected, f"(not written: {outdir})")
                raise GateFailure([GateResult(**g) for g in report["gates"] if not g["passed"]], rejected)
            files = task.write_validation_report(report, stage_dir, str(outdir))
            manifest = dataclasses.replace(manifest, reports=(*manifest.reports, *files), validation=task.summarize_validation(report))
        stage("package")
        manifest = write_manifest(stage_dir, manifest)
        stage.stop()
    if rejected.is_dir() and all(LAYOUT.is_report(p.name) and p.is_file() for p in rejected.iterdir()):
        shutil.rmtree(rejected, ignore_errors=True)  # a stale rejection of an earlier export
    return ExportResult(outdir, manifest, stage.seconds)
