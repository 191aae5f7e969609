"""Gates: the recipe's bars, checked against a validation report.

A gate the recipe sets but whose measurement the report lacks fails, saying which setting
left it out and how to turn the gate off; a gate turned off, or with nothing to judge in this
program (losslessness without speculative methods, overflow without a normalizer search), is
listed as not judged, with why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from edgespec.config import GatesConfig
from edgespec.manifest import GateResult


@dataclass(frozen=True)
class GateNotJudged:
    """A gate that judged nothing, and why (report.json `gates_not_judged`)."""

    name: str
    why: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Verdicts:
    """Every gate of the recipe on one report: judged (`GateResult`) or not (`GateNotJudged`)."""

    judged: tuple[GateResult, ...]
    not_judged: tuple[GateNotJudged, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.judged)


def _off(name: str, value: float | str) -> GateNotJudged:
    return GateNotJudged(name, f"off (validate.gates.{name}: {value if isinstance(value, str) else f'{value:g}'})")


def _speedup(report: dict, g: GatesConfig) -> GateResult | GateNotJudged:
    if g.min_speedup <= 0:
        return _off("min_speedup", g.min_speedup)
    spec = report["overall"].get("spec")
    if spec is None:
        return GateResult(
            "min_speedup",
            False,
            None,
            g.min_speedup,
            f"min_speedup {g.min_speedup}x asked, but the program has no speculative methods (export with drafter.weights, or set validate.gates.min_speedup: 0)",
        )
    got = spec["speedup"]
    if got is None:  # no prompt made a decode call (every answer was one token): nothing measured
        return GateResult(
            "min_speedup",
            False,
            None,
            g.min_speedup,
            f"min_speedup {g.min_speedup}x asked, but no prompt produced more than one token, so no speed was measured (raise the suites' max_new_tokens or use more prompts)",
        )
    ok = got >= g.min_speedup
    lookup = spec.get("lookup") or 0
    how = f" (as the bundle decodes: drafter + suffix matches of >= {lookup} tokens)" if lookup else ""
    return GateResult(
        "min_speedup",
        ok,
        got,
        g.min_speedup,
        f"speculative speedup{how} {got:.3f}x {'>=' if ok else '<'} min_speedup {g.min_speedup}x" + ("" if ok else f" (short by {g.min_speedup - got:.3f}x)"),
    )


def _lossless(report: dict, g: GatesConfig) -> GateResult | GateNotJudged:
    if not g.lossless:
        return _off("lossless", "false")
    faster = [name for name, what in (("spec", "speculative"), ("ar-logits", "forward's logits")) if report["overall"].get(name) is not None]
    if not faster:
        return GateNotJudged("lossless", "the program has no speculative methods nor next_token: its only decoder is autoregressive")
    counts = report["overall"]["lossless"]
    ok_n, n = counts["identical"], counts["prompts"]
    ok = ok_n == n
    what = " and ".join(
        {"spec": "speculative output identical to autoregressive", "ar-logits": "next_token's greedy output identical to forward's logits'"}[f] for f in faster
    )
    return GateResult("lossless", ok, f"{ok_n}/{n}", "all", f"{what} on {ok_n}/{n} prompts" + ("" if ok else f" ({n - ok_n} differ)"))


SHORTFALL_P = 0.05  # the score gate fails a program whose shortfall is this unlikely to be the prompts' noise


def _score_ratio(report: dict, g: GatesConfig) -> GateResult | GateNotJudged:
    """Fails when the mean task score is below min_score_ratio x the fp32 model's beyond the
    noise of the suites' few prompts: the ratio below the bar, and a paired sign-flip test
    (`score_shortfall_p`, harness/score_noise.py) puts the shortfall's p-value below 0.05."""
    if g.min_score_ratio <= 0:
        return _off("min_score_ratio", g.min_score_ratio)
    o = report["overall"]
    if "reference_score" not in o:
        return GateResult(
            "min_score_ratio",
            False,
            None,
            g.min_score_ratio,
            f"min_score_ratio {g.min_score_ratio}x asked, but the fp32 base model did not answer the prompts (validate.reference: none): "
            "set validate.reference: fp32, or turn the gate off with validate.gates.min_score_ratio: 0",
        )
    ratio = o.get("score_ratio")
    if ratio is None:  # the reference scored 0: any score is at least as good
        return GateResult("min_score_ratio", True, None, g.min_score_ratio, f"mean task score {o['score']:.3f}; the fp32 base model scored 0")
    p = o.get("score_shortfall_p")  # None: a report without the test (judged on the ratio alone)
    if "score_detectable_ratio" in o and o["score_detectable_ratio"] is None:  # the test cannot fail at this size
        return GateNotJudged(
            "min_score_ratio",
            f"no power at {o.get('prompts', 'these')} prompts: even a program scoring 0 on every prompt would be within their noise "
            f"(mean task score {o['score']:.3f} vs fp32 base {o['reference_score']:.3f}: {ratio:.3f}x); raise validate.prompts_per_suite",
        )
    above = ratio >= g.min_score_ratio
    ok = above or (p is not None and p >= SHORTFALL_P)
    says = f"mean task score {o['score']:.3f} vs fp32 base {o['reference_score']:.3f}: {ratio:.3f}x {'>=' if above else '<'} {g.min_score_ratio}x"
    if ok and not above:
        says += f", within the noise of {o.get('prompts', 'these')} prompts (paired sign-flip test p = {p:.3f} >= {SHORTFALL_P})"
    elif not ok:
        says += f" (short by {g.min_score_ratio - ratio:.3f})" + ("" if p is None else f"; paired sign-flip test p = {p:.4f} < {SHORTFALL_P}")
    power = o.get("score_detectable_ratio")
    if power is not None:
        says += f"; at this size the test finds at best a drop to {power:.2f}x (losses concentrated on the fp32 model's best answers)"
    return GateResult("min_score_ratio", ok, round(ratio, 4), g.min_score_ratio, says)


def _answer_nll(report: dict, g: GatesConfig) -> GateResult | GateNotJudged:
    """Fails when the reference answers' mean NLL increase over the fp32 source is above
    max_answer_nll_increase beyond the prompts' noise (one-sided sign-flip test p < 0.05,
    harness/answer_likelihood.py); not judged where the test has no power at the suites' size."""
    bar = g.max_answer_nll_increase
    if bar <= 0:
        return _off("max_answer_nll_increase", bar)
    o = report["overall"]
    if "answer_nll_increase" not in o:
        return GateResult(
            "max_answer_nll_increase",
            False,
            None,
            bar,
            f"max_answer_nll_increase {bar} asked, but the reference answers were not scored under the fp32 source model (validate.reference: none): "
            "set validate.reference: fp32, or turn the gate off with validate.gates.max_answer_nll_increase: 0",
        )
    inc, p, n, power = o["answer_nll_increase"], o["answer_nll_increase_p"], o["answer_nll_prompts"], o["answer_nll_detectable"]
    measured = f"reference answers' NLL {o['answer_nll']:.4f} vs fp32 source {o['reference_answer_nll']:.4f} nats/token on {n} prompts: {inc:+.4f}"
    if power is None:
        return GateNotJudged("max_answer_nll_increase", f"no power at {n} prompts ({measured}); raise validate.prompts_per_suite")
    above = inc > bar
    ok = not above or p >= SHORTFALL_P
    says = f"{measured} {'>' if above else '<='} {bar}"
    if above:
        says += (", within" if ok else ", beyond") + f" the prompts' noise (paired sign-flip test {f'p = {p:.4f}' if p >= 1e-4 else 'p < 0.0001'})"
    says += f"; at this size the test finds a mean increase of {power:.3f} or more"
    return GateResult("max_answer_nll_increase", ok, round(inc, 5), bar, says)


# fidelity bars: gate name (a GatesConfig field) -> (fidelity key, True if a minimum, the
# measurement in words, the threshold in words)
_FIDELITY = {
    "min_top1_agreement": (
        "top1_agreement",
        True,
        lambda f: f"next-token argmax equal to the fp32 source model's on {f['top1_agreement']:.1%} of {f['tokens']} held-out tokens",
        lambda t: f"{t:.0%}",
    ),
    "max_perplexity_ratio": (
        "perplexity_ratio",
        False,
        lambda f: f"held-out perplexity {f['perplexity']:.3f} vs fp32 source {f['reference_perplexity']:.3f}: {f['perplexity_ratio']:.4f}x",
        lambda t: f"{t}x",
    ),
    "max_kl_mean": (
        "kl_mean",
        False,
        lambda f: f"mean KL from the fp32 source's next-token distribution {f['kl_mean']:.4f} nats over {f['tokens']} held-out tokens",
        lambda t: f"{t}",
    ),
}


def _no_fidelity(report: dict) -> str:
    """Why a report has no fidelity measurement, from its config (validate.*)."""
    c = report.get("config") or {}
    if c.get("reference") == "none":
        return "validate.reference is none (fidelity compares with the fp32 source model)"
    if c.get("fidelity_chunks") == 0:
        return "validate.fidelity_chunks is 0"
    return "the report holds no fidelity measurement"


def _fidelity_gate(name: str):
    """The gate on one fidelity number of the report (edgespec.harness.fidelity); 0 = off."""
    key, at_least, measured, bar = _FIDELITY[name]

    def gate(report: dict, g: GatesConfig) -> GateResult | GateNotJudged:
        f, threshold = report.get("fidelity"), getattr(g, name)
        if threshold <= 0:
            return _off(name, threshold)
        if f is None:
            return GateResult(
                name,
                False,
                None,
                threshold,
                f"{name} {bar(threshold)} asked, but no fidelity was measured: {_no_fidelity(report)}; "
                f"set validate.reference: fp32 and validate.fidelity_chunks > 0, or turn the gate off with validate.gates.{name}: 0",
            )
        ok = f[key] >= threshold if at_least else f[key] <= threshold
        op = (">=" if ok else "<") if at_least else ("<=" if ok else ">")
        return GateResult(name, ok, f[key], threshold, f"{measured(f)} {op} {bar(threshold)}")

    return gate


def _overflow(report: dict, g: GatesConfig) -> GateResult | GateNotJudged:
    events = report.get("normalizer_events")
    if not g.no_overflow:
        return _off("no_overflow", "false")
    if events is None:
        return GateNotJudged("no_overflow", "the bundle has no normalizer search report (exported with numerics.search: false)")
    ok = events == 0
    note = report.get("normalizer_note")
    return GateResult(
        "no_overflow", ok, events, 0, f"chosen pre-normalizers: {events} overflow/underflow events on the search rows" + (f". {note}" if note else "")
    )


GATES = (
    _speedup,
    _lossless,
    _score_ratio,
    _answer_nll,
    _fidelity_gate("min_top1_agreement"),
    _fidelity_gate("max_perplexity_ratio"),
    _fidelity_gate("max_kl_mean"),
    _overflow,
)


def check_gates(report: dict, gates: GatesConfig) -> Verdicts:
    """Every gate of `gates` on this report, judged or not (with why)."""
    out = [check(report, gates) for check in GATES]
    return Verdicts(tuple(r for r in out if isinstance(r, GateResult)), tuple(r for r in out if isinstance(r, GateNotJudged)))
