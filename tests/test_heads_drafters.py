"""Medusa and Hydra heads (speculative/medusa.py) on tiny random models: lossless decoding, training, replay."""

import torch

from edgespec.config import TrainConfig
from edgespec.runtime.generate import eager_step, generate
from edgespec.speculative.common import NoDrafter
from edgespec.speculative.features import FeatureCache
from edgespec.speculative.medusa import MedusaHeads, MedusaModel, medusa_parameter_count
from edgespec.speculative.step import EagerSpecMethods, SpecProgram
from edgespec.speculative.train import train_drafter
from edgespec.speculative.tree import Tree
from test_train import _periodic_examples


def test_baseline_drafters_are_lossless(tiny_model):
    prompt = [4, 8, 15, 16, 23, 42, 4, 8]
    ar = generate(eager_step(tiny_model), prompt, max_new_tokens=20, max_seq_len=64, eos_ids=()).completion_ids
    lookup = EagerSpecMethods(SpecProgram(NoDrafter(tiny_model), Tree((1, 1, 1))))  # the host drafts
    pld = generate(lookup.forward, prompt, max_new_tokens=20, max_seq_len=64, eos_ids=(), spec=lookup, lookup=3)
    medusa = MedusaModel(tiny_model, MedusaHeads(tiny_model.args.dim, 2))
    with torch.no_grad():
        for p in medusa.params.parameters():
            p.normal_(0, 0.3)
    heads = EagerSpecMethods(SpecProgram(medusa, Tree((2, 2))))
    md = generate(heads.forward, prompt, max_new_tokens=20, max_seq_len=64, eos_ids=(), spec=heads)
    assert pld.completion_ids == ar == md.completion_ids
    assert max(pld.tokens_per_call) > 1  # the repeated prompt is copied


def test_medusa_heads_train_with_the_stream_trainer(tiny_model, tmp_path):
    medusa = MedusaModel(tiny_model, MedusaHeads(tiny_model.args.dim, 2))
    ex = _periodic_examples()
    hp = TrainConfig(steps=40, batch_size=8, lr=1e-2, warmup_steps=5, checkpoint_every=100, depth_weights=(1.0, 1.0), bf16=False)
    log = train_drafter(medusa, ex, FeatureCache(medusa, ex).h, hp, tmp_path)
    assert sum(log.loss[-5:]) < 0.75 * sum(log.loss[:5])


def test_hydra_heads_learn_what_medusa_heads_cannot(tiny_model, tmp_path):
    """Pairs (a, a + 40) of a random a in 3..10: the token after a is fixed by a, which a
    Medusa head at the position before a cannot know (it can only guess among 8) and a Hydra
    head is fed."""
    from edgespec.speculative.medusa import HydraHeads, HydraModel
    from edgespec.speculative.train_data import TrainExample

    gen = torch.Generator().manual_seed(0)
    ex = []
    for _ in range(64):
        a = torch.randint(3, 11, (6,), generator=gen)
        pairs = torch.stack([a, a + 40], 1).flatten()
        ex.append(TrainExample(torch.cat([torch.randint(3, 97, (4,), generator=gen), pairs]).tolist(), 4))
    hp = TrainConfig(steps=60, batch_size=16, lr=2e-2, warmup_steps=5, checkpoint_every=1000, depth_weights=(1.0, 1.0), bf16=False)
    accs = {}
    for name, model in {
        "medusa": MedusaModel(tiny_model, MedusaHeads(tiny_model.args.dim, 2)),
        "hydra": HydraModel(tiny_model, HydraHeads(tiny_model.args.dim, 2)),
    }.items():
        torch.manual_seed(0)
        log = train_drafter(model, ex, FeatureCache(model, ex).h, hp, tmp_path / name)
        accs[name] = sum(a[0] for a in log.depth_acc[-5:]) / 5
    # Hydra: every row before a pair's second token, and 1 in 8 of the others; Medusa: 1 in 8
    assert accs["hydra"] > accs["medusa"] + 0.25, accs


def test_medusa_parameter_count():
    assert medusa_parameter_count(576, 49152, 3, own_lm_head=False) == 3 * (576 * 576 + 576)
    assert medusa_parameter_count(576, 49152, 3, own_lm_head=True) == 3 * (576 * 576 + 576 + 576 * 49152)


def test_medusa_heads_are_replayed_like_streams(tiny_model):
    """`edgespec tune`'s acceptance replay takes Medusa heads as it takes streams (features
    computed when not given)."""
    from edgespec.speculative.tree_tuning import future_ranks, replay

    medusa = MedusaModel(tiny_model, MedusaHeads(tiny_model.args.dim, 3), 1)
    ranks = future_ranks(medusa, [(3, list(range(1, 12)))], 3)
    assert ranks[0].shape == (11 - 2 - (3 - 1), 3)  # calls start at rows 2 .. T - 3
    tokens_per_call, calls = replay(ranks, (1, 1, 1))
    assert calls >= 1 and 1.0 <= tokens_per_call <= 4.0
