"""Speculative Streaming on tiny random models: trees, losslessness, acceptance rules."""

import pytest
import torch

from edgespec.config import DrafterConfig
from edgespec.errors import EdgespecError
from edgespec.speculative.accept import accept_tree
from edgespec.speculative.common import count_parameters
from edgespec.speculative.streams import StreamParams, StreamsModel
from edgespec.speculative.tree import Tree


@pytest.mark.parametrize("branching", [(1,), (2, 2, 2), (3, 2, 1), (1, 1, 1, 1)])
def test_tree_shape(branching):
    t = Tree(branching)
    expected, width = 1, 1
    for k in branching:
        width *= k
        expected += width
    assert t.size == expected
    m = t.ancestor_mask()
    assert m.diagonal().all() and m[:, 0].all()
    for i in range(1, t.size):
        assert t.depth[i] == t.depth[t.parents[i]] + 1
        assert torch.equal(m[i], m[t.parents[i]] | (torch.arange(t.size) == i))
    assert sorted({t.rank[c] for c in t.children[0]}) == list(range(branching[0]))


def test_tree_fill_index_takes_stream_topk_by_depth_and_rank():
    t = Tree((2, 1))
    cand = torch.tensor([[10, 11], [20, 21]])
    assert cand.reshape(-1)[t.fill_index()].tolist() == [10, 11, 20, 20]


def _noisy_params(model, cfg, scale=0.3):
    torch.manual_seed(1)
    params = StreamParams(model, cfg)
    with torch.no_grad():
        for p in params.parameters():
            p.add_(torch.randn_like(p) * scale)  # make every adapter non-trivial
    return params


def test_shared_mode_changes_the_main_stream(tiny_model):
    cfg = DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, mode="shared", tree=(1, 1))
    spec = StreamsModel(tiny_model, _noisy_params(tiny_model, cfg, scale=1.0))
    tokens = torch.randint(0, 97, (1, 8))
    main_shared, _ = spec.forward_train(tokens)
    lossless = StreamsModel(tiny_model, _noisy_params(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))))
    main_plain, _ = lossless.forward_train(tokens)
    ref = tiny_model.hidden(tokens, torch.tensor([0]))
    torch.testing.assert_close(main_plain, ref, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(main_shared, ref, atol=1e-3)


def test_streams_see_no_future(tiny_model):
    """Stream rows at t must not depend on tokens after t."""
    spec = StreamsModel(tiny_model, _noisy_params(tiny_model, DrafterConfig(draft_depth=3, n_layers=2, lora_rank=4, tree=(1, 1, 1))))
    a = torch.randint(0, 97, (1, 10))
    b = a.clone()
    b[0, 6:] = (b[0, 6:] + 1) % 97
    _, sa = spec.forward_train(a)
    _, sb = spec.forward_train(b)
    torch.testing.assert_close(sa[:, :6], sb[:, :6])
    assert not torch.allclose(sa[:, 6:], sb[:, 6:])


def test_stream_rows_in_decoding_match_teacher_forcing(tiny_model):
    """Drafting over the static cache (decoding) gives the stream states of training."""
    spec = StreamsModel(tiny_model, _noisy_params(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))))
    tokens = torch.randint(0, 97, (1, 9))
    _, s_train = spec.forward_train(tokens)
    tiny_model.reset_cache()
    tiny_model(tokens, torch.tensor([0]))  # the prompt's K/V in the cache
    h0 = spec.lower_hidden(tokens)[0, -1]
    s_dec = spec.draft_hidden(h0[None], None, torch.tensor([0]), tokens.shape[1], 2)
    torch.testing.assert_close(s_dec, s_train[0, -1], atol=1e-5, rtol=1e-5)


def test_accept_greedy_follows_matching_children():
    t = Tree((2, 1))  # 0 -> {1, 2}; 1 -> 3; 2 -> 4
    toks = torch.tensor([9, 5, 6, 7, 8])
    logits = torch.full((5, 10), -1.0)
    for row, best in {0: 6, 1: 0, 2: 8, 3: 0, 4: 3}.items():
        logits[row, best] = 1.0
    assert _greedy(t, toks, logits) == ([0, 2, 4], [6, 8, 3])
    logits[0] = 0
    logits[0, 1] = 1.0  # no child matches
    assert _greedy(t, toks, logits) == ([0], [1])


def _greedy(tree, toks, logits):
    children, valid = tree.children_table()
    R, k = children.shape
    path, n, out = accept_tree(children, valid, len(tree.branching), toks, logits, torch.tensor([0.0]), torch.full((R, k), 0.5), torch.zeros(logits.shape[1]))
    return path[: int(n)].tolist(), out[: int(n)].tolist()


def test_extra_parameters_are_tiny(tiny_model):
    p = StreamParams(tiny_model, DrafterConfig(draft_depth=3, n_layers=1, lora_rank=0, tree=(1, 1, 1)))
    assert count_parameters(p) == 3 * tiny_model.args.dim


def test_weights_file_must_match_the_recipe_architecture(tiny_model, tmp_path):
    from edgespec.speculative.drafters import load_drafter, save_drafter

    cfg = DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))
    params = _noisy_params(tiny_model, cfg)
    save_drafter(tmp_path / "s.pt", params, cfg)
    back = load_drafter(tmp_path / "s.pt", tiny_model, expect=DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(2, 1)))
    assert isinstance(back, StreamsModel) and back.cfg.tree == (2, 1) and torch.equal(back.params.stream_emb, params.stream_emb)
    assert load_drafter(tmp_path / "s.pt", tiny_model).cfg.draft_depth == 2  # no recipe: the file's own architecture
    with pytest.raises(EdgespecError, match=r"drafter.lora_rank: recipe 8, file 4"):
        load_drafter(tmp_path / "s.pt", tiny_model, expect=DrafterConfig(draft_depth=2, n_layers=1, lora_rank=8, tree=(1, 1)))
    with pytest.raises(EdgespecError, match=r"drafter.kind: recipe 'medusa', file 'streams'"):
        load_drafter(tmp_path / "s.pt", tiny_model, expect=DrafterConfig(kind="medusa", draft_depth=2, n_layers=1, tree=(1, 1)))


def test_medusa_weights_load_as_medusa_heads(tiny_model, tmp_path):
    """A weights file says which drafter it holds: Medusa heads come back as a MedusaModel
    whatever the recipe's (irrelevant) stream ranks, and draft what they drafted."""
    from edgespec.speculative.drafters import load_drafter, new_drafter, save_drafter
    from edgespec.speculative.medusa import MedusaModel

    cfg = DrafterConfig(kind="medusa", draft_depth=2, n_layers=1, tree=(1, 1))
    heads = new_drafter(tiny_model, cfg)
    with torch.no_grad():
        for p in heads.params.parameters():
            p.normal_(0, 0.3)
    save_drafter(tmp_path / "m.pt", heads.params, heads.cfg)
    back = load_drafter(tmp_path / "m.pt", tiny_model, expect=DrafterConfig(kind="medusa", draft_depth=2, n_layers=1, lora_rank=64, tree=(2, 1)))
    assert isinstance(back, MedusaModel) and back.draft_layers == 0
    h = torch.randn(3, tiny_model.args.dim)
    torch.testing.assert_close(back.draft_hidden(h, h, torch.tensor([1]), 5, 2), heads.draft_hidden(h, h, torch.tensor([1]), 5, 2))
    assert isinstance(load_drafter(tmp_path / "m.pt", tiny_model), MedusaModel)  # no recipe: the file's own drafter
    with pytest.raises(EdgespecError, match=r"drafter.draft_depth: recipe 3, file 2"):
        load_drafter(tmp_path / "m.pt", tiny_model, expect=DrafterConfig(kind="medusa", draft_depth=3, n_layers=1, tree=(1, 1)))


@pytest.mark.parametrize("start", [0, 3])
def test_structured_stream_attention_equals_the_dense_stream_mask(start):
    """StreamSDPA computes attention under `stream_mask` from its structure (T + g keys per
    row): the same as dense masked attention over all T + R keys, for rows from `start` on."""
    from edgespec.models.llama import SDPA
    from edgespec.speculative.streams import StreamSDPA, stream_mask

    g, T, B, H, Hkv, D = 3, 7, 2, 6, 2, 8
    R = (T - start) * g
    q = torch.randn(B, R, H, D)
    k, v = torch.randn(B, T + R, Hkv, D), torch.randn(B, T + R, Hkv, D)
    mask = stream_mask(torch.tril(torch.ones(T, T, dtype=torch.bool))[start:], g)
    torch.testing.assert_close(StreamSDPA(g)(q, k, v, 0, mask), SDPA()(q, k, v, 0, mask), atol=1e-5, rtol=1e-5)
    # one mask per sequence, each seeing its own main keys
    see = torch.rand(B, 1, T - start, T) < 0.6
    see[..., 0] = True
    per_seq = stream_mask(see, g)
    assert per_seq.shape == (B, 1, R, T + R)
    torch.testing.assert_close(StreamSDPA(g)(q, k, v, 0, per_seq), SDPA()(q, k, v, 0, per_seq), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="stream mask"):
        StreamSDPA(g)(q[:, 1:], k, v, 0, mask[1:])  # rows not a whole number of positions


def test_stream_rows_from_a_start_position_are_the_full_passes_rows(tiny_model):
    spec = StreamsModel(tiny_model, _noisy_params(tiny_model, DrafterConfig(draft_depth=3, n_layers=2, lora_rank=4, tree=(1, 1, 1))))
    tokens = torch.randint(0, 97, (2, 11))
    m_all, s_all = spec.forward_train(tokens)
    m_part, s_part = spec.forward_train(tokens, start=4)
    torch.testing.assert_close(m_part, m_all)
    torch.testing.assert_close(s_part, s_all[:, 4:], atol=1e-5, rtol=1e-5)
    _, s_each = spec.forward_train(tokens, start=torch.tensor([6, 2]))  # one start per sequence
    assert s_each.shape[1] == 9
    torch.testing.assert_close(s_each[0, :5], s_all[0, 6:], atol=1e-5, rtol=1e-5)  # rows past the end repeat the last
    torch.testing.assert_close(s_each[1], s_all[1, 2:], atol=1e-5, rtol=1e-5)


def test_drafter_weights_carry_the_draft_vocabulary_of_a_bundle(tiny_model, tmp_path):
    from edgespec.speculative.drafters import load_drafter, save_drafter, saved_draft_ids

    cfg = DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))
    params = StreamParams(tiny_model, cfg)
    save_drafter(tmp_path / "plain.pt", params, cfg)
    save_drafter(tmp_path / "bundle.pt", params, cfg, torch.tensor([2, 5, 9]))
    assert saved_draft_ids(tmp_path / "plain.pt") is None
    assert saved_draft_ids(tmp_path / "bundle.pt").tolist() == [2, 5, 9]
    load_drafter(tmp_path / "bundle.pt", tiny_model, expect=cfg)  # still a weights file like any other


def test_a_drafter_drafts_through_the_vocabulary_it_was_trained_over(tiny_model, tmp_path, monkeypatch):
    """Export and tune take the draft vocabulary recorded in the weights file when it has the
    size the recipe asks for; otherwise (none recorded, another size) the corpus's."""
    from edgespec.speculative import vocab
    from edgespec.speculative.drafters import drafting_vocabulary, save_drafter

    monkeypatch.setattr(vocab, "draft_vocabulary", lambda src, n: torch.arange(n) * 10)  # "the corpus's"
    cfg = DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))
    params = StreamParams(tiny_model, cfg)
    save_drafter(tmp_path / "trained.pt", params, cfg, torch.tensor([2, 5, 9]))
    save_drafter(tmp_path / "plain.pt", params, cfg)
    assert drafting_vocabulary(tmp_path / "trained.pt", None, 3).tolist() == [2, 5, 9]
    assert drafting_vocabulary(tmp_path / "trained.pt", None, 4).tolist() == [0, 10, 20, 30]
    assert drafting_vocabulary(tmp_path / "plain.pt", None, 2).tolist() == [0, 10]
    assert drafting_vocabulary(tmp_path / "trained.pt", None, 0) is None  # the full vocabulary


def test_merged_main_model_is_the_shared_main_stream(tiny_model):
    """Shared mode's main rows as one plain model (adapters merged into the weights): the same
    logits as the main stream of the model with adapters, and the base left untouched."""
    from edgespec.speculative.common import frozen_layers
    from edgespec.speculative.streams import merged_main_model

    cfg = DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, mode="shared", tree=(1, 1))
    spec = StreamsModel(tiny_model, StreamParams(tiny_model, cfg))
    torch.manual_seed(1)
    for p in spec.params.lora.parameters():  # trained-looking adapters (B starts at zero)
        p.data.normal_(0, 0.05)
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    tokens = torch.randint(0, tiny_model.args.vocab_size, (2, 12))
    with torch.no_grad():
        main_h, _ = spec.forward_train(tokens)
        merged = merged_main_model(spec)
        logits = {m: m.output(m.norm(frozen_layers(m, m.embed(tokens), 0, m.args.n_layers))) for m in (merged, tiny_model)}
        torch.testing.assert_close(logits[merged], tiny_model.output(main_h), atol=1e-5, rtol=1e-5)
        assert not torch.allclose(logits[merged], logits[tiny_model], atol=1e-3)  # the adapters matter
    assert all(torch.equal(v, tiny_model.state_dict()[k]) for k, v in before.items())
