"""Tree tuning: the acceptance replay reproduces real speculative decoding; the cost model ranks."""

import pytest
import torch

from edgespec.config import DrafterConfig
from edgespec.harness.tune import tune_bundle
from edgespec.runtime.generate import eager_step, generate
from edgespec.speculative import tree_tuning as T
from edgespec.speculative.step import EagerSpecMethods, SpecProgram
from edgespec.speculative.streams import StreamParams, StreamsModel
from edgespec.speculative.tree import Tree


def test_replay_on_synthetic_ranks():
    perfect = torch.zeros(10, 3, dtype=torch.long)
    assert T.replay_calls(perfect, (1, 1, 1)) == [4, 4, 2]  # the last call is cut by the sequence end
    hopeless = torch.full((10, 3), 99)
    assert T.replay_calls(hopeless, (4, 4, 4)) == [1] * 10
    second = torch.ones(6, 2, dtype=torch.long)  # the true token is always the runner-up
    assert T.replay_calls(second, (1, 1)) == [1] * 6
    assert T.replay_calls(second, (2, 1)) == [2, 2, 2]
    assert T.replay_calls(second, (2, 2)) == [3, 3]


@pytest.mark.parametrize("branching", [(2, 2, 1), (1, 1, 1), (3, 1)])
def test_replay_equals_greedy_tree_decoding(tiny_model, branching):
    """Ranks from one teacher-forced pass predict every call of the real decode loop."""
    torch.manual_seed(1)
    params = StreamParams(tiny_model, DrafterConfig(draft_depth=3, n_layers=1, lora_rank=4, tree=(1, 1, 1)))
    with torch.no_grad():
        for p in params.parameters():
            p.add_(torch.randn_like(p) * 0.3)
        tiny_model.output.weight.mul_(0.3)  # flatter streams: a mix of accepted depths
    spec = StreamsModel(tiny_model, params)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        prompt = torch.randint(0, 97, (5,), generator=gen).tolist()
        ar = generate(eager_step(tiny_model), prompt, max_new_tokens=30, max_seq_len=64, eos_ids=()).completion_ids
        ranks = T.future_ranks(spec, [(len(prompt), prompt + ar)], 3)
        m = EagerSpecMethods(SpecProgram(spec, Tree(branching)))
        real = generate(m.forward, prompt, max_new_tokens=30, max_seq_len=64, eos_ids=(), spec=m).tokens_per_call
        # the first call verifies the placeholder draft and ends at row real[0] (row 0 = the
        # last prompt token); the last call may be cut by the token budget
        assert T.replay_calls(ranks[0][real[0] :], branching)[:-1] == real[1:-1]


def _random_hydra(tiny_model):
    """Hydra heads of 3 depths with random weights over the tiny model (its lm head flattened:
    a mix of accepted depths)."""
    from edgespec.speculative.medusa import HydraHeads, HydraModel

    torch.manual_seed(2)
    heads = HydraHeads(tiny_model.args.dim, 3)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0, 0.2)
        tiny_model.output.weight.mul_(0.3)
    return HydraModel(tiny_model, heads, 1)


def test_replay_equals_chain_decoding_with_hydra_heads(tiny_model):
    """Hydra heads draft from their own previous drafts, replay conditions on the true tokens:
    for a chain the two agree, since a depth is only reached when every draft before it was
    the true token."""
    hydra = _random_hydra(tiny_model)
    gen = torch.Generator().manual_seed(0)
    accepted = 0
    for _ in range(3):
        prompt = torch.randint(0, 97, (5,), generator=gen).tolist()
        ar = generate(eager_step(tiny_model), prompt, max_new_tokens=30, max_seq_len=64, eos_ids=()).completion_ids
        ranks = T.future_ranks(hydra, [(len(prompt), prompt + ar)], 3)
        m = EagerSpecMethods(SpecProgram(hydra, Tree((1, 1, 1))))
        out = generate(m.forward, prompt, max_new_tokens=30, max_seq_len=64, eos_ids=(), spec=m)
        assert out.completion_ids == ar
        real = out.tokens_per_call
        assert T.replay_calls(ranks[0][real[0] :], (1, 1, 1))[:-1] == real[1:-1]
        accepted += sum(n > 1 for n in real)
    assert accepted > 0  # the heads' drafts were tested, not only the bonus tokens


@pytest.mark.parametrize("lookup", [1, 2])
def test_hybrid_replay_equals_decoding_with_lookup(tiny_model, lookup):
    """The hybrid draft (suffix matches first, `generate(lookup=N)`) replayed from the ranks and
    the text matches the real decode loop: call for call for the drafter alone; with suffix
    matches up to the one approximation `hybrid_fill` names (a continuation shorter than the
    chain is followed by the drafter's own deeper drafts, which the ranks only know when the
    drafter's chain was right: a random tiny model that repeats one token hits it often, a
    real model rarely)."""
    hydra = _random_hydra(tiny_model)
    gen = torch.Generator().manual_seed(0)
    matched = 0
    for _ in range(3):
        prompt = torch.randint(0, 97, (5,), generator=gen).tolist() * 2  # a repeat: suffix matches from the start
        m = EagerSpecMethods(SpecProgram(hydra, Tree((1, 1, 1))))
        out = generate(m.forward, prompt, max_new_tokens=30, max_seq_len=64, eos_ids=(), spec=m, lookup=lookup)
        ar = out.completion_ids
        ranks = T.future_ranks(hydra, [(len(prompt), prompt + ar)], 3)
        calls = T.replay_with_context(prompt, ar, T.accepted_depths(ranks[0], 3), T.hybrid_fill(3, lookup), 3)
        replayed, real = [n for n, _ in calls][:-1], out.tokens_per_call[:-1]  # the last call may be cut by the budget
        assert replayed[:2] == real[:2] and abs(len(replayed) - len(real)) <= 0.15 * len(real), (replayed, real)
        drafter_only = T.replay_with_context(prompt, ar, T.accepted_depths(ranks[0], 3), T.hybrid_fill(3, 0), 3)
        assert [n for n, _ in drafter_only][:-1] == generate(m.forward, prompt, max_new_tokens=30, max_seq_len=64, eos_ids=(), spec=m).tokens_per_call[:-1]
        matched += calls != drafter_only
    assert matched > 0  # the suffix matches changed calls, so they were tested


def test_candidates_and_estimates():
    trees = T.candidate_trees(3, 16)
    assert (1,) in trees and (1, 1, 1) in trees and (3, 2, 1) in trees and (2, 3) not in trees
    assert all(Tree(b).size <= 16 for b in trees)
    chains = T.candidate_trees(4, 8, chains_only=True)  # top-k only where nothing continues from it
    assert (1, 1, 1, 4) in chains and (1, 1, 3) in chains and (2, 1) not in chains and (1, 1, 1, 1) in chains
    assert all(Tree(b).size <= 8 for b in chains)
    ranks = [torch.tensor([[0, 0, 5], [1, 0, 0], [0, 9, 9], [0, 0, 0]] * 5)]
    curve = {1: 0.010, 2: 0.013, 4: 0.0135, 8: 0.015}  # flat from 2 to 8 rows, like XNNPACK's 8-row GEMM
    cost = T.StepCostModel.calibrate(curve, 0.020, Tree((1, 1, 1)), 4 / 30)
    assert abs(cost(Tree((1, 1, 1))) - 0.020) < 1e-12  # reproduces its calibration point
    assert cost(Tree((3, 2, 1))) > cost(Tree((1, 1, 1))) > cost(Tree((1,)))
    assert abs(cost.rows_cost(3) - 0.01325) < 1e-12 and abs(cost.rows_cost(10) - 0.01575) < 1e-12  # interpolated, extended
    # an 8-node tree costs what the curve says, not 7 times an extra row
    assert Tree((2, 1, 1)).size == 7 and cost(Tree((2, 1, 1))) - cost(Tree((1, 1, 1))) < 0.002
    table = T.estimate(ranks, cost, trees)
    assert table == sorted(table, key=lambda e: -e.tokens_per_s)
    assert all(e.tokens_per_call >= 1 for e in table)


def _manifest_only_bundle(d, speculative, files=()):
    from edgespec import bundle as B
    from manifests import tiny_manifest

    d.mkdir()
    for name in files:
        (d / name).write_bytes(b"weights")
    B.write_manifest(d, tiny_manifest(speculative))
    return d


def test_tune_reads_the_drafter_weights_from_the_bundle(tmp_path):
    """Checked before any slow work: an old bundle only names the recipe's weights file."""
    from click.testing import CliRunner

    from edgespec import bundle as B
    from edgespec.cli import main
    from edgespec.errors import EdgespecError
    from edgespec.manifest import LAYOUT

    old = _manifest_only_bundle(tmp_path / "old", {"weights": "smollm2-135m-streams-cpu120.pt"})
    with pytest.raises(EdgespecError, match="does not carry its drafter weights"):
        tune_bundle(old)
    with pytest.raises(EdgespecError, match="has no speculative methods"):
        tune_bundle(_manifest_only_bundle(tmp_path / "ar", None))
    res = CliRunner().invoke(main, ["tune", "--bundle", str(old)])
    assert res.exit_code == 2 and [l for l in res.output.splitlines() if l.startswith("error:")] == [res.output.strip()], res.output
    new = _manifest_only_bundle(tmp_path / "new", {"weights": LAYOUT.drafter}, [LAYOUT.drafter])
    assert B.drafter_weights(new, B.read_manifest(new)) == new / LAYOUT.drafter
    legacy = _manifest_only_bundle(tmp_path / "legacy", {"weights": LAYOUT.legacy_drafter}, [LAYOUT.legacy_drafter])
    assert B.drafter_weights(legacy, B.read_manifest(legacy)) == legacy / LAYOUT.legacy_drafter


@pytest.mark.slow
def test_tune_bundle_ranks_trees_on_a_real_bundle(fp32_bundle):
    from edgespec.bundle import read_manifest
    from edgespec.config import TuneConfig
    from edgespec.manifest import LAYOUT

    assert read_manifest(fp32_bundle).speculative.weights == LAYOUT.drafter
    phases = []
    out = tune_bundle(fp32_bundle, TuneConfig(prompts=1, max_new_tokens=8, max_size=6, context=64), on_progress=lambda phase, done, total: phases.append(phase))
    assert out["own_tree"] == [2, 1] and out["context"] == 64 and out["ar_tokens_per_s"] > 0
    assert out["lookup"] is None  # a product tree: the hybrid draft replays exactly on chains only
    assert out["trees"] and all(e["size"] <= 6 and e["tokens_per_call"] >= 1 for e in out["trees"])
    assert [e["tokens_per_s"] for e in out["trees"]] == sorted((e["tokens_per_s"] for e in out["trees"]), reverse=True)
    assert phases[0] == "continuations" and phases[-1] == "costs"
