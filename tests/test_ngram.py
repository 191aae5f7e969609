"""Repeated n-gram blocking: the incremental algorithm against the dictionary one, and in every
decoder (autoregressive, speculative eager program; greedy and sampling)."""

import random

import pytest
import torch

from edgespec.config import DrafterConfig
from edgespec.runtime.generate import eager_step, generate
from edgespec.runtime.ngram import banned_naive, banned_tokens, block_, is_banned
from edgespec.speculative.step import EagerSpecMethods, SpecProgram
from edgespec.speculative.streams import StreamParams, StreamsModel
from edgespec.speculative.tree import Tree


def test_incremental_bans_equal_the_dictionary_algorithm():
    rng = random.Random(0)
    for _ in range(3000):
        n = rng.randint(1, 5)
        ctx = [rng.randint(0, 4) for _ in range(rng.randint(0, 60))]
        assert set(banned_tokens(torch.tensor(ctx, dtype=torch.long), n).tolist()) == banned_naive(ctx, n), (ctx, n)


def test_known_bans_and_masking():
    ctx = torch.tensor([1, 2, 3, 1, 2])
    assert set(banned_tokens(ctx, 3).tolist()) == {3}  # "1 2 3" seen: after "1 2" no 3
    assert set(banned_tokens(ctx, 2).tolist()) == {3}  # after "2": 3
    assert banned_tokens(ctx, 4).numel() == 0  # "3 1 2" never followed
    logits = block_(torch.zeros(5), ctx, 3)
    assert logits[3] == float("-inf") and torch.isfinite(logits[[0, 1, 2, 4]]).all()
    assert is_banned([1, 2, 3, 1, 2], 3, 3) and not is_banned([1, 2, 3, 1, 2], 4, 3) and not is_banned([1, 2], 3, 0)


def _repeats(seq, n):
    grams = [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]
    return len(grams) != len(set(grams))


def _spec(model, branching):
    torch.manual_seed(1)
    params = StreamParams(model, DrafterConfig(draft_depth=len(branching), n_layers=1, lora_rank=4, f_rank=4, tree=(1,) * len(branching)))
    with torch.no_grad():
        for p in params.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return SpecProgram(StreamsModel(model, params), Tree(branching)).eval()


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("branching", [(2, 2, 1), (1, 1, 1)])
def test_speculative_blocking_equals_autoregressive_blocking(tiny_model, n, branching, monkeypatch):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    kw = dict(max_new_tokens=40, max_seq_len=64, eos_ids=())
    plain = generate(eager_step(tiny_model), prompt, **kw).completion_ids
    blocked = generate(eager_step(tiny_model), prompt, no_repeat_ngram_size=n, **kw).completion_ids
    assert blocked != plain and _repeats(prompt + plain, n)  # the bans bite on this model
    assert not _repeats(prompt + blocked, n)
    program = _spec(tiny_model, branching)
    m = EagerSpecMethods(program)
    got = generate(m.forward, prompt, no_repeat_ngram_size=n, spec=m, **kw)
    assert got.completion_ids == blocked

    # drafts from the *unblocked* continuation: long paths are proposed that the bans must cut
    full = prompt + plain + [0] * 8
    V = tiny_model.args.vocab_size

    def oracle(v):
        s = int(v.start_pos) + 1
        return torch.tensor([[(t + 1) % V, t] if program.k == 2 else [t] for t in full[s : s + program.depth]])

    monkeypatch.setattr(program, "_draft", oracle)
    m = EagerSpecMethods(program)
    got = generate(m.forward, prompt, no_repeat_ngram_size=n, spec=m, **kw)
    assert got.completion_ids == blocked


def test_blocked_sampling_matches_autoregressive_sampling(tiny_model):
    prompt = [3, 1, 4, 1, 5]
    kw = dict(max_new_tokens=30, max_seq_len=64, eos_ids=(), temperature=0.8, seed=7, no_repeat_ngram_size=2)
    ar = generate(eager_step(tiny_model), prompt, **kw).completion_ids
    m = EagerSpecMethods(_spec(tiny_model, (2, 1)))
    sp = generate(m.forward, prompt, spec=m, **kw)
    assert sp.completion_ids == ar and not _repeats(prompt + ar, 2)
    assert sp.tokens_per_call and set(sp.tokens_per_call) == {1}  # one token per call, as documented
