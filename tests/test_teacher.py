"""The batched eager teacher (continuous batching, shared prefix, top-K soft labels) against
one-prompt-at-a-time greedy decoding of the same model; sharded, resumable distillation."""

import pytest
import torch

from edgespec.corpus.distill import distill_shards, read_shards
from edgespec.errors import EdgespecError
from edgespec.models.batched_decode import as_teacher_, common_prefix, generate_stream


def _greedy(model, prompt, n):
    """Reference: the model's own static-cache forward, one token per call, fp32 argmax."""
    model.reset_cache()
    ids, logits = list(prompt), model(torch.tensor([prompt]), torch.tensor([0]))
    out = []
    for _ in range(n):
        tok = int(logits[0].argmax())
        out.append(tok)
        logits = model(torch.tensor([[tok]]), torch.tensor([len(ids)]))
        ids.append(tok)
    return out


def _prompts(k=7, prefix=(5, 6, 7)):
    g = torch.Generator().manual_seed(1)
    return [(f"p{i}", list(prefix) + torch.randint(8, 97, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist()) for i in range(k)]


def test_common_prefix():
    assert common_prefix([[1, 2, 3, 4], [1, 2, 3, 9], [1, 2, 3, 4, 5]]) == [1, 2, 3]
    assert common_prefix([[1, 2], [1, 2]]) == [1]  # one token short: every prompt has its own last row
    assert common_prefix([[1], [2]]) == []


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_stream_matches_one_prompt_at_a_time(tiny_model, batch):
    prompts = _prompts()
    with torch.inference_mode():
        ref = {k: _greedy(tiny_model, p, 10) for k, p in prompts}
    eos = ref["p2"][4]  # a token one prompt emits mid-way: that row stops there, others may too
    teacher = as_teacher_(tiny_model, torch.float32)
    got = dict(
        generate_stream(teacher, prompts, batch=batch, max_new_tokens=10, eos_ids=(eos,), max_len=40, prefix=common_prefix(p for _, p in prompts), top_k=5)
    )
    assert set(got) == set(ref)
    for k, r in got.items():
        expect = ref[k][: ref[k].index(eos) + 1] if eos in ref[k] else ref[k]
        assert r.response_ids == expect, k
        assert r.stopped == (eos in ref[k])
        assert r.topk_ids.shape == (len(expect), 5) and r.topk_ids.dtype == torch.int32 and r.topk_p.dtype == torch.float16
        assert r.topk_ids[:, 0].tolist() == expect  # greedy = top-1
        assert bool((r.topk_p[:, :-1] >= r.topk_p[:, 1:]).all()) and float(r.topk_p.float().sum(-1).max()) <= 1.001
    assert got["p2"].stopped and got["p2"].response_ids[-1] == eos


def test_stream_refuses_prompts_that_do_not_fit(tiny_model):
    teacher = as_teacher_(tiny_model, torch.float32)
    with pytest.raises(ValueError, match="max_len"):
        list(generate_stream(teacher, [("a", list(range(1, 30)))], batch=2, max_new_tokens=20, eos_ids=(), max_len=40))
    with pytest.raises(ValueError, match="shared prefix"):
        list(generate_stream(teacher, [("a", [1, 2, 3])], batch=2, max_new_tokens=2, eos_ids=(), prefix=[9]))


def test_shards_are_written_resumed_and_checked(tiny_model, tmp_path):
    teacher = as_teacher_(tiny_model, torch.float32)
    rows = [(k, "math", p) for k, p in _prompts(k=5)]
    kw = dict(batch=2, max_new_tokens=6, eos_ids=(), top_k=3, shard_size=2)
    stats = distill_shards(teacher, rows, tmp_path, **kw)
    assert stats["shards"] == 3 and stats["new_sequences"] == 5 and stats["new_response_tokens"] == 30
    got = list(read_shards(tmp_path))
    assert sorted(r["id"] for r in got) == [k for k, _, _ in rows]
    by_id = {r["id"]: r for r in got}
    for k, _, p in rows:
        assert by_id[k]["prompt_ids"] == p and len(by_id[k]["response_ids"]) == 6 and by_id[k]["topk_p"].shape == (6, 3)
    (tmp_path / "shard-00001.pt").unlink()  # as if stopped before the second shard
    again = distill_shards(teacher, rows, tmp_path, **kw)
    assert again["skipped_shards"] == 2 and again["new_sequences"] == 2
    assert {r["id"]: r["response_ids"] for r in read_shards(tmp_path)} == {r["id"]: r["response_ids"] for r in got}
    with pytest.raises(EdgespecError, match="other prompts"):
        distill_shards(teacher, rows[:4], tmp_path, **kw | {"shard_size": 3})


def test_training_reads_a_shard_directory(tiny_model, tmp_path):
    from edgespec.speculative.train_data import load_examples

    teacher = as_teacher_(tiny_model, torch.float32)
    rows = [(k, "code", p) for k, p in _prompts(k=3)]
    distill_shards(teacher, rows, tmp_path, batch=3, max_new_tokens=4, eos_ids=(), shard_size=8)
    ex = load_examples(tmp_path, tokenizer=None, seq_len=64, chat_template=True)
    assert sorted((e.n_prompt, len(e.tokens)) for e in ex) == sorted((len(p), len(p) + 4) for _, _, p in rows)
    assert all(e.topk_ids.shape == (4, 8) and e.topk_ids[:, 0].tolist() == e.tokens[e.n_prompt :] for e in ex)
    short = load_examples(tmp_path, tokenizer=None, seq_len=min(len(p) for _, _, p in rows) + 2, chat_template=True)  # cut into the responses
    assert all(len(e.topk_ids) == max(0, len(e.tokens) - e.n_prompt) for e in short)


def test_shards_are_length_sorted_within_windows_of_the_given_order(tiny_model, tmp_path):
    teacher = as_teacher_(tiny_model, torch.float32)
    rows = [(f"p{i}", "math", list(range(1, n + 1))) for i, n in enumerate([9, 3, 7, 2, 8, 4])]
    distill_shards(teacher, rows, tmp_path, batch=2, max_new_tokens=2, eos_ids=(), shard_size=1, sort_window=3)
    order = [torch.load(p, weights_only=True)["ids"][0] for p in sorted(tmp_path.glob("shard-*.pt"))]
    assert order == ["p1", "p2", "p0", "p3", "p5", "p4"]  # the first three by length, then the last three


def test_shard_parts_together_equal_one_run(tiny_model, tmp_path):
    """Workers i of n (shard index mod n) write exactly the shards one process writes."""
    teacher = as_teacher_(tiny_model, torch.float32)
    rows = [(k, "math", p) for k, p in _prompts(k=7)]
    kw = dict(batch=2, max_new_tokens=3, eos_ids=(), top_k=2, shard_size=2)
    distill_shards(teacher, rows, tmp_path / "one", **kw)
    parts = [distill_shards(teacher, rows, tmp_path / "split", part=(i, 3), **kw) for i in range(3)]
    assert [s["new_sequences"] for s in parts] == [3, 2, 2]  # shards 0,3 | 1 | 2 of 2,2,2,1 prompts
    one = sorted(p.name for p in (tmp_path / "one").glob("shard-*.pt"))
    assert one == sorted(p.name for p in (tmp_path / "split").glob("shard-*.pt"))
    for name in one:
        a, b = (torch.load(tmp_path / d / name, weights_only=True) for d in ("one", "split"))
        assert a["ids"] == b["ids"] and a["response_ids"] == b["response_ids"]


@pytest.mark.slow
def test_distill_with_two_worker_processes(tmp_path):
    """`edgespec distill --source ... --workers 2`: two processes, every prompt once, resumable."""
    import json

    from click.testing import CliRunner

    from edgespec.cli import main

    args = [
        "distill",
        "--source",
        "smollm2-135m-instruct",
        "--suites",
        "math",
        "--n",
        "6",
        "--max-new-tokens",
        "4",
        "--shard-size",
        "2",
        "--workers",
        "2",
        "--out",
        str(tmp_path),
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    stats = json.loads(r.output[r.output.rindex('{"shards"') :])  # after the progress bar's last \r
    assert stats["workers"] == 2 and stats["shards"] == 3 and stats["new_sequences"] == 6
    rows = list(read_shards(tmp_path))
    assert len({r["id"] for r in rows}) == 6 and all(len(r["response_ids"]) <= 5 for r in rows)
    out = CliRunner().invoke(main, args).output
    again = json.loads(out[out.rindex('{"shards"') :])
    assert again["skipped_shards"] == 3 and again["new_sequences"] == 0


def test_the_fp32_reference_decodes_in_batches_as_alone(tiny_model):
    """The harness's fp32 reference answers (`greedy_completions`): prompts of two budgets,
    decoded 8 at a time, each the completion `generate` gives alone (EOS left out), in input
    order; the model's attention is its own again afterwards."""
    from edgespec.harness.reference import greedy_completions
    from edgespec.models.llama import SDPA
    from edgespec.runtime.generate import eager_step, generate

    prompts = [p for _, p in _prompts(11)]
    budgets = [6 if i % 3 else 10 for i in range(len(prompts))]
    step = eager_step(tiny_model)
    eos = generate(step, prompts[2], max_new_tokens=10, max_seq_len=64, eos_ids=()).completion_ids[3]  # one row stops mid-way
    alone = [generate(step, p, max_new_tokens=b, max_seq_len=64, eos_ids=(eos,)).completion_ids for p, b in zip(prompts, budgets)]
    ticks = []
    assert greedy_completions(tiny_model, prompts, budgets, 64, (eos,), lambda: ticks.append(1)) == alone
    assert len(ticks) == len(prompts) and eos not in sum(alone, []) and len(alone[2]) < budgets[2]  # it stopped at EOS
    assert all(type(m.sdpa) is SDPA for m in tiny_model.modules() if hasattr(m, "sdpa"))
