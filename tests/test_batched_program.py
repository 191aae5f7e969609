"""Batched decoding in one program call (`Transformer.decode_rows`, the program's
`decode_rows` method): rows of several sequences, each in its own cache slot, side by side."""

import pytest
import torch

from edgespec.models.llama import LlamaArgs, Transformer, with_batch_slots_

ARGS = LlamaArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128, vocab_size=97, max_seq_len=48)


def _model() -> Transformer:
    torch.manual_seed(0)
    model = Transformer(ARGS).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    return model


def _alone(forward, prompt: list[int], n: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy decoding of one sequence through forward(tokens [1, T], pos) -> logits [V]."""
    logits = [forward(torch.tensor([prompt]), 0)]
    out, pos = [int(logits[-1].argmax())], len(prompt)
    while len(out) < n:
        logits.append(forward(torch.tensor([[out[-1]]]), pos))
        out.append(int(logits[-1].argmax()))
        pos += 1
    return out, logits


def _batched(decode_rows, prompts: list[list[int]], n: int, slots: int) -> tuple[list[list[int]], list[list[torch.Tensor]]]:
    """Greedy decoding of every prompt, `slots` at a time: each call carries the next token of
    every running sequence and, while a slot is free, the prompt of the next sequence waiting
    (prefilled beside the others); a finished sequence's slot takes the next prompt."""
    outs, logits = [[] for _ in prompts], [[] for _ in prompts]
    waiting, running = list(range(len(prompts))), {}  # slot -> (sequence, next position)
    while waiting or running:
        rows, where, emit, owners = [], [], [], []
        for slot, (i, pos) in running.items():
            rows.append(outs[i][-1])
            where.append((slot, pos))
            emit.append(len(rows) - 1)
            owners.append(i)
        free = [s for s in range(slots) if s not in running]
        while free and waiting:
            i, slot = waiting.pop(0), free.pop(0)
            rows += prompts[i]
            where += [(slot, p) for p in range(len(prompts[i]))]
            emit.append(len(rows) - 1)
            owners.append(i)
            running[slot] = (i, len(prompts[i]) - 1)
        out = decode_rows(torch.tensor([rows]), torch.tensor([s for s, _ in where]), torch.tensor([p for _, p in where]), torch.tensor(emit))
        for row, i in zip(out, owners):
            outs[i].append(int(row.argmax()))
            logits[i].append(row)
        for slot, (i, pos) in list(running.items()):
            if len(outs[i]) >= n:
                del running[slot]
            else:
                running[slot] = (i, pos + 1)
    return outs, logits


PROMPTS = [[1, 2, 3, 4, 5], [7, 8], [9, 10, 11, 12, 13, 14, 15, 16, 17], [20], [30, 31, 32]]


def test_eager_rows_of_many_sequences_decode_as_each_alone():
    model = _model()
    with torch.no_grad():
        alone = []
        for p in PROMPTS:
            model.reset_cache()
            alone.append(_alone(lambda t, pos: model(t, torch.tensor([pos]))[0], p, 7)[0])
        with_batch_slots_(model, 3)
        assert model.batch_slots == 3
        got, _ = _batched(model.decode_rows, PROMPTS, 7, slots=3)
    assert got == alone


@pytest.fixture(scope="module")
def batched_pte(tmp_path_factory):
    from edgespec.export.lowering import ProgramMeta, export_decode_rows, export_forward, lower_to_executorch

    model = with_batch_slots_(_model(), 3)
    programs = {"forward": export_forward(model, ARGS.max_seq_len, "exact"), "decode_rows": export_decode_rows(model, "exact", 24)}
    path = tmp_path_factory.mktemp("batched") / "model.pte"
    path.write_bytes(lower_to_executorch(programs, ProgramMeta(ARGS.max_seq_len, 97, 2, 1, (2,), batch_slots=3)).program)
    return path


def test_program_rows_of_many_sequences_are_bitwise_each_alone(batched_pte):
    """Slots finish and take the next prompt mid-run, prompts prefill beside other sequences'
    tokens: every sequence's logits are the bits of its own one-at-a-time decoding through
    forward (the block kernel's and the exact attention's rows are their own)."""
    from edgespec.kernels import library
    from edgespec.runtime.runner import ProgramRunner, execute

    library.load()
    runner = ProgramRunner(batched_pte)
    assert int(runner.constant("get_batch_slots")) == 3
    method = runner.program.load_method("decode_rows")
    alone = [_alone(runner.forward, p, 7) for p in PROMPTS]
    got = _batched(lambda *a: execute(method, list(a))[0], PROMPTS, 7, slots=3)
    assert got[0] == [a[0] for a in alone]
    for mine, theirs in zip(got[1], (a[1] for a in alone)):
        assert all(torch.equal(x, y) for x, y in zip(mine, theirs))


LONG = [[5 + i % 40 for i in range(23)], [3, 1, 4, 1, 5, 9, 2, 6], [11, 12], [40, 41, 42, 43], [8], [60, 61, 62, 63, 64, 65, 66]]


def _each_alone(forward, prompts, **options) -> list[list[int]]:
    from edgespec.runtime.generate import generate

    return [generate(forward, p, max_seq_len=ARGS.max_seq_len, eos_ids=(), **options).completion_ids for p in prompts]


def _together(decode_rows, prompts, slots, call_rows, seeds=None, **options) -> list[list[int]]:
    from edgespec.runtime.batch_decode import decode_batch

    requests = [(i, p, {} if seeds is None else {"seed": seeds[i]}) for i, p in enumerate(prompts)]
    done = dict(decode_batch(decode_rows, requests, slots=slots, call_rows=call_rows, max_seq_len=ARGS.max_seq_len, eos_ids=(), **options))
    return [done[i].completion_ids for i in range(len(prompts))]


def test_the_scheduler_decodes_each_prompt_as_alone_eagerly():
    """decode_batch over the eager model: prompts longer than a call prefilled in chunks beside
    running sequences, slots refilled as sequences end (budgets differ per request)."""
    from edgespec.runtime.generate import eager_step

    model = _model()
    with torch.no_grad():
        alone = []
        for p in LONG:
            model.reset_cache()
            alone += _each_alone(eager_step(model), [p], max_new_tokens=9)
        with_batch_slots_(model, 3)
        got = _together(model.decode_rows, LONG, slots=3, call_rows=8, max_new_tokens=9)
    assert got == alone


def test_the_scheduler_on_the_program_gives_each_prompt_its_own_tokens_greedy_and_sampled(batched_pte):
    """Through the program's decode_rows: every sequence's greedy tokens, and its samples with
    its own seed, are those of its own decoding through forward."""
    from edgespec.kernels import library
    from edgespec.runtime.runner import ProgramRunner, execute

    library.load()
    runner = ProgramRunner(batched_pte)
    method = runner.program.load_method("decode_rows")

    def decode_rows(*a):
        return execute(method, list(a))[0]

    assert _together(decode_rows, LONG, slots=3, call_rows=8, max_new_tokens=12) == _each_alone(runner.forward, LONG, max_new_tokens=12)
    seeds = [7, 8, 9, 10, 11, 12]
    alone = [_each_alone(runner.forward, [p], max_new_tokens=12, temperature=0.9, seed=s)[0] for p, s in zip(LONG, seeds)]
    assert _together(decode_rows, LONG, slots=3, call_rows=8, seeds=seeds, max_new_tokens=12, temperature=0.9) == alone
    assert len({tuple(a) for a in alone}) == len(alone)


def test_a_prompt_too_long_is_an_error_of_its_own():
    from edgespec.runtime.batch_decode import decode_batch

    model = with_batch_slots_(_model(), 2)
    requests = [(0, [1, 2, 3], {}), (1, list(range(1, 60)), {}), (2, [4, 5], {})]
    with torch.no_grad():
        done = dict(decode_batch(model.decode_rows, requests, slots=2, call_rows=4, max_new_tokens=3, max_seq_len=ARGS.max_seq_len, eos_ids=()))
    assert len(done[0].completion_ids) == 3 and len(done[2].completion_ids) == 3
    assert "the prompt has 59 tokens but the program's context is 48" in str(done[1])


def test_batching_needs_the_exact_attention():
    from edgespec.errors import EdgespecError
    from edgespec.export.lowering import export_decode_rows

    with pytest.raises(EdgespecError, match="needs edgespec's exact attention"):
        export_decode_rows(with_batch_slots_(_model(), 2), "custom_sdpa", 8)


def test_generate_batch_writes_each_prompts_own_completion(tiny_batched_bundle, tmp_path):
    """`edgespec generate --input --batch 3`: every line's completion is the one `--batch 1`
    writes (greedy, and sampled with the run's seed), a bad line is an error row of its own,
    and a bundle of fewer slots than asked is refused with the export setting that fixes it."""
    import json

    from click.testing import CliRunner

    from edgespec.bundle import read_manifest
    from edgespec.cli import main

    assert "decode_rows" in read_manifest(tiny_batched_bundle).methods
    lines = [{"id": f"p{i}", "prompt": p} for i, p in enumerate(["hello there", "a" * 40, "the cat sat on", "x", "one two three four five", "zz top"])]
    lines.insert(3, {"id": "bad", "prompt": ""})
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))

    def run(batch: int, *extra: str) -> dict:
        out = tmp_path / f"out{batch}{'_'.join(extra)}.jsonl"
        res = CliRunner().invoke(
            main,
            [
                "generate",
                "--bundle",
                str(tiny_batched_bundle),
                "--input",
                str(src),
                "--output",
                str(out),
                "--max-new-tokens",
                "12",
                "--batch",
                str(batch),
                *extra,
            ],
        )
        assert res.exit_code == 0, res.output
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        return {r["id"]: r.get("completion", r.get("error")) for r in rows}

    one, three = run(1), run(3)
    assert one == three and len(three) == 7 and "non-empty string 'prompt'" in three["bad"]
    assert run(1, "--temperature", "0.8", "--seed", "3") == run(3, "--temperature", "0.8", "--seed", "3")
    res = CliRunner().invoke(
        main, ["generate", "--bundle", str(tiny_batched_bundle), "--input", str(src), "--output", str(tmp_path / "o.jsonl"), "--batch", "4"]
    )
    assert res.exit_code != 0 and "decodes at most 3 sequence(s) at once; export it with export.batch_slots=4" in res.output


def test_a_recipe_batches_only_the_block_kernels_autoregressive_program():
    from edgespec.config import Recipe
    from edgespec.errors import EdgespecError

    Recipe().replace(export={"batch_slots": 8})  # the default: the block kernel
    for change in ({"quant": {"kernel": "xnnpack"}}, {"drafter": {"weights": "smollm2-135m-hydra-mix4k.pt"}}):
        with pytest.raises(EdgespecError, match="export.batch_slots"):
            Recipe().replace(export={"batch_slots": 8}, **change)
    with pytest.raises(EdgespecError, match="export.batch_slots"):
        Recipe().replace(export={"batch_slots": 0})
