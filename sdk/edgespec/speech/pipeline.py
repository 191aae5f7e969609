"""`edgespec export` for a speech recipe (``task: asr``): load -> normsearch -> quantize ->
export -> lower -> validate -> package, into a bundle staged and renamed atomically like a language-model
bundle. A failed gate leaves the report in `<outdir>.rejected/` and writes no bundle."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from edgespec.config import AsrRecipe, recipe_to_yaml

STAGES = ("load", "normsearch", "quantize", "export", "lower", "validate", "package")


def export_asr_bundle(
    recipe: AsrRecipe, outdir: str | Path, on_stage: Callable[[str], None] = lambda s: None, on_progress: Callable[[str, int, int], None] = lambda *a: None
):
    from edgespec import bundle as B
    from edgespec.pipeline import ExportResult, _StageClock

    stage = _StageClock(on_stage)
    with B.staged_bundle(outdir) as stage_dir:
        stage("load")
        from edgespec.models.conformer import load_conformer_source
        from edgespec.models.hama import phoneme_tokens
        from edgespec.speech.recognize import FRONTEND, TOKENS

        frontend, encoder = load_conformer_source(recipe.model.source)
        args = encoder.args
        tokens = phoneme_tokens()
        if len(tokens) != args.vocab_size:
            from edgespec.errors import EdgespecError

            raise EdgespecError(f"the model has {args.vocab_size} outputs but hama's phoneme vocabulary {len(tokens)} tokens")

        stage("normsearch")
        report_files: list[str] = []
        if recipe.numerics.search:
            from edgespec.numerics.search import choices_of, write_report
            from edgespec.speech.numerics import asr_normsearch

            search = asr_normsearch(frontend, encoder, recipe.numerics)
            report_files = write_report(search, stage_dir)
            if recipe.quant.scheme == recipe.numerics.format:
                from edgespec.numerics.stable_norm import stabilize_norms_

                stabilize_norms_(encoder, choices_of(search))

        stage("quantize")
        from edgespec.quant import quantize_model_

        quantize_model_(encoder, recipe.quant)

        stage("export")
        from edgespec.speech.program import AsrMeta, export_recognizer, recognizer_module

        takes_waveform = recipe.model.frontend == "program"
        meta = AsrMeta(args.sample_rate, args.hop, args.n_mels, int(recipe.model.max_seconds * args.sample_rate), takes_waveform, args.vocab_size)
        program = export_recognizer(recognizer_module(frontend, encoder, takes_waveform), meta)

        stage("lower")
        from edgespec.export.program import lower_to_executorch

        (stage_dir / B.PROGRAM).write_bytes(lower_to_executorch({"forward": program}, meta))
        (stage_dir / TOKENS).write_text(json.dumps(tokens, ensure_ascii=False))
        if not takes_waveform:
            torch.save(frontend.state_dict(), stage_dir / FRONTEND)
        (stage_dir / "recipe.yaml").write_text(recipe_to_yaml(recipe))
        fields = {
            "task": "asr",
            "model": {"name": "hama-asr-conformer", "source": recipe.model.source, "args": asdict(args)},
            "recipe": recipe.to_dict(),
            "precision": recipe.quant.scheme,
            "methods": sorted(["forward", *meta.constant_methods()]),
            "ctc": {"temperature": recipe.ctc.temperature, "blank_bias": recipe.ctc.blank_bias},
            "streaming": asdict(recipe.streaming),
            "reports": report_files,
        }
        B.write_manifest(stage_dir, fields)  # provisional: the suite opens the staged bundle

        stage("validate")
        validation = None
        if recipe.validate.enabled:
            validation = _validate(stage_dir, recipe, Path(outdir), on_progress)
            fields["reports"] = [*report_files, "report.md", "asr_report.json"]

        stage("package")
        manifest = B.write_manifest(stage_dir, {**fields, "validation": validation})
        stage.stop()
    shutil.rmtree(Path(outdir).resolve().parent / f"{Path(outdir).resolve().name}.rejected", ignore_errors=True)
    return ExportResult(Path(outdir).resolve(), manifest, stage.seconds)


def write_asr_report(report: dict, out_dir: Path) -> None:
    from edgespec.speech.validate import render_markdown

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "asr_report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    (out_dir / "report.md").write_text(render_markdown(report))


def _validate(stage_dir: Path, recipe: AsrRecipe, outdir: Path, on_progress) -> dict:
    from edgespec.harness.gates import GateFailure, GateResult
    from edgespec.speech.validate import validate_asr

    report = validate_asr(stage_dir, recipe, on_progress)
    if not report["passed"]:
        rejected = outdir.resolve().parent / f"{outdir.resolve().name}.rejected"
        write_asr_report(report, rejected)
        raise GateFailure([GateResult(**g) for g in report["gates"] if not g["passed"]], rejected)
    write_asr_report(report, stage_dir)
    return {
        "passed": True,
        "gates": report["gates"],
        **{k: report["overall"][k] for k in ("utterances", "per", "per_chunked", "per_eager_fp32", "wer", "rtf", "chunk_ms_median", "agree_engine")},
    }
