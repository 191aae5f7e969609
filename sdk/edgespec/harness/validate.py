"""`edgespec validate`: run a bundle's program on the task suites and judge it by the gates.

Per prompt, the program decodes greedily with every decoder it has (autoregressive, and
speculative when it has `spec_step`; where it has `next_token`, autoregressive through it and
through `forward`'s logits), side by side (edgespec.runtime.speed). The autoregressive answer
is scored with the suite's metric; the other decoders' answers must be the same tokens
(losslessness). The fp32 base model answers the same prompts (cached) for the
score-ratio gate, and on held-out text the program's next-token distributions are compared
with the fp32 source model's (edgespec.harness.fidelity) for the fidelity gates; one fp32
model serves both. A Shared-mode program is measured against its own fp32 fine-tuned model
(the base with its adapters merged); a task suite (``task:NAME``) reports each of the task's
metrics with its 95% interval. `measure_bundle` measures (typed `Measurements`), `judge` applies the gates
and assembles the report, a dict; nothing is printed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgespec.config import GatesConfig, ValidateConfig
from edgespec.errors import EdgespecError
from edgespec.harness.answer_likelihood import detectable_increase, increase_p_value
from edgespec.harness.gates import check_gates
from edgespec.harness.score_noise import detectable_ratio, shortfall_p_value
from edgespec.harness.suites import Example, load_suite, suite_source
from edgespec.manifest import LAYOUT, Fidelity, LmManifest

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class Measurements:
    """What `measure_bundle` measured, before any gate judged it; `examples`, `suites` and
    `overall` are report.json's fields (docs/validation.md)."""

    bundle: Path
    manifest: LmManifest
    program_bytes: int
    examples: list[dict]
    suites: dict[str, dict]
    overall: dict[str, Any]
    fidelity: Fidelity | None
    peak_rss_mb: dict[str, float]
    normalizer_events: int | None
    normalizer_note: str | None  # why no pre-normalizer can be clean (inputs beyond the searched format)


def validate_bundle(bundle_dir: str | Path, cfg: ValidateConfig, *, on_progress: Progress = lambda *a: None) -> dict:
    """The validation report of a bundle (see docs/validation.md for every field); the fp32
    reference is the bundle recipe's `model.source`."""
    return judge(measure_bundle(bundle_dir, cfg, on_progress=on_progress), cfg)


def judge(m: Measurements, cfg: ValidateConfig) -> dict:
    """The report: the measurements, and the recipe's gates on them."""
    report = {
        "bundle": str(m.bundle.resolve()),
        "model": m.manifest.model.name,
        "precision": m.manifest.precision,
        "quantization": None if m.manifest.quantization is None else m.manifest.quantization.to_dict(),
        "speculative": None if m.manifest.speculative is None else m.manifest.speculative.to_dict(),
        "config": dataclasses.asdict(cfg),
        "program_bytes": m.program_bytes,
        "peak_rss_mb": m.peak_rss_mb,
        "normalizer_events": m.normalizer_events,
        "normalizer_note": m.normalizer_note,
        "fidelity": None if m.fidelity is None else m.fidelity.to_dict(),
        "suites": m.suites,
        "overall": m.overall,
        "examples": m.examples,
    }
    verdicts = check_gates(report, cfg.gates)
    report["gates"] = [r.to_dict() for r in verdicts.judged]
    report["gates_not_judged"] = [r.to_dict() for r in verdicts.not_judged]
    report["passed"] = verdicts.passed
    return report


def measure_bundle(bundle_dir: str | Path, cfg: ValidateConfig, *, on_progress: Progress = lambda *a: None) -> Measurements:
    """Run the bundle's program on the suites (every decoder, side by side), the fp32 base model
    on the same prompts and held-out text (`cfg.reference`), and each decoder in a fresh
    process for its peak RSS."""
    from edgespec.harness.reference import load_reference
    from edgespec.runtime.session import bundle_lookup, decoder, open_bundle

    bundle_dir = Path(bundle_dir)
    manifest, tokenizer, runner = open_bundle(bundle_dir)
    examples = [ex for name in cfg.suites for ex in load_suite(name, cfg.prompts_per_suite, cfg.seed)]
    ids = _encode(examples, manifest, tokenizer, runner)
    # speculative decoding as the bundle decodes by default (its hybrid draft's lookup): what min_speedup judges
    decoders = dict([decoder(runner, "ar")] + ([decoder(runner, "spec", manifest=manifest)] if runner.has_spec else []))
    if runner.has_next_token:  # "ar" reads the screened head (next_token); its tokens checked against forward's logits
        decoders["ar-logits"] = decoder(runner, "ar-logits")[1]
    if cfg.lookup and runner.has_spec:
        decoders["lookup"] = decoder(runner, "spec", cfg.lookup)[1]
    rows = _run_suites(examples, ids, decoders, tokenizer, runner, cfg.runs, on_progress)
    # the fp32 model, loaded at most once for the reference answers and the fidelity
    spec = manifest.speculative
    adapters = bundle_dir / spec.weights if spec is not None and spec.mode == "shared" else None  # a fine-tune: its own fp32 model
    reference = functools.cache(lambda: load_reference(manifest.recipe.model.source, runner.max_seq_len, adapters))
    ref_scores = None
    if cfg.reference == "fp32":
        ref_scores = _reference_answers(rows, examples, ids, tokenizer, runner, manifest.recipe.model.source, reference, on_progress, adapters)
        _answer_likelihoods(rows, examples, ids, tokenizer, runner, reference(), on_progress)
    suites, overall = _summaries(rows, ref_scores, cfg.gates)
    _task_intervals(suites, rows, ref_scores is not None)
    if isinstance(overall.get("spec"), dict):
        overall["spec"] = {**overall["spec"], "lookup": bundle_lookup(manifest)}  # the draft it was measured with
    fidelity = None
    if cfg.reference == "fp32" and cfg.fidelity_chunks:
        fidelity = _fidelity(runner, tokenizer, reference(), cfg.fidelity_chunks, on_progress)
    return Measurements(
        bundle=bundle_dir,
        manifest=manifest,
        program_bytes=runner.path.stat().st_size,
        examples=rows,
        suites=suites,
        overall=overall,
        fidelity=fidelity,
        peak_rss_mb=_peak_rss(bundle_dir, [m for m in ("ar", "spec") if m in decoders], ids[:2], on_progress),
        **_normalizer_search(bundle_dir),
    )


def _encode(examples: list[Example], manifest: LmManifest, tokenizer, runner) -> list[list[int]]:
    """Each example's prompt ids; EdgespecError for one that does not fit the program's context
    with its answer budget (and a speculative step's room)."""
    from edgespec.models.tokenizer import encode_prompt

    room = (runner.tree_size + runner.depth) if runner.has_spec else 0
    ids = []
    for ex in examples:
        p = encode_prompt(tokenizer, ex.prompt, manifest.tokenizer.chat_template is not None)
        if len(p) + ex.max_new_tokens + room >= runner.max_seq_len:
            raise EdgespecError(
                f"suite example {ex.id}: {len(p)} prompt tokens + {ex.max_new_tokens} new do not fit the program's context of {runner.max_seq_len}"
            )
        ids.append(p)
    return ids


def _run_suites(examples: list[Example], ids: list[list[int]], decoders: dict, tokenizer, runner, runs: int, on_progress: Progress) -> list[dict]:
    """Per example: the autoregressive answer and its score, every decoder's timing."""
    from edgespec.harness.metrics import score
    from edgespec.runtime.speed import measure, row_stats

    budgets = [ex.max_new_tokens for ex in examples]
    measured = measure(decoders, ids, max_new_tokens=budgets, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids, warmup=1, runs=runs)
    rows = []
    for i, (ex, p, res) in enumerate(zip(examples, ids, measured)):
        text = tokenizer.decode(res["ar"].completion_ids)
        rows.append(
            {
                "id": ex.id,
                "suite": ex.suite,
                "metric": ex.metric,
                "prompt_tokens": len(p),
                "prediction": text,
                "reference": ex.reference,
                "score": score(ex.metric, text, ex),
                **ex.extra,
                **row_stats(res, len(p)),
            }
        )
        on_progress("suites", i + 1, len(examples))
    return rows


def _reference_answers(
    rows: list[dict],
    examples: list[Example],
    ids: list[list[int]],
    tokenizer,
    runner,
    source: str,
    reference: Callable[[], Any],
    on_progress: Progress,
    adapters: Path | None = None,
) -> list[float]:
    """The fp32 model's answers (the base, or the fine-tune of `adapters`; cached on disk;
    `reference()` gives the model) into `rows`; their scores."""
    from edgespec.harness.metrics import score
    from edgespec.harness.reference import reference_completions

    done = [0]

    def tick() -> None:
        done[0] += 1
        on_progress("fp32 reference", done[0], len(examples))

    budgets = [ex.max_new_tokens for ex in examples]
    comps = reference_completions(source, runner.max_seq_len, ids, budgets, runner.eos_ids, model=reference, on_done=tick, adapters=adapters)
    ref_scores = [score(ex.metric, tokenizer.decode(c), ex) for ex, c in zip(examples, comps)]
    for row, s, c in zip(rows, ref_scores, comps):
        row["reference_score"] = s
        row["reference_prediction"] = tokenizer.decode(c)
    return ref_scores


def _answer_likelihoods(rows: list[dict], examples: list[Example], ids: list[list[int]], tokenizer, runner, model, on_progress: Progress) -> None:
    """Each prompt's reference answer's NLL under the program and the fp32 source model, into
    `rows` (harness/answer_likelihood.py)."""
    from edgespec.harness.answer_likelihood import answer_tokens, program_nll, reference_nll

    for i, (row, ex, p) in enumerate(zip(rows, examples, ids)):
        answer = answer_tokens(tokenizer, ex.reference)[: max(runner.max_seq_len - len(p) - 1, 0)]
        if answer:
            row["answer_nll"] = round(program_nll(runner.forward, p, answer), 5)
            row["reference_answer_nll"] = round(reference_nll(model, p, answer), 5)
        on_progress("answer likelihood", i + 1, len(rows))


def _task_intervals(suites: dict[str, dict], rows: list[dict], with_reference: bool) -> None:
    """Into each task suite's entry (``task:NAME``): every metric of the task as (score, low,
    high), a 95% cluster-bootstrap interval over its templates or families
    (harness.metrics.task_scores), for the program's answers and the fp32 reference's."""
    from edgespec.config import TASK_SUITE_PREFIX
    from edgespec.config.lm_sections import parse_task_suite
    from edgespec.corpus.task_data import task_examples
    from edgespec.harness.metrics import task_scores

    for name, entry in suites.items():
        if not name.startswith(TASK_SUITE_PREFIX):
            continue
        items = {x.id: x for x in task_examples(*parse_task_suite(name))}
        sr = [r for r in rows if r["suite"] == name]
        examples = [items[r["id"]] for r in sr]
        for key, field in (("task_scores", "prediction"), ("reference_task_scores", "reference_prediction")):
            if field == "prediction" or with_reference:
                entry[key] = {m: [round(v, 4) for v in s] for m, s in task_scores(examples, [r[field] for r in sr]).items()}


def _summaries(rows: list[dict], ref_scores: list[float] | None, gates: GatesConfig) -> tuple[dict[str, dict], dict[str, Any]]:
    """Per suite and overall: scores (and the fp32 model's), speed, losslessness."""
    from edgespec.runtime.speed import summarize

    suites = {}
    for name in dict.fromkeys(r["suite"] for r in rows):
        sr = [r for r in rows if r["suite"] == name]
        entry = {
            "metric": sr[0]["metric"],
            "source": suite_source(name),
            "score": round(statistics.fmean(r["score"] for r in sr), 4),
            **summarize(sr),
        }
        if ref_scores is not None:
            entry["reference_score"] = round(statistics.fmean(r["reference_score"] for r in sr), 4)
        if "retrieved" in sr[0]:
            entry["retrieval_recall"] = round(statistics.fmean(float(r["retrieved"]) for r in sr), 4)
        suites[name] = entry

    overall = {**summarize(rows), "score": round(statistics.fmean(s["score"] for s in suites.values()), 4)}
    if ref_scores is not None:
        overall["reference_score"] = round(statistics.fmean(s["reference_score"] for s in suites.values()), 4)
        overall["accuracy_drop"] = round(overall["reference_score"] - overall["score"], 4)
        overall["score_ratio"] = round(overall["score"] / overall["reference_score"], 4) if overall["reference_score"] > 0 else None
        # how surely the prompts put the program below the score gate's bar (the gate's test)
        p = shortfall_p_value([r["suite"] for r in rows], [r["score"] for r in rows], ref_scores, gates.min_score_ratio)
        overall["score_shortfall_p"] = round(p, 4)
        power = detectable_ratio([r["suite"] for r in rows], ref_scores, gates.min_score_ratio)  # the test's power at this size
        overall["score_detectable_ratio"] = None if power is None else round(power, 4)
        overall["same_answers"] = f"{sum(r['prediction'] == r['reference_prediction'] for r in rows)}/{len(rows)}"  # paired: AR answer == fp32 answer
    scored = [r for r in rows if "answer_nll" in r]
    if scored:  # the reference answers' likelihood, paired per prompt (harness/answer_likelihood.py)
        increases = [r["answer_nll"] - r["reference_answer_nll"] for r in scored]
        for name, entry in suites.items():
            mine = [r["answer_nll"] - r["reference_answer_nll"] for r in scored if r["suite"] == name]
            if mine:
                entry["answer_nll_increase"] = round(statistics.fmean(mine), 5)
        overall["answer_nll"] = round(statistics.fmean(r["answer_nll"] for r in scored), 5)
        overall["reference_answer_nll"] = round(statistics.fmean(r["reference_answer_nll"] for r in scored), 5)
        overall["answer_nll_increase"] = round(statistics.fmean(increases), 5)
        overall["answer_nll_prompts"] = len(scored)
        overall["answer_nll_increase_p"] = round(increase_p_value(increases, gates.max_answer_nll_increase), 6)
        power = detectable_increase(increases, gates.max_answer_nll_increase)
        overall["answer_nll_detectable"] = None if power is None else round(power, 5)
    return suites, overall


def _fidelity(runner, tokenizer, reference, n_chunks: int, on_progress: Progress) -> Fidelity:
    """The program against the fp32 model `reference` on `n_chunks` held-out chunks."""
    from edgespec.harness.fidelity import CHUNK, measure_fidelity

    ctx = min(CHUNK, runner.max_seq_len)  # a short-context program gets shorter chunks
    total, done = n_chunks * (ctx - ctx // 2 - 1), [0]

    def token() -> None:
        done[0] += 1
        if done[0] % 64 == 0 or done[0] == total:
            on_progress("fidelity", done[0], total)

    return measure_fidelity(runner.forward, reference, tokenizer, n_chunks, ctx, on_token=token)


def _peak_rss(bundle_dir: Path, modes: list[str], prompts: list[list[int]], on_progress: Progress) -> dict[str, float]:
    """Peak RSS (MB) of each decoder in a fresh process, decoding `prompts`."""
    from edgespec.harness.process_measure import peak_rss_fresh

    on_progress("memory", 0, len(modes))
    memory = {}
    for j, mode in enumerate(modes):
        memory[mode] = peak_rss_fresh(str(bundle_dir), mode, prompts, 32)
        on_progress("memory", j + 1, len(modes))
    return memory


def _normalizer_search(bundle_dir: Path) -> dict:
    """normalizer_events: overflow/underflow events of the chosen pre-normalizers, and
    normalizer_note: why, when inputs exceed the searched format (both None without a search report)."""
    p = bundle_dir / LAYOUT.normsearch_json
    if not p.is_file():
        return {"normalizer_events": None, "normalizer_note": None}
    from edgespec.numerics.search import beyond_format_text

    result = json.loads(p.read_text())
    s = result["summary"]
    note = beyond_format_text(result) if s.get("layers_beyond_format") else None  # reports before 2026-12-05 lack it
    return {"normalizer_events": int(s["chosen_events_all_sets"]), "normalizer_note": note}
