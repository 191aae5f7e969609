"""Shared-prefix reuse: a prompt that starts with what the KV cache already holds is only
prefilled from where it differs, and decodes as if prefilled in full."""

import torch

from edgespec.config import DrafterConfig
from edgespec.runtime.generate import CacheState, eager_step, generate
from edgespec.speculative.step import EagerSpecMethods, SpecProgram
from edgespec.speculative.streams import StreamParams, StreamsModel
from edgespec.speculative.tree import Tree


def test_reusable_prefix_rules():
    c = CacheState()
    assert c.reusable([1, 2, 3]) == 0
    c.holds([1, 2, 3, 4, 5], 4)
    assert c.ids == [1, 2, 3, 4]
    assert c.reusable([1, 2, 3, 4, 9, 9]) == 4
    assert c.reusable([1, 2, 7]) == 2
    assert c.reusable([1, 2, 3, 4]) == 3  # one token is always fed, for the logits
    c.reset()
    assert c.reusable([1, 2]) == 0


def _requests(vocab, n=5, shared=12, own=4):
    g = torch.Generator().manual_seed(3)
    prefix = torch.randint(0, vocab, (shared,), generator=g).tolist()
    return [prefix + torch.randint(0, vocab, (own,), generator=g).tolist() for _ in range(n)]


def test_autoregressive_reuse_matches_full_prefill(tiny_model):
    step = eager_step(tiny_model)
    kw = dict(max_new_tokens=12, max_seq_len=64, eos_ids=())
    reqs = _requests(tiny_model.args.vocab_size)
    for prev, p in zip([None, *reqs[:-1]], reqs):
        fresh = generate(step, p, **kw).completion_ids  # full prefill
        cache = CacheState()
        if prev is not None:
            generate(step, prev, cache=cache, **kw)  # the cache now holds prev's context
        got = generate(step, p, cache=cache, **kw)
        assert got.completion_ids == fresh
        assert got.reused_prefix == (0 if prev is None else 12)


def test_speculative_reuse_matches_autoregressive(tiny_model):
    torch.manual_seed(1)
    params = StreamParams(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, f_rank=4, tree=(1, 1)))
    with torch.no_grad():
        for p in params.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    methods = EagerSpecMethods(SpecProgram(StreamsModel(tiny_model, params), Tree((2, 1))).eval())
    kw = dict(max_new_tokens=12, max_seq_len=64, eos_ids=())
    reqs = _requests(tiny_model.args.vocab_size)
    expected = [generate(eager_step(tiny_model), p, **kw).completion_ids for p in reqs]
    cache = CacheState()
    for p, want in zip(reqs, expected):
        got = generate(methods.forward, p, cache=cache, **kw, spec=methods)
        assert got.completion_ids == want
    assert got.reused_prefix == 12
