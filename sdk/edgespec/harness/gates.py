"""Gates: the recipe's bars, checked against a validation report."""

from __future__ import annotations

from edgespec.config import GatesConfig
from edgespec.manifest import GateResult


def _speedup(report: dict, g: GatesConfig) -> GateResult | None:
    if g.min_speedup <= 0:
        return None
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
    return GateResult(
        "min_speedup",
        ok,
        got,
        g.min_speedup,
        f"speculative speedup {got:.3f}x {'>=' if ok else '<'} min_speedup {g.min_speedup}x" + ("" if ok else f" (short by {g.min_speedup - got:.3f}x)"),
    )


def _lossless(report: dict, g: GatesConfig) -> GateResult | None:
    if not g.lossless or report["overall"].get("spec") is None:
        return None
    counts = report["overall"]["lossless"]
    ok_n, n = counts["identical"], counts["prompts"]
    ok = ok_n == n
    return GateResult(
        "lossless",
        ok,
        f"{ok_n}/{n}",
        "all",
        f"speculative output identical to autoregressive on {ok_n}/{n} prompts" + ("" if ok else f" ({n - ok_n} differ)"),
    )


SHORTFALL_P = 0.05  # the score gate fails a program whose shortfall is this unlikely to be the prompts' noise


def _score_ratio(report: dict, g: GatesConfig) -> GateResult | None:
    """Fails when the mean task score is below min_score_ratio x the fp32 model's beyond the
    noise of the suites' few prompts: the ratio below the bar, and a paired sign-flip test
    (`score_shortfall_p`, harness/score_noise.py) puts the shortfall's p-value below 0.05."""
    ratio = report["overall"].get("score_ratio")
    if g.min_score_ratio <= 0 or "reference_score" not in report["overall"]:  # validate.reference: none -- nothing to compare with
        return None
    o = report["overall"]
    if ratio is None:  # the reference scored 0: any score is at least as good
        return GateResult("min_score_ratio", True, None, g.min_score_ratio, f"mean task score {o['score']:.3f}; the fp32 base model scored 0")
    p = o.get("score_shortfall_p")  # None: a report without the test (judged on the ratio alone)
    above = ratio >= g.min_score_ratio
    ok = above or (p is not None and p >= SHORTFALL_P)
    says = f"mean task score {o['score']:.3f} vs fp32 base {o['reference_score']:.3f}: {ratio:.3f}x {'>=' if above else '<'} {g.min_score_ratio}x"
    if ok and not above:
        says += f", within the noise of {o.get('prompts', 'these')} prompts (paired sign-flip test p = {p:.3f} >= {SHORTFALL_P})"
    elif not ok:
        says += f" (short by {g.min_score_ratio - ratio:.3f})" + ("" if p is None else f"; paired sign-flip test p = {p:.4f} < {SHORTFALL_P}")
    return GateResult("min_score_ratio", ok, round(ratio, 4), g.min_score_ratio, says)


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
}


def _fidelity_gate(name: str):
    """The gate on one fidelity number of the report (edgespec.harness.fidelity); 0 = off."""
    key, at_least, measured, bar = _FIDELITY[name]

    def gate(report: dict, g: GatesConfig) -> GateResult | None:
        f, threshold = report.get("fidelity"), getattr(g, name)
        if threshold <= 0 or f is None:
            return None
        ok = f[key] >= threshold if at_least else f[key] <= threshold
        op = (">=" if ok else "<") if at_least else ("<=" if ok else ">")
        return GateResult(name, ok, f[key], threshold, f"{measured(f)} {op} {bar(threshold)}")

    return gate


def _overflow(report: dict, g: GatesConfig) -> GateResult | None:
    events = report.get("normalizer_events")
    if not g.no_overflow or events is None:
        return None
    ok = events == 0
    return GateResult("no_overflow", ok, events, 0, f"chosen pre-normalizers: {events} overflow/underflow events on the search rows")


GATES = (_speedup, _lossless, _score_ratio, _fidelity_gate("min_top1_agreement"), _fidelity_gate("max_perplexity_ratio"), _overflow)


def check_gates(report: dict, gates: GatesConfig) -> list[GateResult]:
    """Every gate that applies to this report (a gate with nothing to judge is left out)."""
    return [r for check in GATES if (r := check(report, gates)) is not None]


def as_dicts(results: list[GateResult]) -> list[dict]:
    return [r.to_dict() for r in results]
