"""The speech recognition task (recipe ``task: asr``): Conformer CTC -> program over audio ->
bundle validated on LibriVox sentences.

Stages: load -> normsearch -> quantize -> export -> lower (here), then validate and package
(edgespec.tasks.pipeline.run_export).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from edgespec.config import AsrRecipe
from edgespec.errors import EdgespecError
from edgespec.manifest import LAYOUT, AsrManifest, AsrModelInfo, AsrValidation, GateResult
from edgespec.tasks.pipeline import ExportResult, StageClock

DESCRIPTION = "a Conformer CTC speech recognizer (hama's phoneme model) for 16 kHz audio"
RECIPE = AsrRecipe
STAGES = ("load", "normsearch", "quantize", "export", "lower")


def build_bundle_files(recipe: AsrRecipe, stage_dir: Path, stage: StageClock) -> AsrManifest:
    """The recognizer program, its phoneme tokens (and host front end) into `stage_dir`."""
    stage("load")
    from edgespec.models.conformer import load_conformer_source
    from edgespec.models.hama import phoneme_tokens

    frontend, encoder = load_conformer_source(recipe.model.source)
    args = encoder.args
    tokens = phoneme_tokens()
    if len(tokens) != args.vocab_size:
        raise EdgespecError(f"the model has {args.vocab_size} outputs but hama's phoneme vocabulary {len(tokens)} tokens")

    stage("normsearch")
    report_files: list[str] = []
    if recipe.numerics.search:
        from edgespec.numerics.search import choices_of, write_search_report
        from edgespec.speech.norm_calibration import asr_normsearch

        search = asr_normsearch(frontend, encoder, recipe.numerics)
        report_files = write_search_report(search, stage_dir)
        if recipe.quant.scheme == recipe.numerics.format:
            from edgespec.numerics.stable_norm import stabilize_norms_

            stabilize_norms_(encoder, choices_of(search))

    stage("quantize")
    from edgespec.quant import plan_quantization, quantize_

    quantize_(encoder, plan_quantization(encoder, recipe.quant))

    stage("export")
    from edgespec.speech.recognizer_program import AsrMeta, export_recognizer, recognizer_module

    takes_waveform = recipe.model.frontend == "program"
    meta = AsrMeta(args.sample_rate, args.hop, args.n_mels, int(recipe.model.max_seconds * args.sample_rate), takes_waveform, args.vocab_size)
    program = export_recognizer(recognizer_module(frontend, encoder, takes_waveform), meta)

    stage("lower")
    from edgespec.bundle import runtime_needs
    from edgespec.export.lowering import lower_to_executorch

    lowered = lower_to_executorch({"forward": program}, meta).program
    (stage_dir / LAYOUT.program).write_bytes(lowered)
    (stage_dir / LAYOUT.phoneme_tokens).write_text(json.dumps(tokens, ensure_ascii=False))
    if not takes_waveform:
        torch.save(frontend.state_dict(), stage_dir / LAYOUT.frontend)
    return AsrManifest(
        model=AsrModelInfo(name="hama-asr-conformer", source=recipe.model.source, args=asdict(args)),
        recipe=recipe,
        precision=recipe.quant.scheme,
        methods=tuple(sorted(["forward", *meta.constant_methods()])),
        ctc={"temperature": recipe.ctc.temperature, "blank_bias": recipe.ctc.blank_bias},
        streaming=asdict(recipe.streaming),
        reports=tuple(report_files),
        runtime=runtime_needs(lowered),
    )


def run_validation(bundle_dir: Path, recipe: AsrRecipe, on_progress: Callable[[str, int, int], None] = lambda *a: None) -> dict:
    """The asr suite's report: phoneme and word error rates, real-time factor, gates."""
    from edgespec.speech.asr_suite import validate_asr

    return validate_asr(bundle_dir, recipe, on_progress)


def write_validation_report(report: dict, out_dir: Path, bundle: str | None = None) -> list[str]:
    """asr_report.json and report.md into `out_dir` (`bundle`: unused, the report names no bundle)."""
    from edgespec.speech.asr_suite import render_asr_markdown

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / LAYOUT.asr_report_json).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    (out_dir / LAYOUT.report_md).write_text(render_asr_markdown(report))
    return [LAYOUT.report_md, LAYOUT.asr_report_json]


def summarize_validation(report: dict) -> AsrValidation:
    """What the manifest keeps of a passed asr report: its gates and every overall number the record has."""
    kept = {f.name for f in dataclasses.fields(AsrValidation)} - {"passed", "gates"}
    return AsrValidation(passed=True, gates=tuple(GateResult(**g) for g in report["gates"]), **{k: report["overall"][k] for k in kept})


def _summary_line(v) -> str:
    """PER/WER/RTF of an AsrValidation or a report's overall (same names)."""
    get = (lambda k: v[k]) if isinstance(v, dict) else (lambda k: getattr(v, k))
    return (
        f"{get('utterances')} utterances: PER {100 * get('per'):.1f}% (fp32 eager {100 * get('per_eager_fp32'):.1f}%), "
        f"streaming {100 * get('per_chunked'):.1f}%, WER {100 * get('wer'):.1f}%, RTF {get('rtf'):.4f}"
    )


def export_summary(result: ExportResult) -> str:
    m: AsrManifest = result.manifest
    size_mb = m.file_bytes(LAYOUT.program) / 1e6
    total = sum(result.stage_seconds.values())
    parts = ", ".join(f"{k} {v:.0f}s" for k, v in result.stage_seconds.items())
    checked = f"; validated on {_summary_line(m.validation)}, gates passed; report {result.bundle_dir}/{LAYOUT.report_md}" if m.validation else ""
    return f"wrote {result.bundle_dir} ({m.precision}, {LAYOUT.program} {size_mb:.1f} MB) in {total:.0f}s [{parts}]{checked}"


def describe(m: AsrManifest) -> list[str]:
    a = m.model.args
    return [
        f"model       {m.model.name} from {m.model.source}: speech recognition, {a['n_blocks']} Conformer blocks, dim {a['dim']}, "
        f"{a['vocab_size']} phoneme tokens, {a['sample_rate']} Hz",
        f"front end   {m.recipe.model.frontend}; streaming {m.streaming}",
        f"use         {m.USE.format(bundle='BUNDLE')}",
    ]


def verify(bundle_dir: Path, m: AsrManifest) -> tuple[dict, str]:
    from edgespec.speech.recognize import verify_asr_program

    meta = verify_asr_program(bundle_dir, m)
    return meta, (
        f"speech program answers {len(meta)} metadata methods ({meta['get_sample_rate']} Hz, up to {meta['get_max_samples'] / meta['get_sample_rate']:.0f} s, "
        f"{meta['get_vocab_size']} tokens)"
    )


def render_validation(report: dict) -> str:
    gates = ", ".join(f"{g['name']} {'ok' if g['passed'] else 'FAILED'} ({g['message']})" for g in report["gates"])
    return f"asr: {_summary_line(report['overall'])}; {gates}"
