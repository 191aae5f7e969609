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
        lower_to_executorch({"forward": export_forward(model.eval(), args.max_seq_len, "exact")}, ProgramMeta(64, 97, 2, 1, (2,)), xnnpack="none").program
    )
    return path


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path))
    monkeypatch.delenv(plan.ENV, raising=False)
    yield tmp_path
    plan.install_flags_choice()


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
