"""The tasks a recipe can describe, each a module with one interface.

A task module supplies:

- ``DESCRIPTION``, ``RECIPE`` (its recipe class, whose ``TASK`` is the task kind a recipe's
  and a manifest's ``task`` names), ``STAGES`` (what ``build_bundle_files`` announces);
- ``build_bundle_files(recipe, stage_dir, stage) -> Manifest``, ``run_validation(bundle_dir,
  recipe, on_progress) -> report``, ``summarize_validation(report) -> validation record`` and
  ``write_validation_report(report, dir, bundle=None) -> files``: what
  `edgespec.tasks.pipeline.run_export` needs (`edgespec validate` uses ``run_validation`` and
  ``write_validation_report`` too, with ``render_validation(report)``);
- ``export_summary(result) -> str``, ``describe(manifest) -> lines``, ``verify(bundle_dir,
  manifest) -> (metadata, line)``: what the CLI prints for `export`, `info` and `verify`.

Commands pick the task from the recipe (`task_of_recipe`) or the bundle's manifest
(`task_of_manifest`); nothing else compares task names.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from edgespec.config import check_task_kinds
from edgespec.manifest import Manifest
from edgespec.tasks import asr, language_model
from edgespec.tasks.pipeline import ExportResult, run_export

TASKS: dict[str, ModuleType] = {t.RECIPE.TASK: t for t in (language_model, asr)}
"""The task module of each task kind (edgespec.config.RECIPE_KINDS)."""
check_task_kinds(TASKS, "edgespec.tasks.TASKS")


def task_of_recipe(recipe) -> ModuleType:
    return next(t for t in TASKS.values() if type(recipe) is t.RECIPE)


def task_of_manifest(manifest: Manifest) -> ModuleType:
    return TASKS[manifest.task]


def export_recipe(recipe, outdir: str | Path, on_stage=lambda s: None, on_progress=lambda *a: None) -> ExportResult:
    """`edgespec export`: the recipe's task run into the bundle `outdir` (edgespec.tasks.pipeline.run_export)."""
    return run_export(task_of_recipe(recipe), recipe, outdir, on_stage=on_stage, on_progress=on_progress)


def export_stages(recipe) -> tuple[str, ...]:
    """Every stage an export of `recipe` goes through, in order."""
    return (*task_of_recipe(recipe).STAGES, "validate", "package")
