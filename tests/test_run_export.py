"""`tasks.pipeline.run_export`, the one export path of every task: staging, stage timing and the
rejection policy, with a task that writes a file instead of a program."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from edgespec import bundle as B
from edgespec.config import Recipe
from edgespec.errors import GateFailure
from edgespec.manifest import GateResult
from edgespec.tasks import pipeline as E
from manifests import tiny_manifest


def _task(passed: bool, seen: list):
    def build_bundle_files(recipe, stage_dir: Path, stage):
        stage("load")
        (stage_dir / B.PROGRAM).write_bytes(b"program")
        (stage_dir / B.TOKENIZER).write_text("{}")
        stage("lower")
        return tiny_manifest()

    def run_validation(stage_dir: Path, recipe, on_progress) -> dict:
        seen.append(B.read_manifest(stage_dir).files[B.PROGRAM].bytes)  # the provisional manifest is there
        gate = GateResult("lossless", passed, "3/3" if passed else "2/3", "all", "identical on 3/3" if passed else "1 differs")
        return {"passed": passed, "gates": [gate.to_dict()]}

    def write_validation_report(report: dict, out: Path, bundle: str | None = None) -> list[str]:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(bundle)
        return ["report.md"]

    def summarize_validation(report: dict):
        return tiny_manifest().validation  # None: the record's shape is the task's business

    return SimpleNamespace(
        build_bundle_files=build_bundle_files,
        run_validation=run_validation,
        summarize_validation=summarize_validation,
        write_validation_report=write_validation_report,
    )


def test_a_passing_export_writes_the_bundle_with_its_report(tmp_path):
    seen, stages = [], []
    out = tmp_path / "b"
    (tmp_path / "b.rejected").mkdir()  # an earlier rejection: gone once this export passes
    res = E.run_export(_task(True, seen), Recipe(), out, on_stage=stages.append)
    assert stages == ["load", "lower", "validate", "package"] and set(res.stage_seconds) == set(stages)
    assert seen == [7] and (out / "report.md").read_text() == str(out.resolve())
    m = B.read_manifest(out)
    assert m.reports == ("report.md",) and set(m.files) == {B.PROGRAM, B.TOKENIZER, "recipe.yaml", "report.md"}
    B.verify_checksums(out, m)
    assert not (tmp_path / "b.rejected").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_a_failed_gate_writes_no_bundle_and_leaves_the_report_beside_it(tmp_path):
    out = tmp_path / "b"
    with pytest.raises(GateFailure, match=r"lossless: 1 differs \(report: .*b\.rejected/report\.md\)") as e:
        E.run_export(_task(False, []), Recipe(), out)
    assert e.value.exit_code == 1 and [g.name for g in e.value.failed] == ["lossless"]
    assert (tmp_path / "b.rejected" / "report.md").read_text() == f"(not written: {out.resolve()})"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.rejected"]  # no bundle, no staging leftovers


def test_validation_off_skips_the_task_validation(tmp_path):
    seen = []
    E.run_export(_task(False, seen), Recipe().replace(validate={"enabled": False}), tmp_path / "b")
    assert seen == [] and B.read_manifest(tmp_path / "b").validation is None


def test_a_rejection_path_holding_other_files_is_neither_removed_nor_written(tmp_path):
    from edgespec.errors import EdgespecError

    (tmp_path / "b.rejected").mkdir()
    (tmp_path / "b.rejected" / "thesis.tex").write_text("mine")
    E.run_export(_task(True, []), Recipe(), tmp_path / "b")  # a pass: not removed as a stale rejection
    with pytest.raises(EdgespecError, match="rejection report directory .* holds files edgespec did not write"):
        E.run_export(_task(False, []), Recipe(), tmp_path / "b")
    assert [p.name for p in (tmp_path / "b.rejected").iterdir()] == ["thesis.tex"]
