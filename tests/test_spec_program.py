"""The speculative program (forward + spec_step) on tiny random models:
eagerly (the code that is exported) and as a real ExecuTorch program."""

import pytest
import torch

from edgespec.config import DrafterConfig
from edgespec.errors import EdgespecError
from edgespec.runtime.generate import eager_step, generate
from edgespec.speculative.step import EagerSpecMethods, SpecProgram
from edgespec.speculative.streams import StreamParams, StreamsModel
from edgespec.speculative.tree import Tree


def _spec_model(model, gamma: int, mode: str = "lossless") -> StreamsModel:
    torch.manual_seed(1)
    params = StreamParams(model, DrafterConfig(draft_depth=gamma, n_layers=1, lora_rank=4, f_rank=4, mode=mode, tree=(1,) * gamma))
    with torch.no_grad():
        for p in params.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return StreamsModel(model, params)


def _prompts(n: int, vocab: int, length: int = 6):
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab, (length,), generator=gen).tolist() for _ in range(n)]


@pytest.mark.parametrize("branching", [(2, 2, 1), (1, 1, 1), (3,)])
def test_eager_program_equals_autoregressive(tiny_model, branching):
    spec = _spec_model(tiny_model, len(branching))
    tree = Tree(branching)
    methods = EagerSpecMethods(SpecProgram(spec, tree).eval())
    for prompt in _prompts(4, tiny_model.args.vocab_size):
        ar = generate(eager_step(tiny_model), prompt, max_new_tokens=30, max_seq_len=64, eos_ids=())
        got = generate(methods.forward, prompt, max_new_tokens=30, max_seq_len=64, eos_ids=(), spec=methods)
        assert got.completion_ids == ar.completion_ids
        assert sum(got.tokens_per_call) + 1 >= len(got.completion_ids)  # + the prefill's token


@pytest.mark.parametrize("branching", [(2, 2, 2), (1, 1, 1)])
def test_long_accepted_paths_compact_the_cache(tiny_model, branching, monkeypatch):
    """Drafts from an oracle: every call accepts deep paths, so KV compaction is exercised."""
    prompt = [3, 1, 4, 1, 5]
    ar = generate(eager_step(tiny_model), prompt, max_new_tokens=40, max_seq_len=64, eos_ids=()).completion_ids
    full = prompt + ar + [0] * 8
    program = SpecProgram(_spec_model(tiny_model, len(branching)), Tree(branching)).eval()
    V = tiny_model.args.vocab_size

    def oracle(v):  # `v.last`: the row at start_pos - 1; the next root sits at start_pos
        if int(v.start_pos) < len(prompt) + len(ar):  # past the budget `full` is padding
            assert int(v.bonus) == full[int(v.start_pos)]  # the call's last emitted token, next call's root
        s = int(v.start_pos) + 1
        nxt = full[s : s + program.depth]
        # with two candidates the right one is the second: the walk must look past the first
        return torch.tensor([[(t + 1) % V, t] if program.k == 2 else [t] for t in nxt])

    monkeypatch.setattr(program, "_draft", oracle)
    m = EagerSpecMethods(program)
    got = generate(m.forward, prompt, max_new_tokens=40, max_seq_len=64, eos_ids=(), spec=m)
    assert got.completion_ids == ar
    assert max(got.tokens_per_call) == len(branching) + 1
    assert got.mean_tokens_per_call > 3


def test_shared_mode_main_stream_uses_the_adapters(tiny_model):
    lossless = SpecProgram(_spec_model(tiny_model, 2), Tree((1, 1))).eval()
    shared = SpecProgram(_spec_model(tiny_model, 2, mode="shared"), Tree((1, 1))).eval()
    tokens = torch.tensor([[5, 6, 7, 8]])
    a = lossless(tokens, torch.tensor([0]))
    b = shared(tokens, torch.tensor([0]))
    ref = tiny_model(tokens, torch.tensor([0]))
    assert torch.allclose(a, ref, atol=1e-5)
    assert not torch.allclose(b, ref, atol=1e-3)


def test_prompt_must_leave_room_for_a_tree(tiny_model):
    methods = EagerSpecMethods(SpecProgram(_spec_model(tiny_model, 3), Tree((2, 2, 1))).eval())
    with pytest.raises(EdgespecError, match="reserved for speculation"):
        generate(methods.forward, list(range(55)), max_new_tokens=4, max_seq_len=64, eos_ids=(), spec=methods)
    with pytest.raises(EdgespecError, match="empty"):
        generate(methods.forward, [], max_new_tokens=4, max_seq_len=64, eos_ids=(), spec=methods)


def test_decoding_finishes_autoregressively_near_the_end_of_the_context(tiny_model):
    spec = _spec_model(tiny_model, 3)
    methods = EagerSpecMethods(SpecProgram(spec, Tree((1, 1, 1))).eval())
    prompt = _prompts(1, tiny_model.args.vocab_size, length=40)[0]
    ar = generate(eager_step(tiny_model), prompt, max_new_tokens=100, max_seq_len=64, eos_ids=())
    got = generate(methods.forward, prompt, max_new_tokens=100, max_seq_len=64, eos_ids=(), spec=methods)
    assert got.completion_ids == ar.completion_ids
    assert len(got.completion_ids) == 64 - 40


def _hydra_model(model, gamma: int):
    from edgespec.speculative.medusa import HydraHeads, HydraModel

    torch.manual_seed(1)
    heads = HydraHeads(model.args.dim, gamma)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0, 0.2)
    return HydraModel(model, heads, 1)


def _eagle_model(model, gamma: int):
    from edgespec.speculative.drafters import new_drafter

    torch.manual_seed(1)
    eagle = new_drafter(model, DrafterConfig(kind="eagle", draft_depth=gamma, tree=(1,) * gamma))
    with torch.no_grad():
        for p in eagle.params.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return eagle


@pytest.fixture(scope="module", params=["custom_sdpa+draft_vocab", "rows", "hydra", "exact", "eagle"])
def spec_pte(tmp_path_factory, request):
    """A tiny two-method program (forward, spec_step) run by ExecuTorch: streams with the
    step's attention in one call and a 40-token draft vocabulary, or one row per call with the
    full head; or Hydra heads drafting a chain depth after depth through the draft vocabulary;
    or streams in a tree with edgespec's exact attention in both methods; or the EAGLE draft
    layer (its own cache and per-position feature store) drafting a chain, exact attention."""
    from edgespec.export.lowering import ProgramMeta, lower_to_executorch
    from edgespec.export.spec_program import export_spec_methods, spec_meta
    from edgespec.models.llama import LlamaArgs, Transformer

    args = LlamaArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128, vocab_size=97, max_seq_len=64)
    torch.manual_seed(0)
    model = Transformer(args)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    attention = {"custom_sdpa+draft_vocab": "custom_sdpa", "exact": "exact", "eagle": "exact"}.get(request.param, "rows")
    draft_ids = None if request.param in ("rows", "exact") else torch.arange(0, 97, 2)[:40]
    if request.param == "hydra":
        program = SpecProgram(_hydra_model(model.eval(), 3), Tree((1, 1, 1)), draft_ids).eval()
    elif request.param == "eagle":
        program = SpecProgram(_eagle_model(model.eval(), 3), Tree((1, 1, 1)), draft_ids).eval()
    else:
        program = SpecProgram(_spec_model(model.eval(), 3), Tree((2, 2, 1)), draft_ids).eval()
    path = tmp_path_factory.mktemp("spec") / "model.pte"
    path.write_bytes(lower_to_executorch(export_spec_methods(program, attention), ProgramMeta(64, 97, 2, 1, (2,), spec_meta(program))).program)
    return path, program, attention


@pytest.mark.slow
def test_program_spec_greedy_equals_program_autoregressive(spec_pte):
    from edgespec.runtime.runner import ProgramRunner

    path, program, _ = spec_pte
    runner = ProgramRunner(path)
    assert runner.has_spec and runner.branching == program.tree.branching and runner.tree_size == program.tree.size
    eager = EagerSpecMethods(program)
    for prompt in _prompts(4, 97):
        ar = generate(runner.forward, prompt, max_new_tokens=40, max_seq_len=64, eos_ids=())
        got = generate(runner.forward, prompt, max_new_tokens=40, max_seq_len=64, eos_ids=(), spec=runner)
        ref = generate(eager.forward, prompt, max_new_tokens=40, max_seq_len=64, eos_ids=(), spec=eager)
        assert got.completion_ids == ar.completion_ids
        assert got.tokens_per_call == ref.tokens_per_call


@pytest.mark.slow
def test_program_methods_share_one_kv_cache(spec_pte):
    """forward fills the cache that spec_step reads, and the other way round."""
    from edgespec.runtime.runner import ProgramRunner
    from edgespec.speculative.tree import placeholder_draft

    runner = ProgramRunner(spec_pte[0])
    prompt = _prompts(1, 97, length=9)[0]
    greedy = int(runner.forward(torch.tensor([prompt]), 0).argmax())
    runner.forward(torch.tensor([prompt[:-1]]), 0)
    half, noise = torch.full((runner.tree_size, runner.topk), 0.5), torch.zeros(97)
    toks, draft = runner.spec_step(prompt[-1], placeholder_draft(runner.depth, runner.topk), len(prompt) - 1, 0.0, half, noise)
    assert toks[0] == greedy and draft.shape == (3, runner.topk)  # the step read the prompt's K/V
    # the step wrote the K/V of the root; forward continues from what the step accepted
    full = runner.forward(torch.tensor([prompt + toks]), 0)
    runner.forward(torch.tensor([prompt[:-1]]), 0)
    runner.spec_step(prompt[-1], placeholder_draft(runner.depth, runner.topk), len(prompt) - 1, 0.0, half, noise)
    after = runner.forward(torch.tensor([toks[-1:]]), len(prompt) + len(toks) - 1)
    assert torch.allclose(after, full, atol=1e-4)
    if spec_pte[2] == "exact":  # rows' arithmetic independent of the call: the same bits
        assert torch.equal(after, full)


@pytest.mark.slow
def test_program_sampling_runs_and_is_seeded(spec_pte):
    from edgespec.runtime.runner import ProgramRunner

    runner = ProgramRunner(spec_pte[0])
    prompt = _prompts(1, 97)[0]
    a = generate(runner.forward, prompt, max_new_tokens=20, max_seq_len=64, eos_ids=(), temperature=0.8, seed=5, spec=runner)
    b = generate(runner.forward, prompt, max_new_tokens=20, max_seq_len=64, eos_ids=(), temperature=0.8, seed=5, spec=runner)
    c = generate(runner.forward, prompt, max_new_tokens=20, max_seq_len=64, eos_ids=(), temperature=0.8, seed=6, spec=runner)
    assert a.completion_ids == b.completion_ids and len(a.completion_ids) == 20
    assert a.completion_ids != c.completion_ids


def test_lookup_drafts_change_speed_not_output(tiny_model):
    from edgespec.speculative.lookup import with_lookup

    assert with_lookup(torch.tensor([[4, 5], [6, 7]]), [5]).tolist() == [[5, 4], [6, 7]]  # distinct per depth
    assert with_lookup(torch.tensor([[4], [6]]), [9, 8, 7]).tolist() == [[9], [8]]
    methods = EagerSpecMethods(SpecProgram(_spec_model(tiny_model, 3), Tree((2, 1, 1))).eval())
    for prompt in _prompts(3, 97, length=5):
        ar = generate(eager_step(tiny_model), prompt, max_new_tokens=40, max_seq_len=64, eos_ids=())
        plain = generate(methods.forward, prompt, max_new_tokens=40, max_seq_len=64, eos_ids=(), spec=methods)
        looked = generate(methods.forward, prompt, max_new_tokens=40, max_seq_len=64, eos_ids=(), lookup=3, spec=methods)
        assert looked.completion_ids == plain.completion_ids == ar.completion_ids
        # random tiny models fall into loops, which lookup predicts
        assert looked.mean_tokens_per_call >= plain.mean_tokens_per_call


def test_one_token_prompt(tiny_model):
    methods = EagerSpecMethods(SpecProgram(_spec_model(tiny_model, 2), Tree((2, 1))).eval())
    ar = generate(eager_step(tiny_model), [5], max_new_tokens=12, max_seq_len=64, eos_ids=())
    assert generate(methods.forward, [5], max_new_tokens=12, max_seq_len=64, eos_ids=(), spec=methods).completion_ids == ar.completion_ids
