"""The EAGLE-style drafter: what training sees is what the program drafts from."""

import torch

from edgespec.config import DrafterConfig, TrainConfig
from edgespec.runtime.generate import eager_step, generate
from edgespec.speculative.drafters import load_drafter, new_drafter, save_drafter
from edgespec.speculative.eagle import pass_mask
from edgespec.speculative.features import FeatureCache
from edgespec.speculative.step import EagerSpecMethods, SpecProgram
from edgespec.speculative.train import train_drafter
from edgespec.speculative.tree import Tree
from test_train import _periodic_examples


def _eagle(base, gamma=3):
    torch.manual_seed(1)
    model = new_drafter(base, DrafterConfig(kind="eagle", draft_depth=gamma, tree=(1,) * gamma))
    with torch.no_grad():
        for p in model.params.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # away from the copied top layer
    return model


def test_pass_mask_is_what_a_drafting_row_sees():
    m = pass_mask(5, 3)  # pass 3 at p sees pass 1 <= p - 2, pass 2 at p - 1, pass 3 at p
    assert m[4].tolist() == [1, 1, 1, 0, 0] + [0, 0, 0, 1, 0] + [0, 0, 0, 0, 1]
    assert m[0].tolist() == [0] * 5 + [0] * 5 + [1, 0, 0, 0, 0]
    assert pass_mask(4, 1).equal(torch.tril(torch.ones(4, 4, dtype=torch.bool)))


def test_program_drafts_from_what_training_computes(tiny_model):
    """Teacher-forced training rows equal the program's drafting rows, over two steps (the
    carried feature of the row before a call, the draft layer's own cache)."""
    g = 3
    model = _eagle(tiny_model, g)
    prompt = [4, 8, 15, 16, 23, 42, 4, 8]
    seq = prompt + generate(eager_step(tiny_model), prompt, max_new_tokens=20, max_seq_len=64, eos_ids=()).completion_ids
    with torch.no_grad():
        _, want = model.forward_train(torch.tensor([seq]))  # [1, T, g, d]: row (t, j) predicts seq[t + 2 + j]
    program = SpecProgram(model, Tree((1,) * g))
    seen = []

    def teacher(hidden):  # the drafting head, recording its input and drafting the true tokens
        seen.append(hidden)
        t = pos_of_last + 2 + len(seen) - 1
        return torch.tensor([[seq[t]]])

    program._head = teacher
    methods = EagerSpecMethods(program)
    P = len(prompt)
    methods.forward(torch.tensor([seq[:P]]), 0)
    pos = P
    for _ in range(2):  # every draft is the greedy continuation: all accepted
        seen.clear()
        pos_of_last = pos + g  # the call accepts g + 1 tokens; its last accepted row
        draft = torch.tensor(seq[pos + 1 : pos + 1 + g])[:, None]
        toks, _ = methods.spec_step(seq[pos], draft, pos, 0.0, torch.full((g + 1, 1), 0.5), torch.zeros(97))
        assert toks == seq[pos + 1 : pos + 2 + g]
        for j in range(g):
            torch.testing.assert_close(seen[j][0], want[0, pos_of_last, j], atol=2e-5, rtol=1e-4)
        pos += g + 1


def test_eagle_drafts_are_lossless(tiny_model):
    prompt = [4, 8, 15, 16, 23, 42, 4, 8]
    ar = generate(eager_step(tiny_model), prompt, max_new_tokens=24, max_seq_len=64, eos_ids=()).completion_ids
    spec = EagerSpecMethods(SpecProgram(_eagle(tiny_model), Tree((2, 1, 1))))
    out = generate(spec.forward, prompt, max_new_tokens=24, max_seq_len=64, eos_ids=(), spec=spec)
    assert out.completion_ids == ar


def test_eagle_trains_and_reloads(tiny_model, tmp_path):
    model = new_drafter(tiny_model, DrafterConfig(kind="eagle", draft_depth=2, tree=(1, 1)))
    ex = _periodic_examples()
    hp = TrainConfig(steps=30, batch_size=8, lr=3e-3, warmup_steps=5, checkpoint_every=100, depth_weights=(1.0, 1.0), bf16=False)
    log = train_drafter(model, ex, FeatureCache(model, ex).h, hp, tmp_path)
    assert sum(log.loss[-5:]) < 0.75 * sum(log.loss[:5])
    save_drafter(tmp_path / "eagle.pt", model.params, model.cfg)
    again = load_drafter(tmp_path / "eagle.pt", tiny_model, model.cfg)
    for a, b in zip(model.params.state_dict().values(), again.params.state_dict().values(), strict=True):
        assert a.to(torch.bfloat16).float().equal(b)  # the file keeps bf16 (`EagleLayer.store_dtype`)


def test_quantized_draft_layer_still_drafts_losslessly(tiny_model):
    """Export quantizes the draft layer like the base (`EagleLayer.quant_policy`): its
    drafts change, the output does not."""
    from edgespec.config import QuantConfig
    from edgespec.quant import QuantPolicy, plan_quantization, quantize_

    model = _eagle(tiny_model)
    assert model.params.quant_policy == QuantPolicy()
    summary = quantize_(model.params, plan_quantization(model.params, QuantConfig(scheme="8da4w", group_size=32)))
    assert len(summary.rounded) == 9  # fuse, inp and the block's seven linears
    prompt = [4, 8, 15, 16, 23, 42, 4, 8]
    ar = generate(eager_step(tiny_model), prompt, max_new_tokens=24, max_seq_len=64, eos_ids=()).completion_ids
    spec = EagerSpecMethods(SpecProgram(model, Tree((1, 1, 1))))
    assert generate(spec.forward, prompt, max_new_tokens=24, max_seq_len=64, eos_ids=(), spec=spec).completion_ids == ar
