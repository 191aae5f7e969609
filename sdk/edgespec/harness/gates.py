"""Gates: the recipe's bars, checked against a validation report."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from edgespec.config import GatesConfig
from edgespec.errors import EdgespecError


@dataclass(frozen=True)
class GateResult:
    name: str
    passed: bool
    measured: float | str | None
    threshold: float | str
    message: str


class GateFailure(EdgespecError):
    """One or more gates failed; the bundle is not written."""

    exit_code = 1

    def __init__(self, failed: list[GateResult], report_dir=None):
        self.failed = failed
        where = f" (report: {report_dir}/report.md)" if report_dir else ""
        super().__init__("validation gate(s) failed, bundle not written: " + "; ".join(f"{g.name}: {g.message}" for g in failed) + where)


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
            f"min_speedup {g.min_speedup}x asked, but the program has no speculative methods (export with streams.weights, or set validate.gates.min_speedup: 0)",
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
    ok_n, n = (int(x) for x in report["overall"]["lossless"].split("/"))
    ok = ok_n == n
    return GateResult(
        "lossless",
        ok,
        report["overall"]["lossless"],
        "all",
        f"speculative output identical to autoregressive on {ok_n}/{n} prompts" + ("" if ok else f" ({n - ok_n} differ)"),
    )


def _accuracy(report: dict, g: GatesConfig) -> GateResult | None:
    if g.max_accuracy_drop < 0:
        return None
    drop = report["overall"].get("accuracy_drop")
    if drop is None:  # validate.reference: none -- nothing to compare with
        return None
    ok = drop <= g.max_accuracy_drop
    return GateResult(
        "max_accuracy_drop",
        ok,
        round(drop, 4),
        g.max_accuracy_drop,
        f"mean task score {report['overall']['score']:.3f} vs fp32 base {report['overall']['reference_score']:.3f}: drop {drop:.3f} {'<=' if ok else '>'} {g.max_accuracy_drop}"
        + ("" if ok else f" (over by {drop - g.max_accuracy_drop:.3f})"),
    )


def _overflow(report: dict, g: GatesConfig) -> GateResult | None:
    events = report.get("normalizer_events")
    if not g.no_overflow or events is None:
        return None
    ok = events == 0
    return GateResult("no_overflow", ok, events, 0, f"chosen pre-normalizers: {events} overflow/underflow events on the search rows")


GATES = (_speedup, _lossless, _accuracy, _overflow)


def check_gates(report: dict, gates: GatesConfig) -> list[GateResult]:
    """Every gate that applies to this report (a gate with nothing to judge is left out)."""
    return [r for check in GATES if (r := check(report, gates)) is not None]


def as_dicts(results: list[GateResult]) -> list[dict]:
    return [asdict(r) for r in results]
