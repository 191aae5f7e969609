"""The streams' draft vocabulary: which tokens, the sliced head, ranks under it."""

import torch
from tests.test_spec_program import _spec_model

from edgespec.speculative.step import EagerSpecMethods, SpecProgram
from edgespec.speculative.tree import Tree, placeholder_draft
from edgespec.speculative.vocab import DraftHead, frequent_tokens, restrict_ranks


def test_frequent_tokens_takes_the_most_counted_ties_by_id_and_always():
    counts = torch.tensor([5, 0, 9, 9, 1, 0, 7])
    assert frequent_tokens(counts, 3).tolist() == [2, 3, 6]
    assert frequent_tokens(counts, 4).tolist() == [0, 2, 3, 6]
    assert frequent_tokens(counts, 5).tolist() == [0, 2, 3, 4, 6]
    assert frequent_tokens(counts, 6).tolist() == [0, 1, 2, 3, 4, 6]  # zero counts: lower id first
    assert frequent_tokens(counts, 3, always=(5,)).tolist() == [2, 3, 5]
    assert frequent_tokens(counts, 99).tolist() == list(range(7))


def test_draft_head_is_the_best_tokens_among_its_ids():
    torch.manual_seed(0)
    head = torch.randn(50, 8)
    ids = torch.tensor([1, 4, 7, 20, 33, 41, 49])
    hidden = torch.randn(3, 8)
    dh = DraftHead(head, ids)
    full = hidden @ head.T  # [3, 50]
    for k in (1, 3):
        got = dh.topk(hidden, k)
        want = ids[full[:, ids].topk(k, -1).indices]
        assert torch.equal(got, want)
        assert torch.isin(got, ids).all()


def test_restricted_ranks_count_only_draft_tokens():
    logits = torch.tensor([[0.0, 5.0, 3.0, 4.0, 1.0]])
    target = torch.tensor([2])
    assert restrict_ranks(logits, target, None, 5).tolist() == [2]  # 5.0 and 4.0 beat it
    ids = torch.tensor([0, 2, 3])
    assert restrict_ranks(logits[:, ids], target, ids, 5).tolist() == [1]  # only 4.0 does
    ids = torch.tensor([0, 1, 3])
    assert restrict_ranks(logits[:, ids], target, ids, 5).tolist() == [10**6]  # not draftable


def test_step_drafts_only_draft_vocabulary_tokens(tiny_model):
    V = tiny_model.args.vocab_size
    spec = _spec_model(tiny_model, 3)
    ids = torch.arange(0, V, 3)
    full = SpecProgram(spec, Tree((2, 1, 1))).eval()
    small = SpecProgram(spec, Tree((2, 1, 1)), ids).eval()
    everything = SpecProgram(spec, Tree((2, 1, 1)), torch.arange(V)).eval()
    args = (5, placeholder_draft(3, 2), 6, 0.0, torch.full((full.tree.size, 2), 0.5), torch.zeros(V))
    drafts = {}
    for name, program in (("full", full), ("small", small), ("everything", everything)):
        tiny_model.reset_cache()
        methods = EagerSpecMethods(program)
        methods.forward(torch.tensor([[3, 1, 4, 1, 5, 9]]), 0)
        drafts[name] = methods.spec_step(*args)[1]
    assert torch.isin(drafts["small"], ids).all()
    assert torch.equal(drafts["everything"], drafts["full"])  # the whole vocabulary: the same head
