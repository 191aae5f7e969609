"""`edgespec validate`: run a bundle's program on the task suites and judge it by the gates.

Per prompt, the program decodes greedily with every decoder it has (autoregressive, and
speculative when it has `spec_step`), side by side (edgespec.runtime.speed). The
autoregressive answer is scored with the suite's metric; the speculative answers must be the
same tokens (losslessness). The fp32 base model answers the same prompts (cached) for the
score-ratio gate, and on held-out text the program's next-token distributions are compared
with the fp32 source model's (edgespec.harness.fidelity) for the fidelity gates. Returns the
report as a dict; prints nothing.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from pathlib import Path

from edgespec.config import ValidateConfig
from edgespec.errors import EdgespecError
from edgespec.harness.gates import as_dicts, check_gates
from edgespec.harness.score_noise import shortfall_p_value
from edgespec.harness.suites import SUITES, Example, load_suite

Progress = Callable[[str, int, int], None]  # (phase, done, total)


def _examples(cfg: ValidateConfig) -> list[Example]:
    return [ex for name in cfg.suites for ex in load_suite(name, cfg.prompts_per_suite, cfg.seed)]


def validate_bundle(bundle_dir: str | Path, cfg: ValidateConfig, *, on_progress: Progress = lambda *a: None) -> dict:
    """The validation report of a bundle (see docs/validation.md for every field); the fp32
    reference is the bundle recipe's `model.source`."""
    from edgespec.harness.metrics import score
    from edgespec.harness.process_measure import peak_rss_fresh
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.session import decoder, open_bundle
    from edgespec.runtime.speed import measure, row_stats, summarize

    bundle_dir = Path(bundle_dir)
    manifest, tokenizer, runner = open_bundle(bundle_dir)
    examples = _examples(cfg)
    room = (runner.tree_size + runner.depth) if runner.has_spec else 0
    ids = []
    for ex in examples:
        p = encode_prompt(tokenizer, ex.prompt, manifest.tokenizer.chat_template is not None)
        if len(p) + ex.max_new_tokens + room >= runner.max_seq_len:
            raise EdgespecError(
                f"suite example {ex.id}: {len(p)} prompt tokens + {ex.max_new_tokens} new do not fit the program's context of {runner.max_seq_len}"
            )
        ids.append(p)

    decoders = dict([decoder(runner, "ar")] + ([decoder(runner, "spec")] if runner.has_spec else []))
    if cfg.lookup and runner.has_spec:
        decoders["lookup"] = decoder(runner, "spec", cfg.lookup)[1]
    measured = measure(
        decoders, ids, max_new_tokens=[ex.max_new_tokens for ex in examples], max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids, warmup=1, runs=cfg.runs
    )

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

    ref_scores = None
    if cfg.reference == "fp32":
        from edgespec.harness.reference import reference_completions

        src = manifest.recipe.model.source
        done = [0]

        def tick() -> None:
            done[0] += 1
            on_progress("fp32 reference", done[0], len(examples))

        comps = reference_completions(src, runner.max_seq_len, ids, [ex.max_new_tokens for ex in examples], runner.eos_ids, on_done=tick)
        ref_scores = [score(ex.metric, tokenizer.decode(c), ex) for ex, c in zip(examples, comps)]
        for row, s, c in zip(rows, ref_scores, comps):
            row["reference_score"] = s
            row["reference_prediction"] = tokenizer.decode(c)

    suites = {}
    for name in dict.fromkeys(r["suite"] for r in rows):
        sr = [r for r in rows if r["suite"] == name]
        entry = {
            "metric": sr[0]["metric"],
            "source": SUITES[name].source if name in SUITES else "user JSONL",
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
        p = shortfall_p_value([r["suite"] for r in rows], [r["score"] for r in rows], ref_scores, cfg.gates.min_score_ratio)
        overall["score_shortfall_p"] = round(p, 4)
        overall["same_answers"] = f"{sum(r['prediction'] == r['reference_prediction'] for r in rows)}/{len(rows)}"  # paired: AR answer == fp32 answer

    fidelity = None
    if cfg.reference == "fp32" and cfg.fidelity_chunks:
        from edgespec.harness.fidelity import CHUNK, measure_fidelity

        ctx = min(CHUNK, runner.max_seq_len)  # a short-context program gets shorter chunks
        total, done = cfg.fidelity_chunks * (ctx - ctx // 2 - 1), [0]

        def token() -> None:
            done[0] += 1
            if done[0] % 64 == 0 or done[0] == total:
                on_progress("fidelity", done[0], total)

        src = manifest.recipe.model.source
        fidelity = measure_fidelity(runner.forward, src, runner.max_seq_len, tokenizer, cfg.fidelity_chunks, ctx, on_token=token).to_dict()

    on_progress("memory", 0, len(decoders))
    few = ids[:2]
    memory = {}
    for j, mode in enumerate(m for m in ("ar", "spec") if m in decoders):
        memory[mode] = peak_rss_fresh(str(bundle_dir), mode, few, 32)
        on_progress("memory", j + 1, len(decoders))

    report = {
        "bundle": str(bundle_dir.resolve()),
        "model": manifest.model.name,
        "precision": manifest.precision,
        "speculative": None if manifest.speculative is None else manifest.speculative.to_dict(),
        "config": dataclasses.asdict(cfg),
        "program_bytes": runner.path.stat().st_size,
        "peak_rss_mb": memory,
        "normalizer_events": _normalizer_events(bundle_dir),
        "fidelity": fidelity,
        "suites": suites,
        "overall": overall,
        "examples": rows,
    }
    gates = check_gates(report, cfg.gates)
    report["gates"] = as_dicts(gates)
    report["passed"] = all(g.passed for g in gates)
    return report


def _normalizer_events(bundle_dir: Path) -> int | None:
    """Overflow/underflow events of the chosen pre-normalizers (None when the bundle has no search report)."""
    p = bundle_dir / "normsearch.json"
    if not p.is_file():
        return None
    return int(json.loads(p.read_text())["summary"]["chosen_events_all_sets"])
