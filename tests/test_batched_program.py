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


def test_batching_needs_the_exact_attention():
    from edgespec.errors import EdgespecError
    from edgespec.export.lowering import export_decode_rows

    with pytest.raises(EdgespecError, match="needs edgespec's exact attention"):
        export_decode_rows(with_batch_slots_(_model(), 2), "custom_sdpa", 8)
