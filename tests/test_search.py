import torch

from edgespec.numerics.formats import FP16
from edgespec.numerics.search import candidates, collect_norm_inputs, evaluate, search_layer, summarize_search, write_search_report
from edgespec.numerics.stable_norm import NormChoice


def _rows(n, d, rms, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    return x / x.pow(2).mean(-1, keepdim=True).sqrt() * rms


def test_naive_fails_on_large_rms_and_linf_is_chosen(tmp_path):
    d = 64
    calib = torch.cat([_rows(32, d, 1.0), _rows(32, d, 200.0, 1)])  # 200 > sqrt(65504/64) = 32
    held = _rows(16, d, 150.0, 2)
    res = search_layer("layers.0.attention_norm", calib, held, torch.ones(d), 1e-5, FP16)
    naive = next(c for c in res["candidates"] if c["prenorm"] == "none")
    assert naive["calibration"]["overflow"] == 32 and naive["heldout"]["overflow"] == 16
    assert res["chosen"]["prenorm"] == "linf"
    chosen = next(c for c in res["candidates"] if c["prenorm"] == "linf")
    assert all(chosen[k]["overflow"] == chosen[k]["underflow"] == 0 for k in ("calibration", "heldout", "adversarial"))
    assert chosen["heldout"]["max_rel_err"] < 5e-3
    result = {"format": "fp16", "guarantee": True, "layers": [res], "summary": summarize_search([res])}
    files = write_search_report(result, tmp_path)
    assert "normsearch.md" in files and "linf" in (tmp_path / "normsearch.md").read_text()
    from edgespec.harness.validate import _normalizer_search
    from edgespec.manifest import LAYOUT

    # validation reads the events from the file the search wrote, by the bundle layout's name
    assert LAYOUT.normsearch_json in files
    assert _normalizer_search(tmp_path) == {"normalizer_events": result["summary"]["chosen_events_all_sets"], "normalizer_note": None}
    assert result["summary"]["chosen_events_all_sets"] == 0 and result["summary"]["layers_beyond_format"] == []


def test_inputs_beyond_the_format_are_named_and_fail_the_gate(tmp_path):
    """Values past fp16's largest finite number (Gemma 3's residual stream reaches ~1e5) cannot
    be held by any pre-normalizer: the search says so, names the way out, and the gate fails."""
    from edgespec.config import GatesConfig
    from edgespec.harness.gates import _overflow
    from edgespec.harness.validate import _normalizer_search

    d = 64
    calib = torch.cat([_rows(8, d, 1.0), _rows(8, d, 7e4, 1)])  # every row past 65504
    layers = [search_layer("layers.8.ffn_norm", calib, _rows(4, d, 1.0, 2), torch.ones(d), 1e-6, FP16)]
    assert layers[0]["rows_beyond_format"] == {"calibration": 8, "heldout": 0}
    result = {"format": "fp16", "guarantee": True, "layers": layers, "summary": summarize_search(layers)}
    assert result["summary"]["layers_beyond_format"] == ["layers.8.ffn_norm"] and result["summary"]["chosen_events_all_sets"] > 0
    write_search_report(result, tmp_path)
    assert "numerics.format: bf16" in (tmp_path / "normsearch.md").read_text()
    outcome = _normalizer_search(tmp_path)
    verdict = _overflow(outcome, GatesConfig())
    assert not verdict.passed and "beyond fp16's largest finite number" in verdict.message


def test_without_guarantee_the_cheapest_clean_candidate_wins():
    d = 64
    calib = _rows(64, d, 1.0)
    res = search_layer("n", calib, _rows(16, d, 1.0, 3), torch.ones(d), 1e-5, FP16, guarantee=False)
    # small activations: no pre-normalizer is clean on calibration and held-out, but the
    # adversarial rows (scaled to the format's edge) still rule out "none" and "const"
    assert res["chosen"]["prenorm"] in ("linf", "l1")


def test_candidates_are_in_cost_order_and_flag_guarantees():
    c = candidates(_rows(8, 576, 3.0), FP16)
    assert [x[0].prenorm for x in c] == ["none", "const", "linf", "l1"]
    assert [x[1] for x in c] == [False, False, True, True]


def test_evaluate_counts_underflow():
    d = 64
    tiny = _rows(4, d, 1e-6)  # sum of squares ~ 6e-11 < fp16 min normal
    ev = evaluate(tiny, NormChoice("none"), FP16, torch.ones(d), 1e-5, False)
    assert ev.underflow == 4 and ev.overflow == 0
    ev = evaluate(tiny, NormChoice("linf", 2), FP16, torch.ones(d), 1e-5, True)
    assert ev.underflow == 0


def test_collect_norm_inputs(tiny_model):
    rows = collect_norm_inputs(tiny_model, [lambda: tiny_model(torch.tensor([[1, 2, 3, 4]]), torch.tensor([0]))])
    assert len(rows) == 2 * tiny_model.args.n_layers + 1
    assert all(v.shape == (4, tiny_model.args.dim) for v in rows.values())


def test_run_normsearch_respects_a_short_context(tiny_model):
    """Calibration prompts longer than the model's context are cut to fit."""
    from edgespec.config import NumericsConfig
    from edgespec.numerics.search import run_normsearch

    class Tok:  # every prompt becomes 100 tokens, longer than the tiny model's 64
        chat_template = None

        def encode(self, text):
            return [i % 97 for i in range(100)]

    res = run_normsearch(tiny_model, Tok(), NumericsConfig(calibration_prompts=2, heldout_prompts=1), True)
    assert res["summary"]["layers"] == 2 * tiny_model.args.n_layers + 1


def test_the_plotted_overflow_line_follows_the_searched_format(tmp_path):
    """The normsearch plot's overflow line is sqrt(M / d) with M the searched format's largest
    finite number, not fp16's 65504 for every format."""
    import math

    import pytest

    pytest.importorskip("matplotlib")
    from edgespec.numerics.formats import FORMATS
    from edgespec.numerics.search import overflow_rms, plot_report

    d = 64
    assert overflow_rms("fp16", d) == math.sqrt(65504 / d)
    assert overflow_rms("bf16", d) > 1e18 and overflow_rms("fp8_e4m3", d) == math.sqrt(448 / d)
    for name, fmt in FORMATS.items():
        res = search_layer("layers.0.attention_norm", _rows(8, d, 1.0), _rows(4, d, 1.0, 1), torch.ones(d), 1e-5, fmt)
        result = {"format": name, "guarantee": True, "layers": [res], "summary": summarize_search([res])}
        (ax,) = plot_report(result).axes
        limits = [ln for ln in ax.get_lines() if "overflow" in ln.get_label()]
        assert len(limits) == 1 and name in limits[0].get_label()
        assert list(limits[0].get_ydata()) == [overflow_rms(name, d)] * 2 == [math.sqrt(fmt.max_finite / d)] * 2
    assert "normsearch.png" in write_search_report(result, tmp_path) and (tmp_path / "normsearch.png").stat().st_size > 0
