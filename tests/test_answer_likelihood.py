"""The answer-likelihood task gate (harness/answer_likelihood.py, `max_answer_nll_increase`):
its test, its power, its verdicts, and on the real model: a re-rounded program refused by it
alone, the carried blocks passed."""

from __future__ import annotations

import pytest
import torch

from edgespec.config import GatesConfig
from edgespec.harness.answer_likelihood import detectable_increase, increase_p_value, program_nll, reference_nll
from edgespec.harness.gates import check_gates


def test_the_increase_test_fails_only_beyond_the_noise_and_states_its_power():
    g = torch.Generator().manual_seed(0)
    noise = (torch.randn(48, generator=g) * 0.1).tolist()
    small = [0.01 + x for x in noise]  # mean ~0.01: below the bar
    large = [0.30 + x for x in noise]  # far above
    near = [0.06 + x for x in noise]  # a little above, within the spread of 48 prompts
    assert increase_p_value(small, 0.05) > 0.05
    assert increase_p_value(large, 0.05) < 0.001 and increase_p_value(large, 0.05) == increase_p_value(large, 0.05)  # fixed seed
    assert increase_p_value(near, 0.05) > 0.05
    power = detectable_increase(noise, 0.05)
    assert power is not None and 0.05 < power < 0.1  # ~ bar + 1.7 sd / sqrt(n)
    shifted = [power + x - sum(noise) / len(noise) for x in noise]  # the spread, at the detectable mean
    assert increase_p_value(shifted, 0.05) < 0.05 and increase_p_value([x - 0.002 for x in shifted], 0.05) >= 0.05
    assert detectable_increase([0.5, 0.6, 0.7, 0.8], 0.05) is None  # 4 prompts: a sign-flip test cannot reach 0.05


def test_teacher_forced_nll_is_the_same_through_a_program_step_and_one_eager_pass(tiny_model):
    from edgespec.runtime.generate import eager_step

    prompt, answer = [5, 9, 13, 2], [7, 7, 30, 1, 4]
    a = program_nll(eager_step(tiny_model), prompt, answer)
    b = reference_nll(tiny_model, prompt, answer)
    assert abs(a - b) < 1e-4 and a > 0


def _report(inc: float | None, p: float = 1.0, power: float | None = 0.06, n: int = 48) -> dict:
    overall = {"score": 0.1, "reference_score": 0.1, "score_ratio": 1.0, "prompts": n}
    if inc is not None:
        overall.update(
            answer_nll=2.0 + inc, reference_answer_nll=2.0, answer_nll_increase=inc, answer_nll_prompts=n, answer_nll_increase_p=p, answer_nll_detectable=power
        )
    return {"overall": overall, "fidelity": None}


def _verdict(report: dict, **gates):
    v = check_gates(report, GatesConfig(min_top1_agreement=0, max_perplexity_ratio=0, max_kl_mean=0, **gates))
    judged = {r.name: r for r in v.judged}
    return judged.get("max_answer_nll_increase"), {r.name: r.why for r in v.not_judged}


def test_the_gate_verdicts():
    ok, _ = _verdict(_report(-0.013))
    assert ok.passed and "-0.0130 <= 0.05" in ok.message and "finds a mean increase of 0.060 or more" in ok.message
    noisy, _ = _verdict(_report(0.06, p=0.37))
    assert noisy.passed and "within the prompts' noise" in noisy.message
    bad, _ = _verdict(_report(0.62, p=0.00005))
    assert not bad.passed and "beyond the prompts' noise (paired sign-flip test p < 0.0001)" in bad.message and bad.measured == 0.62
    none, why = _verdict(_report(0.3, p=0.06, power=None, n=4))
    assert none is None and "no power at 4 prompts" in why["max_answer_nll_increase"]
    missing, _ = _verdict(_report(None))
    assert not missing.passed and "validate.reference: none" in missing.message
    off, why = _verdict(_report(0.62, p=0.00005), max_answer_nll_increase=0)
    assert off is None and why["max_answer_nll_increase"].startswith("off")


@pytest.mark.slow
def test_a_re_rounded_program_is_refused_by_the_answer_gate_alone():
    """The real model on the default suites (48 prompts), eager (the programs' numerics): the
    Q4_1 file re-rounded onto torchao's int4 grid makes the reference answers clearly less
    likely than the fp32 source does (measured 0.62 nats/token, p < 0.001): the gate fails it
    with every other gate off; the file's own blocks on XNNPACK pass (0.06, within the noise)."""
    import statistics

    from edgespec.config import QuantConfig, ValidateConfig
    from edgespec.harness.answer_likelihood import answer_tokens
    from edgespec.harness.suites import load_suite
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.quant import plan_quantization, quantize_

    cfg = ValidateConfig()
    src = read_source("smollm2-135m-instruct", 1024)
    tok = tokenizer_of(src)
    examples = [ex for name in cfg.suites for ex in load_suite(name, cfg.prompts_per_suite, cfg.seed)]
    pairs = [(encode_prompt(tok, ex.prompt, True), answer_tokens(tok, ex.reference)) for ex in examples]
    source = build_model(src).eval()
    ref = [reference_nll(source, p, a) for p, a in pairs]
    verdicts = {}
    for name, q in {"re-rounded": QuantConfig(carry_blocks=False, head_bits=4, kernel="xnnpack"), "carried": QuantConfig(kernel="xnnpack")}.items():
        model = build_model(src)
        quantize_(model, plan_quantization(model, q, src.blocks))
        inc = [reference_nll(model.eval(), p, a) - r for (p, a), r in zip(pairs, ref)]
        bar = GatesConfig().max_answer_nll_increase
        report = _report(statistics.fmean(inc), increase_p_value(inc, bar), detectable_increase(inc, bar), len(inc))
        verdicts[name] = _verdict(report)[0]
    assert not verdicts["re-rounded"].passed, verdicts["re-rounded"].message
    assert verdicts["carried"].passed, verdicts["carried"].message
