"""The block kernel's plan chosen by measurement (kernels/plan.py): a program's own shapes are
recorded, timed, cached beside the library and installed; every choice computes the same bits;
a damaged cache is measured again."""

from __future__ import annotations

import json

import pytest
import torch

from edgespec.kernels import plan


@pytest.fixture(scope="module")
def block_program(tmp_path_factory):
    """A tiny Llama with every linear on the block kernel, lowered to a `.pte`."""
    from edgespec.config import QuantConfig
    from edgespec.export.lowering import ProgramMeta, export_forward, lower_to_executorch
    from edgespec.kernels import library
    from edgespec.models.llama import LlamaArgs
    from edgespec.quant import plan_quantization, quantize_
    from tiny_models import random_transformer

    library.load()
    args = LlamaArgs(dim=96, n_layers=2, n_heads=6, n_kv_heads=2, hidden_dim=160, vocab_size=97, max_seq_len=64)
    model = random_transformer(args)
    quantize_(model, plan_quantization(model, QuantConfig(scheme="8da4w", kernel="edgespec")))
    path = tmp_path_factory.mktemp("plan") / "model.pte"
    path.write_bytes(
        lower_to_executorch(
            {"forward": export_forward(model.eval(), args.max_seq_len, "exact", glue=True)}, ProgramMeta(64, 97, 2, 1, (2,)), xnnpack="none"
        ).program
    )
    return path


class _Load:
    """A stand-in for plan._LoadMeter: the load every timing sees is `_Load.others` cores."""

    others = 0.0

    def __enter__(self):
        self.load = plan.TimingLoad(_Load.others, 2)
        return self

    def __exit__(self, *exc):
        return None


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path))
    monkeypatch.delenv(plan.ENV, raising=False)
    monkeypatch.setattr(plan, "_LoadMeter", _Load)  # a quiet machine unless a test says otherwise
    _Load.others = 0.0
    yield tmp_path
    plan.install_flags_choice()


def test_the_load_meter_reads_other_processes_cpu_time():
    """Busy-waiting in this process is not other processes' load; the meter reports a share of
    the machine's cores."""
    import time

    with plan._LoadMeter() as m:
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
    assert m.load is not None and 0.0 <= m.load.others_cores <= m.load.cores


def test_a_plan_timed_on_a_busy_machine_is_timed_again_and_the_quiet_timing_kept(block_program, cache_dir, monkeypatch):
    """A simulated busy timing picks a choice the contention favoured ("no matrix split");
    the plan is provisional, so the next load times it again: quiet, the flags' choice wins and
    is kept, and later loads time nothing. A machine busy at every load stops re-timing after
    `RETIMES` timings and keeps the quietest."""
    from edgespec.runtime.runner import ProgramRunner

    quiet_best = plan.flags_choice()
    busy_best = plan.Choice(quiet_best.path, quiet_best.prefetch, plan.SPLITS["no matrix split"])
    timings = []

    def fake_tune(shapes, threads, forward=None, reps=5):
        timings.append(_Load.others)
        # busy: the other core's load slows the split calls, so no split wins; quiet: the flags' choice is 4% faster
        best, other = (busy_best, quiet_best) if _Load.others > plan.BUSY_CORES else (quiet_best, busy_best)
        regimes = {
            r: plan.RegimePlan(n, best, 1.0, 1.0 if best == quiet_best else 1.3, {best.label(): 1.0, other.label(): 1.04}) for r, n in plan.REGIMES.items()
        }
        return plan.KernelPlan(threads, len(shapes), 0.1, regimes, 0.01)

    monkeypatch.setattr(plan, "tune", fake_tune)
    _Load.others = 1.4
    first = ProgramRunner(block_program).kernel_plan
    assert first.provisional and first.regimes["one_row"].choice == busy_best and plan.current("one_row") == busy_best
    assert "busy: other processes used 1.40 of 2 cores" in first.when() and "timed again" in first.when()
    _Load.others = 0.05
    second = ProgramRunner(block_program).kernel_plan
    assert not second.provisional and second.timings == 2 and plan.current("one_row") == quiet_best
    ProgramRunner(block_program)
    assert len(timings) == 2  # the quiet plan is final

    for f in (cache_dir / "kernels" / "plans").glob("*.json"):
        f.unlink()
    for others in (1.4, 0.9, 1.6, 0.3):
        _Load.others = others
        kept = ProgramRunner(block_program).kernel_plan
    assert len(timings) == 2 + plan.RETIMES and kept.timings == plan.RETIMES and kept.load.others_cores == 0.9 and not kept.provisional


def test_info_says_when_and_under_what_load_the_plan_was_timed(block_program, cache_dir):
    """`edgespec info`'s plan line (read from the cache, nothing timed)."""
    from edgespec.cli.bundles import _plan_state
    from edgespec.runtime.runner import ProgramRunner

    assert "not timed on this CPU" in _plan_state(block_program)
    ProgramRunner(block_program)
    line = _plan_state(block_program)
    assert "quiet: other processes used 0.00 of 2 cores" in line and "one_row" in line


def test_loading_a_program_records_its_shapes_tunes_caches_and_installs(block_program, cache_dir):
    from edgespec.runtime.runner import ProgramRunner

    runner = ProgramRunner(block_program)
    p = runner.kernel_plan
    # every block-linear call of one forward: per layer q/k/v stacked, o, gate/up stacked, down; the head
    assert p is not None and p.calls == 2 * 4 + 1
    assert set(p.regimes) == set(plan.REGIMES)
    for name, r in p.regimes.items():
        assert plan.current(name) == r.choice and r.choice.path in plan.supported_paths()
        assert r.ms > 0 and r.default_ms > 0 and r.choice.label() in r.tried
    cached = list((cache_dir / "kernels" / "plans").glob("*.json"))
    assert len(cached) == 1 and plan.KernelPlan.from_json(json.loads(cached[0].read_text())) == p
    # a second load takes the cached plan: nothing is measured again
    again = ProgramRunner(block_program).kernel_plan
    assert again == p


def test_every_choice_computes_the_same_bits(block_program, cache_dir, monkeypatch):
    """Paths, prefetch distances and split rules change speed only: a prefill and a decoded
    token give bitwise the same logits under every choice."""
    from edgespec.runtime.runner import ProgramRunner

    monkeypatch.setenv(plan.ENV, "default")
    runner = ProgramRunner(block_program)
    assert runner.kernel_plan is None
    tokens = torch.randint(0, 97, (1, 20))

    def logits():
        return runner.forward(tokens, 0).clone(), runner.forward(tokens[:, :1], 20).clone()

    reference = logits()
    for path in plan.supported_paths() + ["portable"]:
        for prefetch in (0, 32):
            for split in plan.SPLITS.values():
                chosen = plan.Choice(path, prefetch, split)
                plan.install(plan.KernelPlan(1, 0, 0.0, {r: plan.RegimePlan(1, chosen, 1.0, 1.0, {}) for r in plan.REGIMES}, 0.0))
                got = logits()
                assert all(torch.equal(a, b) for a, b in zip(got, reference)), chosen


def test_a_damaged_cached_plan_is_measured_again(block_program, cache_dir):
    from edgespec.runtime.runner import ProgramRunner

    first = ProgramRunner(block_program).kernel_plan
    (cached,) = (cache_dir / "kernels" / "plans").glob("*.json")
    cached.write_text("{ not json")
    again = ProgramRunner(block_program).kernel_plan
    assert again is not None and again.calls == first.calls
    assert plan.KernelPlan.from_json(json.loads(cached.read_text())) == again


def test_a_plan_naming_a_path_this_cpu_lacks_is_refused():
    missing = [p for p in plan.PATHS if p not in plan.supported_paths() and p != "portable"]
    bad = plan.KernelPlan(1, 0, 0.0, {"one_row": plan.RegimePlan(1, plan.Choice(missing[0], 16, 0), 1.0, 1.0, {})}, 0.0)
    with pytest.raises(ValueError, match="does not run on this CPU"):
        plan.install(bad)
