"""`edgespec export`: recipe -> bundle, stage by stage.

load -> streams -> normsearch -> quantize -> torch.export -> lower to ExecuTorch -> validate
-> package (atomic). The validate stage runs the finished program on the recipe's task suites
(edgespec.harness) and refuses to package when a gate fails: the bundle is not written, the
report goes to `<outdir>.rejected/` so the user can see why. With trained stream weights (recipe `streams.weights`) the program gets the
speculative methods next to `forward` and the bundle carries the weights (`streams.pt`);
without, it is autoregressive only.
The normalizer search report always goes into the bundle; its choices are swapped into
the model when the program runs in the searched format (quant.scheme fp16).
Each stage reports through `on_stage(name)`; the function returns stats, it prints nothing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgespec.config import Recipe, recipe_to_yaml

STAGES = ("load", "streams", "normsearch", "quantize", "export", "lower", "validate", "package")


@dataclass
class ExportResult:
    bundle_dir: Path
    manifest: dict
    stage_seconds: dict[str, float]


def export_bundle(
    recipe: Recipe, outdir: str | Path, on_stage: Callable[[str], None] = lambda s: None, on_progress: Callable[[str, int, int], None] = lambda *a: None
) -> ExportResult:
    """Run the recipe and write the bundle to `outdir` (replaced atomically)."""
    from edgespec import bundle as B

    stage = _StageClock(on_stage)
    # check the output location before the slow work
    with B.staged_bundle(outdir) as stage_dir:
        stage("load")
        from edgespec.models.load import build_model, read_source

        src = read_source(recipe.model.source, recipe.model.max_seq_len)
        model = build_model(src)

        stage("streams")
        spec = None
        if recipe.streams.weights:
            from edgespec.speculative.drafters import drafting_vocabulary, load_drafter, save_drafter
            from edgespec.speculative.step import SpecProgram
            from edgespec.speculative.tree import Tree

            drafter = load_drafter(recipe.streams.weights, model, expect=recipe.streams)  # recipe and file must agree
            draft_ids = drafting_vocabulary(recipe.streams.weights, src, recipe.streams.draft_vocab)
            save_drafter(stage_dir / B.STREAMS, drafter.params, recipe.streams, draft_ids)  # the bundle carries them (edgespec tune)
            spec = SpecProgram(drafter, Tree(recipe.streams.tree), draft_ids).eval()

        stage("normsearch")
        report_files: list[str] = []
        if recipe.numerics.search:
            from edgespec.models.load import tokenizer_of
            from edgespec.numerics.search import choices_of, run_normsearch, write_report

            search = run_normsearch(model, tokenizer_of(src), recipe.numerics)
            report_files = write_report(search, stage_dir)
            if recipe.quant.scheme == recipe.numerics.format:
                from edgespec.numerics.stable_norm import stabilize_norms_

                stabilize_norms_(model, choices_of(search))

        stage("quantize")
        from edgespec.quant import quantize_model_

        quant_summary = quantize_model_(model, recipe.quant, src.blocks)
        if spec is not None and spec.draft_head is not None:
            # a slice of the lm head that only drafts: 4-bit whatever the head's precision (a
            # cheaper draft; verification uses the full head)
            quantize_model_(spec.draft_head, dataclasses.replace(recipe.quant, head_bits=4))
        if spec is not None and recipe.quant.scheme == "fp16":
            spec.streams.half()  # stream adapters follow the activations' dtype

        stage("export")
        from edgespec.export.program import ProgramMeta, export_forward, lower_to_executorch

        if spec is not None:
            from edgespec.export.spec_program import export_spec_methods, spec_meta

            programs = export_spec_methods(spec, rows_per_call=recipe.export.step_attention == "rows")
        else:
            programs = {"forward": export_forward(model, recipe.model.max_seq_len)}

        stage("lower")
        bos = src.bos_id if src.bos_id is not None else src.eos_ids[0]
        meta = ProgramMeta(recipe.model.max_seq_len, src.args.vocab_size, src.args.n_layers, bos, src.eos_ids, spec_meta(spec) if spec is not None else None)
        pte = lower_to_executorch(programs, meta)

        stage("validate")
        (stage_dir / B.PROGRAM).write_bytes(pte)
        (stage_dir / B.TOKENIZER).write_text(src.tokenizer_json)
        (stage_dir / "recipe.yaml").write_text(recipe_to_yaml(recipe))
        fields = {
            "model": {"name": src.name, "source": recipe.model.source, **_args_dict(src.args)},
            "recipe": recipe.to_dict(),
            "precision": recipe.quant.scheme,
            "quantization": quant_summary.as_dict(),
            "reports": report_files,
            "methods": sorted([*programs, *meta.constant_methods()]),
            "speculative": _spec_manifest(recipe, meta),
            "tokenizer": {
                "file": B.TOKENIZER,
                "chat_template": src.chat_template if recipe.model.chat_template else None,
                "bos_id": src.bos_id,
                "eos_ids": list(src.eos_ids),
                "add_bos": src.add_bos,
            },
        }
        B.write_manifest(stage_dir, fields)  # provisional: the harness opens the staged bundle
        validation = None
        if recipe.validate.enabled:
            validation = _validate(stage_dir, recipe, Path(outdir), on_progress)
            fields["reports"] = [*report_files, *validation.pop("files")]

        stage("package")
        manifest = B.write_manifest(stage_dir, {**fields, "validation": validation})
        stage.stop()
    import shutil

    shutil.rmtree(Path(outdir).resolve().parent / f"{Path(outdir).resolve().name}.rejected", ignore_errors=True)  # a stale rejection
    return ExportResult(Path(outdir).resolve(), manifest, stage.seconds)


def _validate(stage_dir: Path, recipe: Recipe, outdir: Path, on_progress) -> dict:
    """Run the harness on the staged bundle; report files go into it. A failed gate raises
    GateFailure (so the bundle is not written) after saving the report next to outdir."""
    from edgespec.harness.gates import GateFailure, GateResult
    from edgespec.harness.report import write_report
    from edgespec.harness.validate import validate_bundle

    report = validate_bundle(stage_dir, recipe.validate, source=recipe.model.source, on_progress=on_progress)
    if not report["passed"]:
        rejected = outdir.resolve().parent / f"{outdir.resolve().name}.rejected"
        report["bundle"] = f"(not written: {outdir})"
        write_report(report, rejected)
        failed = [GateResult(**g) for g in report["gates"] if not g["passed"]]
        raise GateFailure(failed, rejected)
    report["bundle"] = str(outdir.resolve())  # where it lands, not the staging directory
    files = write_report(report, stage_dir)
    o = report["overall"]
    return {
        "passed": True,
        "gates": report["gates"],
        "prompts": o["prompts"],
        "score": o["score"],
        "reference_score": o.get("reference_score"),
        "ar_tokens_per_s": o["ar"]["tokens_per_s"],
        "spec": o.get("spec"),
        "lossless": o["lossless"],
        "fidelity": report.get("fidelity"),
        "peak_rss_mb": report["peak_rss_mb"],
        "files": files,
    }


class _StageClock:
    """Calling it with a stage name ends the previous stage and starts that one."""

    def __init__(self, on_stage: Callable[[str], None]):
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


def _spec_manifest(recipe: Recipe, meta) -> dict | None:
    from edgespec.bundle import STREAMS

    if meta.spec is None:
        return None
    s = recipe.streams
    return {
        "drafter": s.drafter,
        "mode": s.mode,
        "n_streams": meta.spec.n_streams,
        "msa_layers": s.n_layers,
        "tree_branching": list(meta.spec.branching),
        "tree_parents": list(meta.spec.parents),
        "weights": STREAMS,  # a file in the bundle; the recipe names where they came from
        "draft_vocab": s.draft_vocab,
        "step_attention": recipe.export.step_attention,
    }


def _args_dict(args) -> dict:
    from dataclasses import asdict

    return asdict(args)
