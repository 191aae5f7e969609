"""Suites, retrieval, gates, speed summaries and reports of the validation harness (no model)."""

import json

import pytest

from edgespec.config import GatesConfig, Recipe
from edgespec.corpus import validation_sets as T
from edgespec.errors import EdgespecError
from edgespec.harness import suites as S
from edgespec.harness.gates import check_gates
from edgespec.harness.metrics import METRICS, score


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in ("summarization", "translation", "qa", "sql") else n for n in S.SUITES]
)  # slow: apt lists, fanoutqa, Chinook
def test_builtin_suite_is_deterministic_and_scorable(name):
    a = S.load_suite(name, 6, seed=0)
    assert a == S.load_suite(name, 6, seed=0)
    assert len(a) == 6 and len({e.id for e in a}) == 6
    assert a != S.load_suite(name, 6, seed=1)
    for ex in a:
        assert ex.suite == name and ex.metric == S.SUITES[name].metric and ex.metric in METRICS
        assert ex.prompt.strip() and ex.reference.strip()
        # the reference answer gets full marks (for sql: the reference query matches itself)
        assert score(ex.metric, ex.reference, ex) == 1.0, ex


@pytest.mark.slow
def test_debian_and_fanoutqa_suites_grow_as_prefixes_of_one_heldout_slice():
    # fixed held-out slice: ids never come from outside it, whatever n is
    for name in ("summarization", "qa"):
        small, big = S.load_suite(name, 4, 0), S.load_suite(name, 40, 0)
        assert {e.id for e in small} <= {e.id for e in S.load_suite(name, 100000, 0)}
        assert all(T._heldout(e.id.split("/")[-1], 5 if name == "summarization" else 2) for e in big)


@pytest.mark.slow
def test_translation_alternates_languages():
    langs = [e.id.split("/")[1] for e in S.load_suite("translation", 6, 0)]
    assert langs == ["de", "fr"] * 3


def test_rag_context_holds_only_retrieved_sentences():
    for ex in S.load_suite("rag", 5, 0):
        context = ex.prompt.split("\n\n")[0]
        assert context.startswith("Context:") and context.count("\n- ") == 3
        assert ex.extra["retrieved"] == (ex.reference in context)


def test_bm25_ranks_matching_documents_first():
    from edgespec.corpus.retrieval import BM25

    docs = ["Ann likes tea.", "Bob hates the color red.", "Cy likes the color red.", "Dee likes jazz."]
    bm = BM25(docs)
    assert bm.top("Who hates the color red?", 2) == [1, 2]
    assert bm.top("Who likes jazz?", 1) == [3]
    s = bm.scores("zzz unknown")
    assert s == [0.0] * 4


def test_user_suite(tmp_path):
    p = tmp_path / "mine.jsonl"
    p.write_text(
        json.dumps({"prompt": "Capital of France?", "reference": "Paris", "metric": "exact_match"})
        + "\n\n"
        + json.dumps({"id": "x", "prompt": "Who?", "reference": "Ann", "context": "Ann did it."})
        + "\n"
    )
    ex = S.load_suite(str(p), 10)
    assert [e.id for e in ex] == ["mine/1", "mine/x"]
    assert ex[0].metric == "exact_match" and ex[1].metric == "rouge_l"
    assert ex[1].prompt.startswith("Context:\nAnn did it.")
    p.write_text('{"prompt": "a"}\n')
    with pytest.raises(EdgespecError, match="mine.jsonl:1: expected a JSON object"):
        S.load_suite(str(p), 10)
    p.write_text('{"prompt": "a", "reference": "b", "metric": "bleu"}\n')
    with pytest.raises(EdgespecError, match="unknown metric 'bleu'"):
        S.load_suite(str(p), 10)
    with pytest.raises(EdgespecError, match="not found"):
        S.load_suite(str(tmp_path / "none.jsonl"), 10)


def test_unknown_suite_and_missing_apt_lists(monkeypatch, tmp_path):
    with pytest.raises(EdgespecError, match="unknown suite 'poetry'"):
        S.load_suite("poetry", 2)
    monkeypatch.setattr(T, "APT_LISTS", str(tmp_path))
    T.debian_descriptions.cache_clear()
    try:
        with pytest.raises(EdgespecError, match="apt-get update -o Acquire::Languages=en,de,fr"):
            S.load_suite("summarization", 2)
    finally:
        T.debian_descriptions.cache_clear()


def test_validate_config_is_checked():
    with pytest.raises(EdgespecError, match=r"recipe field 'validate.suites\[0\]'"):
        Recipe().replace(validate={"suites": ["poetry"]})
    with pytest.raises(EdgespecError, match="validate.gates.min_speedup"):
        Recipe().replace(validate={"gates": {"min_speedup": -1.0}})
    with pytest.raises(EdgespecError, match="validate.prompts_per_suite"):
        Recipe().replace(validate={"prompts_per_suite": 0})
    r = Recipe().replace(validate={"suites": ["rag", "my.jsonl"], "gates": {"min_speedup": 1.5}})
    assert r.validate.suites == ("rag", "my.jsonl") and r.validate.gates.min_speedup == 1.5


# --- gates on synthetic reports ------------------------------------------------------------


def _report(spec=True, lossless=(10, 10), score_=0.30, ref=0.35, events=0, fidelity=None, nll_increase=0.01):
    overall = {"prompts": 10, "lossless": {"identical": lossless[0], "prompts": lossless[1]}, "ar": {"tokens_per_s": 200.0}, "score": score_}
    if spec:
        overall["spec"] = {"tokens_per_s": 300.0, "speedup": 1.5, "tokens_per_call": 2.1}
    if ref is not None:
        overall["reference_score"] = ref
        overall["accuracy_drop"] = round(ref - score_, 4)
        overall["score_ratio"] = round(score_ / ref, 4) if ref else None
        overall.update(  # the reference answers' likelihood (harness/answer_likelihood.py)
            answer_nll=2.0 + nll_increase,
            reference_answer_nll=2.0,
            answer_nll_increase=nll_increase,
            answer_nll_prompts=10,
            answer_nll_increase_p=1.0 if nll_increase <= 0.05 else 0.001,
            answer_nll_detectable=0.09,
        )
    return {"overall": overall, "normalizer_events": events, "fidelity": fidelity}


def _by_name(verdicts):
    return {r.name: r for r in verdicts.judged}


def _not_judged(verdicts):
    return {r.name: r.why for r in verdicts.not_judged}


def test_gates_pass_and_fail_with_the_measured_margin():
    fid = {"tokens": 1024, "top1_agreement": 0.93, "perplexity": 13.1, "reference_perplexity": 13.0, "perplexity_ratio": 1.0077, "kl_mean": 0.0031}
    g = _by_name(check_gates(_report(fidelity=fid), GatesConfig(min_speedup=1.4, min_score_ratio=0.85)))
    gates = {"min_speedup", "lossless", "min_score_ratio", "max_answer_nll_increase", "min_top1_agreement", "max_perplexity_ratio", "max_kl_mean"}
    assert set(g) == gates | {"no_overflow"}
    assert all(r.passed for r in g.values())
    bad = {**fid, "top1_agreement": 0.652, "perplexity": 22.3, "perplexity_ratio": 1.717, "kl_mean": 0.536}  # the 4-bit re-rounding of the default model
    g = _by_name(check_gates(_report(fidelity=bad, nll_increase=0.62), GatesConfig(min_speedup=2.0)))
    assert not g["max_answer_nll_increase"].passed and "+0.6200 > 0.05, beyond the prompts' noise" in g["max_answer_nll_increase"].message
    assert not g["min_speedup"].passed and "short by 0.500x" in g["min_speedup"].message
    hybrid = _report()
    hybrid["overall"]["spec"]["lookup"] = 2  # a bundle decoding with suffix matches: judged as it decodes
    assert (
        "as the bundle decodes: drafter + suffix matches of >= 2 tokens" in _by_name(check_gates(hybrid, GatesConfig(min_speedup=1.2)))["min_speedup"].message
    )
    assert not g["min_score_ratio"].passed and "0.857x < 0.9x (short by 0.043)" in g["min_score_ratio"].message  # relative: 0.30 / 0.35
    assert not g["min_top1_agreement"].passed and "65.2% of 1024 held-out tokens < 90%" in g["min_top1_agreement"].message
    assert not g["max_perplexity_ratio"].passed and "1.7170x > 1.05x" in g["max_perplexity_ratio"].message
    assert not g["max_kl_mean"].passed and "0.5360 nats over 1024 held-out tokens > 0.05" in g["max_kl_mean"].message
    # the KL gate alone: a program with the fp32 source's argmax and perplexity but a wider
    # distribution around them
    g = _by_name(check_gates(_report(fidelity={**fid, "kl_mean": 0.08}), GatesConfig()))
    assert g["max_perplexity_ratio"].passed and g["min_top1_agreement"].passed and not g["max_kl_mean"].passed
    g = _by_name(check_gates(_report(lossless=(9, 10), events=3), GatesConfig()))
    assert not g["lossless"].passed and "1 differ" in g["lossless"].message
    assert not g["no_overflow"].passed
    # an autoregressive program with next_token (a screened head): judged against forward's logits
    screened = _report(spec=False, lossless=(9, 10))
    screened["overall"]["ar-logits"] = {"tokens_per_s": 170.0}
    g = _by_name(check_gates(screened, GatesConfig()))["lossless"]
    assert not g.passed and g.message == "next_token's greedy output identical to forward's logits' on 9/10 prompts (1 differ)"


def test_gates_that_do_not_apply():
    # AR-only program without a normalizer search: lossless and no_overflow have nothing to
    # judge, min_speedup 0 is off; each is listed with why
    everything_off = GatesConfig(min_score_ratio=0, max_answer_nll_increase=0, min_top1_agreement=0, max_perplexity_ratio=0, max_kl_mean=0)
    v = check_gates(_report(spec=False, ref=None, events=None), everything_off)
    assert v.judged == () and v.passed
    why = _not_judged(v)
    assert set(why) == {
        "min_speedup",
        "lossless",
        "min_score_ratio",
        "max_answer_nll_increase",
        "min_top1_agreement",
        "max_perplexity_ratio",
        "max_kl_mean",
        "no_overflow",
    }
    assert why["min_speedup"] == "off (validate.gates.min_speedup: 0)" and why["min_top1_agreement"] == "off (validate.gates.min_top1_agreement: 0)"
    assert "no speculative methods" in why["lossless"] and "numerics.search: false" in why["no_overflow"]
    # a speedup asked of a program without speculative methods fails, saying why
    g = _by_name(check_gates(_report(spec=False), GatesConfig(min_speedup=1.2)))
    assert not g["min_speedup"].passed and "no speculative methods" in g["min_speedup"].message
    # score and fidelity gates off: not judged, even with the measurements there
    v = check_gates(_report(fidelity={"x": 1}), everything_off)
    assert not {"min_score_ratio", "min_top1_agreement", "max_perplexity_ratio"} & set(_by_name(v))
    assert {"min_score_ratio", "min_top1_agreement", "max_perplexity_ratio"} <= set(_not_judged(v))
    # a reference that scored 0: nothing to fall below
    assert _by_name(check_gates(_report(score_=0.0, ref=0.0), GatesConfig()))["min_score_ratio"].passed
    # nothing timed (every answer one token): the speedup gate fails, saying why
    unmeasured = _report()
    unmeasured["overall"]["spec"]["speedup"] = None
    g = _by_name(check_gates(unmeasured, GatesConfig(min_speedup=1.2)))
    assert not g["min_speedup"].passed and "no speed was measured" in g["min_speedup"].message


def test_a_gate_set_without_its_measurement_fails_naming_the_setting():
    # validate.reference: none -- no fp32 answers, no fidelity: the default gates fail, saying
    # which setting left the measurement out and how to turn the gate off
    report = {**_report(ref=None), "config": {"reference": "none", "fidelity_chunks": 4}}
    v = check_gates(report, GatesConfig())
    g = _by_name(v)
    assert not v.passed and not g["min_score_ratio"].passed and g["min_score_ratio"].measured is None
    assert "validate.reference: none" in g["min_score_ratio"].message and "validate.gates.min_score_ratio: 0" in g["min_score_ratio"].message
    for name in ("min_top1_agreement", "max_perplexity_ratio", "max_kl_mean"):
        assert not g[name].passed and "validate.reference is none" in g[name].message and f"validate.gates.{name}: 0" in g[name].message
    # validate.fidelity_chunks: 0 -- the fidelity gates fail; the score gate judges
    report = {**_report(), "config": {"reference": "fp32", "fidelity_chunks": 0}}
    g = _by_name(check_gates(report, GatesConfig(min_score_ratio=0.5)))
    assert g["min_score_ratio"].passed
    assert not g["min_top1_agreement"].passed and "validate.fidelity_chunks is 0" in g["min_top1_agreement"].message
    assert not g["max_perplexity_ratio"].passed and "validate.fidelity_chunks is 0" in g["max_perplexity_ratio"].message
    # turned off explicitly: every gate passes and the report lists them as off
    off = GatesConfig(min_score_ratio=0, max_answer_nll_increase=0, min_top1_agreement=0, max_perplexity_ratio=0, max_kl_mean=0)
    v = check_gates({**_report(ref=None), "config": {"reference": "none", "fidelity_chunks": 4}}, off)
    assert v.passed and _not_judged(v)["min_score_ratio"] == "off (validate.gates.min_score_ratio: 0)"


# --- speed summaries and reports -----------------------------------------------------------


def _row(ar_tps, spec_tps, per_call, suite="rag", lossless=True, score_=1.0):
    return {
        "id": f"{suite}/x",
        "suite": suite,
        "score": score_,
        "prediction": "p",
        "reference": "r",
        "reference_score": 1.0,
        "lossless": lossless,
        "new_tokens": sum(per_call) + 1,
        "ar": {
            "tokens_per_s": ar_tps,
            "prefill_tokens_per_s": 500.0,
            "new_tokens": sum(per_call) + 1,
            "calls": sum(per_call),
            "decode_tokens": sum(per_call),
            "ms_per_call": 1000 / ar_tps,
            "tokens_per_call": None,
        },
        "spec": {
            "tokens_per_s": spec_tps,
            "prefill_tokens_per_s": 500.0,
            "new_tokens": sum(per_call) + 1,
            "calls": len(per_call),
            "decode_tokens": sum(per_call),
            "ms_per_call": 1000 * len(per_call) / sum(per_call) / spec_tps * sum(per_call) / len(per_call),
            "tokens_per_call": per_call,
        },
    }


def test_speed_summary_medians_ratios_and_histogram():
    from edgespec.runtime.speed import summarize

    rows = [_row(100, 150, [1, 2, 3]), _row(200, 200, [1, 1]), _row(100, 300, [4], lossless=False)]
    s = summarize(rows)
    assert s["prompts"] == 3 and s["lossless"] == {"identical": 2, "prompts": 3}
    assert s["ar"]["tokens_per_s"] == 100 and s["spec"]["tokens_per_s"] == 200
    assert s["spec"]["speedup"] == 1.5  # median of 1.5, 1.0, 3.0: ratios side by side, not a ratio of medians
    assert s["spec"]["tokens_per_call"] == round(12 / 6, 3)
    assert s["spec"]["tokens_per_call_histogram"] == {1: 3, 2: 1, 3: 1, 4: 1}


def _validation_report(suites: dict, overall: dict, examples: list, **fields) -> dict:
    """A report as `edgespec validate` writes it, around the given suites and rows."""
    return {
        "bundle": "b",
        "model": "tiny",
        "precision": "fp32",
        "config": {"runs": 1},
        "program_bytes": 1_000_000,
        "peak_rss_mb": {"ar": 100.0},
        "suites": suites,
        "overall": overall,
        "examples": examples,
        "gates": [],
        "passed": True,
        **fields,
    }


def test_report_files(tmp_path):
    from edgespec.harness.report import write_report
    from edgespec.runtime.speed import summarize

    rows = [_row(100, 150, [1, 2], suite="rag"), _row(120, 130, [1, 1, 2], suite="math", score_=0.0)]
    suites = {
        n: {"metric": "m", "source": "s", "score": r["score"], "reference_score": 1.0, **summarize([r])} for n, r in (("rag", rows[0]), ("math", rows[1]))
    }
    report = _validation_report(
        suites,
        {**summarize(rows), "score": 0.5, "reference_score": 1.0, "accuracy_drop": 0.5},
        rows,
        peak_rss_mb={"ar": 100.0, "spec": 110.0},
        normalizer_events=None,
        normalizer_note=None,
        gates=[{"name": "lossless", "passed": True, "measured": "2/2", "threshold": "all", "message": "ok"}],
        gates_not_judged=[{"name": "min_speedup", "why": "off (validate.gates.min_speedup: 0)"}],
        quantization={"carried": 100, "rounded": 12, "unquantized": 0, "rounded_layers": [], "rounded_from": {"Q5_0": 12}, "rounding_error": {"Q5_0": 0.0412}},
    )
    files = write_report(report, tmp_path / "r")
    assert files == ["report.json", "report.md", "speedup_per_task.png", "accepted_length.png", "accuracy_vs_precision.png"]
    for f in files:
        assert (tmp_path / "r" / f).stat().st_size > 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "| rag | m | 1.000 | 1.000 | 100.0 | 150.0 | 1.500 | 1.500 | 1/1 |" in md
    assert "**Gates: PASSED**" in md and "![accepted_length.png](accepted_length.png)" in md
    assert "- not judged `min_speedup`: off (validate.gates.min_speedup: 0)" in md
    assert "Weights: 100 linears carried as the file's blocks, 12 rounded here, 0 float; 12 re-rounded from Q5_0 (weight error 4.1% rms)." in md
    assert json.loads((tmp_path / "r" / "report.json").read_text())["passed"] is True
    from edgespec.tasks.language_model import render_validation  # `edgespec validate`'s table says it too

    assert "gate not judged: min_speedup: off (validate.gates.min_speedup: 0)" in render_validation(report).splitlines()


def test_report_shows_the_hybrid_draft_beside_the_programs_own(tmp_path):
    """validate.lookup > 0 adds the `lookup` decoder (suffix matches first): the report gets
    a hybrid column group and the plot a second bar per suite."""
    from edgespec.harness.report import render_markdown, write_plots
    from edgespec.runtime.speed import summarize

    row = _row(100, 150, [1, 2], suite="rag")
    row["lookup"] = {**row["spec"], "tokens_per_s": 240.0, "tokens_per_call": [3, 3], "calls": 2, "decode_tokens": 6}
    s = summarize([row])
    report = _validation_report({"rag": {"metric": "m", "score": 1.0, **s}}, {**s, "score": 1.0}, [row])
    md = render_markdown(report, write_plots(report, tmp_path))
    assert "| spec tok/s | speedup | tokens/call | hybrid tok/s | speedup | tokens/call | lossless |" in md
    assert "| rag | m | 1.000 | — | 100.0 | 150.0 | 1.500 | 1.500 | 240.0 | 2.400 | 3.000 | 1/1 |" in md


def test_score_gate_fails_only_beyond_the_prompts_noise():
    """min_score_ratio judges the ratio with the noise of a few prompts per suite: a program
    one 0/1 answer short of the fp32 model passes, one that loses most answers on enough
    prompts fails, and the report carries the p-value it was judged by."""
    from edgespec.harness.score_noise import shortfall_p_value

    suites = ["rag"] * 8 + ["translation"] * 8
    ref = [1, 1, 1, 0, 0, 0, 0, 0] + [0.18] * 8
    one_short = [1, 1, 0, 0, 0, 0, 0, 0] + [0.15] * 8  # 0.79x: one answer and a little chrF
    p = shortfall_p_value(suites, one_short, ref, 0.9)
    assert p > 0.05 and shortfall_p_value(suites, one_short, ref, 0.9) == p  # a fixed seed: reproducible
    assert shortfall_p_value(["rag", "rag", "qa", "qa"], [0, 0, 0, 0], [1, 0, 0, 0], 0.9) > 0.05  # 0 vs 1 of 2: no evidence
    assert shortfall_p_value(suites, ref, ref, 0.9) == 1.0  # the fp32 model's own scores are above 0.9x
    report = _report(spec=False, score_=0.1375, ref=0.1775)
    report["overall"]["score_shortfall_p"] = p
    g = _by_name(check_gates(report, GatesConfig()))["min_score_ratio"]
    assert g.passed and "within the noise of 10 prompts" in g.message
    many = ["rag"] * 40 + ["translation"] * 40
    ref_many = ([1] * 20 + [0] * 20) + [0.18] * 40
    worse = ([1] * 8 + [0] * 32) + [0.10] * 40  # 0.48x on 80 prompts
    p = shortfall_p_value(many, worse, ref_many, 0.9)
    assert p < 0.05
    report = _report(spec=False, score_=0.15, ref=0.34)
    report["overall"]["score_shortfall_p"] = p
    g = _by_name(check_gates(report, GatesConfig()))["min_score_ratio"]
    assert not g.passed and "paired sign-flip test p = " in g.message


def test_score_gate_states_its_power_and_never_passes_what_it_cannot_fail():
    """The shortfall test's power at the suites' size (`detectable_ratio`): the highest ratio it
    finds below the bar, losses concentrated on the fp32 model's best answers; with too few
    prompts on which the fp32 model scored, not even a program scoring 0 everywhere is found
    below the bar, and the gate is then not judged ("no power"), never passed."""
    from edgespec.harness.score_noise import detectable_ratio, shortfall_p_value

    few = ["rag"] * 4 + ["qa"] * 4
    ref_few = [1, 1, 0, 0, 0, 0, 1, 0]  # three prompts where the fp32 model scored: p >= 1/8 at best
    assert shortfall_p_value(few, [0] * 8, ref_few, 0.9) > 0.05 and detectable_ratio(few, ref_few, 0.9) is None
    report = _report(spec=False, score_=0.0, ref=0.375)
    report["overall"].update(score_shortfall_p=0.12, score_detectable_ratio=None)
    v = check_gates(report, GatesConfig())
    assert "min_score_ratio" not in _by_name(v) and "no power at 10 prompts" in _not_judged(v)["min_score_ratio"]
    many = ["rag"] * 24 + ["translation"] * 24
    ref_many = [1] * 12 + [0] * 12 + [0.2] * 24
    power = detectable_ratio(many, ref_many, 0.9)
    assert power is not None and 0.0 < power < 0.9
    # it is the ratio of the program that loses the rag answers one by one until the test finds
    # it below the bar; with one answer fewer lost the test does not
    program, lost = list(ref_many), 0
    while shortfall_p_value(many, program, ref_many, 0.9) >= 0.05:
        program[lost], lost = 0, lost + 1
    assert 0 < lost <= 12 and abs((sum(program[:24]) / 24 + sum(program[24:]) / 24) / (12 / 24 + 0.2) - power) < 1e-9
    program[lost - 1] = 1
    assert shortfall_p_value(many, program, ref_many, 0.9) >= 0.05
    report = _report(spec=False, score_=0.2, ref=0.35)
    report["overall"].update(score_shortfall_p=0.3, score_detectable_ratio=power)
    g = _by_name(check_gates(report, GatesConfig()))["min_score_ratio"]
    assert g.passed and f"finds at best a drop to {power:.2f}x" in g.message


def test_a_quant_field_without_effect_is_named():
    """`quant.head_bits` on the block kernel with the head carried from the file changes
    nothing: the export's summary line says so (manifest.ineffective_quant_fields)."""
    from edgespec.config import QuantConfig
    from edgespec.manifest import QuantizationInfo, ineffective_quant_fields

    carried = QuantizationInfo(carried=211)
    assert ineffective_quant_fields(QuantConfig(head_bits=4), carried) == [
        "quant.head_bits=4 had no effect: the lm head kept the file's blocks (quant.carry_blocks: true; false re-rounds it)"
    ]
    assert ineffective_quant_fields(QuantConfig(), carried) == []  # the default: nothing asked
    assert ineffective_quant_fields(QuantConfig(head_bits=4), QuantizationInfo(carried=210, rounded=1, rounded_layers=("output",))) == []
    assert ineffective_quant_fields(QuantConfig(head_bits=4, carry_blocks=False), QuantizationInfo(rounded=211)) == []
    assert ineffective_quant_fields(QuantConfig(head_bits=4, kernel="xnnpack"), carried) == []  # XNNPACK rounds a 4-bit head
    # today's manifests say the head's format; an older one whose list of rounded layers was cut
    # to 8 names cannot say the head was carried, so nothing is claimed
    assert ineffective_quant_fields(QuantConfig(head_bits=4), QuantizationInfo(carried=211, head="Q8_0 (the file's blocks)")) != []
    assert ineffective_quant_fields(QuantConfig(head_bits=4), QuantizationInfo(carried=200, rounded=11, head="Q4_1-style (rounded from F32)")) == []
    cut = QuantizationInfo(carried=200, rounded=11, rounded_layers=tuple(f"layers.{i}.attention.wv" for i in range(8)))
    assert ineffective_quant_fields(QuantConfig(head_bits=4), cut) == []
