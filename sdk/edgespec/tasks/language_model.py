"""The language-model task: recipe -> program (+ speculative methods) -> validated bundle.

Stages: load -> drafter -> normsearch -> quantize -> export -> lower (here), then validate and
package (edgespec.tasks.pipeline.run_export). With trained drafter weights (recipe `drafter.weights`)
the program gets the speculative methods next to `forward` and the bundle carries the
weights; without, it is autoregressive only. The normalizer search report always goes into
the bundle; its choices are swapped into the model when the program runs in the searched
format (quant.scheme fp16).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from edgespec.config import Recipe
from edgespec.manifest import (
    LAYOUT,
    GateResult,
    LmManifest,
    LmModelInfo,
    LmValidation,
    QuantizationInfo,
    SpeculativeInfo,
    TokenizerInfo,
    ineffective_quant_fields,
    rerounded,
)
from edgespec.tasks.pipeline import ExportResult, StageClock

DESCRIPTION = (
    "a causal language model (Llama, Qwen2, Qwen3 families: SmolLM2, Llama 3.x, Qwen2.5, Qwen3) for text generation, with optional speculative decoding"
)
RECIPE = Recipe
STAGES = ("load", "drafter", "normsearch", "quantize", "export", "lower")


def build_bundle_files(recipe: Recipe, stage_dir: Path, stage: StageClock) -> LmManifest:
    """The program, tokenizer and (speculative) drafter weights into `stage_dir`."""
    stage("load")
    from edgespec.models.load import build_model, read_source

    src = read_source(recipe.model.source, recipe.model.max_seq_len)
    model = build_model(src)

    stage("drafter")
    spec = None
    if recipe.drafter.weights:
        from edgespec.speculative.drafters import drafting_vocabulary, load_drafter, save_drafter
        from edgespec.speculative.step import SpecProgram
        from edgespec.speculative.tree import Tree

        drafter = load_drafter(recipe.drafter.weights, model, expect=recipe.drafter)  # recipe and file must agree
        draft_ids = drafting_vocabulary(recipe.drafter.weights, src, recipe.drafter.draft_vocab)
        save_drafter(stage_dir / LAYOUT.drafter, drafter.params, recipe.drafter, draft_ids)  # the bundle carries them (edgespec tune)
        spec = SpecProgram(drafter, Tree(recipe.drafter.tree), draft_ids).eval()

    stage("normsearch")
    report_files: list[str] = []
    if recipe.numerics.search:
        from edgespec.models.load import tokenizer_of
        from edgespec.numerics.search import choices_of, run_normsearch, write_search_report

        search = run_normsearch(model, tokenizer_of(src), recipe.numerics, recipe.model.chat_template)
        report_files = write_search_report(search, stage_dir)
        if recipe.quant.scheme == recipe.numerics.format:
            from edgespec.numerics.stable_norm import stabilize_norms_

            stabilize_norms_(model, choices_of(search))

    stage("quantize")
    from edgespec.quant import plan_quantization, quantize_

    # the whole program at once: the base model by the recipe, the drafter's parts by their policies
    program = spec if spec is not None else model
    quant_summary = quantize_(program, plan_quantization(program, recipe.quant, src.blocks, src.file_types, base=model))

    stage("export")
    from edgespec.bundle import runtime_needs
    from edgespec.export.lowering import ProgramMeta, export_forward, export_with_next_token, lower_to_executorch, tokens_per_call
    from edgespec.export.swaps import program_ops

    windowed = bool(src.args.local_layers) and src.args.sliding_window < recipe.model.max_seq_len
    call_tokens = tokens_per_call(recipe.model.max_seq_len, recipe.export.prefill_chunk)
    ops = program_ops(recipe.quant, recipe.export.step_attention, src.args.head_dim, speculative=spec is not None, windowed=windowed)
    slots = recipe.export.batch_slots
    if slots > 1:  # every method over the same caches, now of `slots` sequences
        from edgespec.models.llama import with_batch_slots_

        with_batch_slots_(model, slots)
    if spec is not None:
        from edgespec.export.spec_program import export_spec_methods, spec_meta

        programs = export_spec_methods(spec, ops.attention, call_tokens, ops.glue)
    elif recipe.quant.head_screen:
        programs = export_with_next_token(model, recipe.model.max_seq_len, ops.attention, call_tokens, ops.glue)
    else:
        programs = {"forward": export_forward(model, recipe.model.max_seq_len, ops.attention, call_tokens, ops.glue)}
    if slots > 1:  # a call: one row per sequence beside a prompt chunk of forward's size
        from edgespec.export import constants as C
        from edgespec.export.lowering import export_decode_rows

        programs[C.DECODE_ROWS] = export_decode_rows(model, ops.attention, call_tokens + slots, ops.glue)

    stage("lower")
    bos = src.bos_id if src.bos_id is not None else src.eos_ids[0]
    meta = ProgramMeta(
        recipe.model.max_seq_len, src.args.vocab_size, src.args.n_layers, bos, src.eos_ids, spec_meta(spec) if spec is not None else None, call_tokens, slots
    )
    lowered = lower_to_executorch(programs, meta, xnnpack=ops.xnnpack, separate_base=recipe.export.separate_base)
    needs = runtime_needs(lowered.program)
    (stage_dir / LAYOUT.program).write_bytes(lowered.program)
    for name, data in lowered.data.items():  # base.ptd: the base model's weights (export.separate_base)
        (stage_dir / name).write_bytes(data)
    (stage_dir / LAYOUT.tokenizer).write_text(src.tokenizer_json)
    return LmManifest(
        model=LmModelInfo(name=src.name, source=recipe.model.source, **asdict(src.args)),
        recipe=recipe,
        precision=recipe.quant.scheme,
        quantization=QuantizationInfo(**quant_summary.as_dict()),
        reports=tuple(report_files),
        methods=tuple(sorted([*programs, *meta.constant_methods()])),
        program_data=LAYOUT.program_data if lowered.data else None,
        runtime=needs,
        speculative=_speculative_info(recipe, meta),
        tokenizer=TokenizerInfo(
            file=LAYOUT.tokenizer,
            chat_template=src.chat_template if recipe.model.chat_template else None,
            bos_id=src.bos_id,
            eos_ids=tuple(src.eos_ids),
            add_bos=src.add_bos,
        ),
    )


def _speculative_info(recipe: Recipe, meta) -> SpeculativeInfo | None:
    if meta.spec is None:
        return None
    s = recipe.drafter
    return SpeculativeInfo(
        drafter=s.kind,
        mode=s.mode,
        draft_depth=meta.spec.n_streams,
        top_layers=s.n_layers,
        tree_branching=tuple(meta.spec.branching),
        tree_parents=tuple(meta.spec.parents),
        weights=LAYOUT.drafter,  # a file in the bundle; the recipe names where they came from
        draft_vocab=s.draft_vocab,
        step_attention=recipe.export.step_attention,
        lookup=recipe.validate.lookup,  # what validation measured is how the bundle decodes by default
    )


def run_validation(bundle_dir: Path, recipe: Recipe, on_progress: Callable[[str, int, int], None] = lambda *a: None) -> dict:
    """The harness's report of the bundle's program on the recipe's suites, fidelity and gates."""
    from edgespec.harness.validate import validate_bundle

    return validate_bundle(bundle_dir, recipe.validate, on_progress=on_progress)


def write_validation_report(report: dict, out_dir: Path, bundle: str | None = None) -> list[str]:
    """report.json, report.md and the plots into `out_dir`; `bundle`: where the bundle lands
    (an export writes its report before the staged bundle is renamed into place)."""
    from edgespec.harness.report import write_report as write

    return write(report if bundle is None else {**report, "bundle": bundle}, out_dir)


def summarize_validation(report: dict) -> LmValidation:
    """What the manifest keeps of a passed validation report."""
    o = report["overall"]
    return LmValidation(
        passed=True,
        gates=tuple(GateResult(**g) for g in report["gates"]),
        prompts=o["prompts"],
        score=o["score"],
        reference_score=o.get("reference_score"),
        ar_tokens_per_s=o["ar"]["tokens_per_s"],
        spec=o.get("spec"),
        lossless=o["lossless"],
        fidelity=report.get("fidelity"),
        peak_rss_mb=report["peak_rss_mb"],
    )


def export_summary(result: ExportResult) -> str:
    """The line `edgespec export` prints when the bundle is written."""
    m: LmManifest = result.manifest
    size_mb = m.file_bytes(LAYOUT.program) / 1e6
    total = sum(result.stage_seconds.values())
    parts = ", ".join(f"{k} {v:.0f}s" for k, v in result.stage_seconds.items())
    checked = ""
    v = m.validation
    if v is not None:
        spec = f", spec {v.spec['tokens_per_s']:.1f} tok/s ({v.spec['speedup']:.2f}x, lossless {v.lossless})" if v.spec else ""
        ref = f" (fp32 base {v.reference_score:.3f})" if v.reference_score is not None else ""
        f = v.fidelity
        fid = f", held-out vs fp32: top-1 {f.top1_agreement:.1%}, perplexity {f.perplexity_ratio:.3f}x, KL {f.kl_mean:.4f}" if f else ""
        bar = m.recipe.validate.gates.min_score_ratio
        ratio = v.score / v.reference_score if v.reference_score else None
        noisy = f" (score {ratio:.2f}x, below the {bar}x bar but within the prompts' noise)" if ratio is not None and bar > 0 and ratio < bar else ""
        checked = f"; validated on {v.prompts} prompts: score {v.score:.3f}{ref}{fid}, AR {v.ar_tokens_per_s:.1f} tok/s{spec}, gates passed{noisy}; report {result.bundle_dir}/{LAYOUT.report_md}"
    q = m.quantization
    rounded = ", ".join(f"{n} layer{'' if n == 1 else 's'} {what}" for n, what in rerounded(q.rounded_from, q.rounding_error)) if q else ""
    rounded = f"; {rounded}" if rounded else ""
    rounded += "".join(f"; {note}" for note in ineffective_quant_fields(m.recipe.quant, q))
    return f"wrote {result.bundle_dir} ({m.precision}, {LAYOUT.program} {size_mb:.1f} MB) in {total:.0f}s [{parts}]{rounded}{checked}"


def describe(m: LmManifest) -> list[str]:
    """`edgespec info`'s lines about the model."""
    a = m.model
    lines = [f"model       {a.name} from {a.source}: {a.n_layers} layers, dim {a.dim}, vocab {a.vocab_size}, context {a.max_seq_len}"]
    if m.speculative is not None:
        s = m.speculative
        lines.append(f"speculative {s.drafter} drafter ({s.mode}), tree {list(s.tree_branching)}, draft vocabulary {s.draft_vocab or 'full'}")
    if m.program_data is not None and m.program_data in m.files:  # export.separate_base
        f, p = m.files[m.program_data], m.files[LAYOUT.program]
        lines.append(
            f"shared      {m.program_data} ({f.bytes / 1e6:.1f} MB, sha256 {f.sha256[:16]}…): the base model's weights, one copy for every task "
            f"program of this base with the same sha256; {LAYOUT.program} ({p.bytes / 1e6:.1f} MB) holds this task's adapters and streams"
        )
    lines.append(f"use         {m.USE.format(bundle='BUNDLE')}")
    return lines


def verify(bundle_dir: Path, m: LmManifest) -> tuple[dict, str]:
    """Load the program and check it against the manifest: (its metadata, the summary line)."""
    from edgespec.runtime.session import verify_program

    meta = verify_program(bundle_dir, m)
    spec = f", spec tree {meta['get_spec_branching']}" if "get_spec_branching" in meta else ""
    return meta, (
        f"program answers {len(meta)} metadata methods (context {meta['get_max_context_len']}, {meta['get_max_seq_len']} tokens a call, vocab {meta['get_vocab_size']}, eos {meta['get_eos_ids']}{spec})"
    )


def render_validation(report: dict) -> str:
    """The validation report as the table `edgespec validate` prints."""
    from edgespec.harness.report import lossless_text

    o = report["overall"]
    lines = [f"{'suite':<14}{'metric':<18}{'score':>7}{'fp32':>7}{'AR tok/s':>10}{'spec tok/s':>11}{'speedup':>9}{'tok/call':>9}{'lossless':>10}"]
    for name, s in [*report["suites"].items(), ("all", {**o, "metric": "mean"})]:
        sp = s.get("spec") or {}
        ref = s.get("reference_score")
        lines.append(
            f"{name:<14}{s['metric']:<18}{s['score']:>7.3f}{'' if ref is None else f'{ref:.3f}':>7}{s['ar']['tokens_per_s']:>10.1f}"
            f"{sp.get('tokens_per_s', float('nan')):>11.1f}{sp.get('speedup', float('nan')):>9.3f}{sp.get('tokens_per_call', float('nan')):>9.3f}"
            f"{lossless_text(s['lossless']) if sp else '':>10}"
        )
    lines.append("peak RSS " + ", ".join(f"{k} {v:.0f} MB" for k, v in report["peak_rss_mb"].items()) + f"; program {report['program_bytes'] / 1e6:.1f} MB")
    f = report.get("fidelity")
    if f:
        lines.append(
            f"fidelity vs fp32 source ({f['tokens']} held-out tokens): top-1 {f['top1_agreement']:.1%}, perplexity {f['perplexity']:.3f} vs {f['reference_perplexity']:.3f}"
            f" ({f['perplexity_ratio']:.4f}x), KL mean {f['kl_mean']:.4f} p99 {f['kl_p99']:.4f}"
        )
        if f.get("text"):
            lines.append(f"  held-out text: {f['text']}")
    for g in report["gates"]:
        lines.append(f"gate {'pass' if g['passed'] else 'FAIL'}: {g['message']}")
    for g in report.get("gates_not_judged", ()):
        lines.append(f"gate not judged: {g['name']}: {g['why']}")
    lines.append("validation " + ("passed" if report["passed"] else "FAILED"))
    return "\n".join(lines)
