"""bench/head_screen.py's bound: on random Q8_0 heads the screened rows always hold the full
head's argmax, and keeping all eight bits leaves the argmax alone."""

import importlib.util
from pathlib import Path

import torch

from edgespec.models.blocks import BlockWeights

_spec = importlib.util.spec_from_file_location("head_screen", Path(__file__).parents[1] / "bench" / "head_screen.py")
head_screen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(head_screen)


def test_the_screen_keeps_the_argmax_and_eight_bits_keep_only_it():
    g = torch.Generator().manual_seed(0)
    V, n = 3000, 128
    codes = torch.randint(-127, 128, (V, n), generator=g).to(torch.int8)
    scales = torch.rand(V, n // 32, generator=g).half().float() * 0.01 + 1e-3
    head = BlockWeights("Q8_0", 8, codes, scales)
    h = torch.randn(12, n, generator=g) * 3
    h[:, :4] *= 20  # a few large inputs, as final hidden states have
    out = head_screen.screen_counts(h, head, [3, 5, 8])  # asserts the argmax is among the rows left
    assert out["8"]["rows_left_max"] == 1 and out["8"]["rows_left_median"] == 1
    assert out["3"]["rows_left_median"] >= out["5"]["rows_left_median"] >= 1
    assert out["5"]["screen_mb"] < out["8"]["screen_mb"] < out["8"]["full_head_mb"] + 1e-9


# --- the screened argmax as built: edgespec::block_argmax, its intervals, next_token ---

import ctypes  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from edgespec.kernels.block_linear import BlockCodes, BlockLinear, pack_screen, reference_block_linear  # noqa: E402

PATHS = range(7)  # block_linear/dispatch.h's Path: portable, avx2, avx-vnni, avx512-vnni, neon-dotprod, neon-i8mm, amx-int8


def _q8_head(rows: int, k: int, seed: int = 0) -> BlockCodes:
    """A random Q8_0 head with every code value (the extremes -128 and 127 included) and fp16
    scales spanning a few octaves."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(-128, 128, (rows, k), generator=g, dtype=torch.int8)
    codes[0, :32], codes[1, :32] = -128, 127
    d = (torch.rand(rows, k // 32, generator=g) * 0.02 + 1e-3).half().float()
    return BlockCodes("S8H", codes, d)


def _kernel_lib() -> ctypes.CDLL:
    from edgespec.kernels import library

    lib = ctypes.CDLL(str(library.load()))
    lib.edgespec_screen_intervals.restype = ctypes.c_int64
    lib.edgespec_path_supported.restype = ctypes.c_int64
    lib.edgespec_argmax_exact_rows.restype = ctypes.c_int64
    return lib


def _intervals(lib, path: int, x: torch.Tensor, screen: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    lo, hi, xs = np.zeros(n, np.float32), np.zeros(n, np.float32), x.numpy().astype(np.float32).copy()
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    got = lib.edgespec_screen_intervals(ctypes.c_int64(path), ptr(xs), ctypes.c_int64(xs.size), ptr(screen), ctypes.c_int64(n), ptr(lo), ptr(hi))
    return (lo, hi) if got else None


def test_screen_intervals_hold_the_kernels_values_on_every_path():
    """block_linear/screen.h: each output's interval from the 5-bit screen holds the value the
    block kernel computes (its bits, `reference_block_linear`), on rows of several scales and
    with outliers, through every path this CPU runs; every path gives the same intervals."""
    lib = _kernel_lib()
    rows, k = 203, 192  # a padded last pair
    head = _q8_head(rows, k)
    screen = pack_screen(head).numpy()
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(k, generator=g) * s for s in (1e-3, 1.0, 40.0)]
    xs[1][::50] *= 300  # a few outliers, as final hidden states have
    paths = [p for p in PATHS if lib.edgespec_path_supported(p)]
    assert 0 in paths and len(paths) >= 2 or not any(lib.edgespec_path_supported(p) for p in (1, 2, 3)), paths
    for x in xs:
        exact = reference_block_linear(x[None], head)[0].numpy()
        first = None
        for p in paths:
            lo, hi = _intervals(lib, p, x, screen, rows)
            assert (lo <= exact).all() and (exact <= hi).all(), (p, float(x.abs().max()))
            if first is None:
                first = (lo, hi)
            assert np.array_equal(lo, first[0]) and np.array_equal(hi, first[1]), p
        width = (first[1] - first[0]).mean()
        assert width < exact.std(), "the screen's intervals are narrower than the spread of the outputs"


def _argmax_program(linear: BlockLinear, k: int):
    from executorch.exir import to_edge
    from executorch.runtime import Runtime

    from edgespec.kernels import ops  # noqa: F401  (the op's schema)

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = linear.op()

        def forward(self, x):
            return self.linear.argmax(x)

    ep = torch.export.export(Head(), (torch.zeros(3, k),), dynamic_shapes=({0: torch.export.Dim("rows", min=1, max=64)},), strict=False)
    program = Runtime.get().load_program(to_edge(ep).to_executorch().buffer)
    return program, program.load_method("forward")  # the method lives as long as its program


@pytest.mark.parametrize("screened", [False, True])
def test_block_argmax_in_a_program_is_torchs_argmax_of_the_kernels_logits(screened):
    """edgespec::block_argmax in a real `.pte`, with and without the screen: the index
    `reference_block_linear(x).argmax(-1)` gives, on random rows, a tie between two equal head
    rows (the first wins), a zero row (every output ties: row 0), a row holding a NaN (all NaN:
    row 0) and an infinity; with the screen, a clear winner is found re-scoring a few pairs of
    tiles only."""
    lib = _kernel_lib()
    rows, k = 700, 128
    head = _q8_head(rows, k, seed=2)
    codes = head.codes.clone()
    codes[400], codes[650] = codes[100], codes[100]  # rows 100, 400, 650: equal
    head = BlockCodes("S8H", codes, torch.cat([head.d[:400], head.d[100:101], head.d[401:650], head.d[100:101], head.d[651:]]))
    linear = BlockLinear(head)
    if screened:
        linear.add_screen_()
    _keep, method = _argmax_program(linear, k)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, k, generator=g) * 2
    x[0] = head.dequantize()[100] * 5  # row 100 (and its copies) wins: the first
    x[1] = 0
    x[2, 7], x[3, 9] = float("nan"), float("inf")
    x[4:20] *= 1e-2
    got = method.execute([x])[0]
    want = reference_block_linear(x, head).argmax(-1)
    assert got.dtype == torch.long and torch.equal(got, want)
    assert got[0] == 100 and got[1] == 0 and got[2] == 0
    lib.edgespec_argmax_exact_rows()  # reset
    method.execute([x[:1].contiguous()])
    exact = lib.edgespec_argmax_exact_rows()
    screens = screened and any(lib.edgespec_path_supported(p) for p in (1, 2, 3, 4, 5))  # a SIMD screen: x86, or Arm's dot product
    assert exact == (3 * 16 if screens else rows), exact  # the pairs holding rows 100, 400 and 650


def test_head_screen_needs_the_block_kernels_8_bit_head():
    from edgespec.config import QuantConfig
    from edgespec.errors import EdgespecError

    assert QuantConfig(head_screen=True).head_screen
    for bad in (dict(kernel="xnnpack"), dict(head_bits=4), dict(scheme="fp32")):
        with pytest.raises(EdgespecError, match="head_screen"):
            QuantConfig(head_screen=True, **bad)


def test_generate_takes_the_greedy_token_from_next_token_only_when_greedy_without_bans():
    """`generate(next_token=...)`: greedy decoding without n-gram bans calls next_token for the
    prompt and every one-token step, never `step`; sampling and bans call `step` (logits)."""
    from edgespec.runtime.generate import generate

    calls = {"step": 0, "next": 0}

    def step(tokens, pos):  # logits whose argmax is the last token + 1
        calls["step"] += 1
        return torch.nn.functional.one_hot(torch.tensor((int(tokens[0, -1]) + 1) % 11), 11).float()

    def next_token(tokens, pos):  # the same token without logits
        calls["next"] += 1
        return (int(tokens[0, -1]) + 1) % 11

    kw = dict(max_new_tokens=6, max_seq_len=64, eos_ids=())
    greedy = generate(step, [1, 2], next_token=next_token, **kw)
    assert greedy.completion_ids == [3, 4, 5, 6, 7, 8] and calls == {"step": 0, "next": 6}
    assert generate(step, [1, 2], **kw).completion_ids == greedy.completion_ids
    calls.update(step=0, next=0)
    generate(step, [1, 2], next_token=next_token, temperature=0.7, **kw)
    generate(step, [1, 2], next_token=next_token, no_repeat_ngram_size=2, **kw)
    assert calls["next"] == 0 and calls["step"] == 12


@pytest.mark.slow
def test_next_token_program_follows_forward_and_shares_its_cache():
    """A tiny model on the block kernel exported with `next_token` (a screened Q8_0 head):
    next_token gives forward's argmax after a prompt and at every step, the two methods
    feeding one KV cache (prefill by one, steps by the other), and the program carries the
    head's blocks once."""
    from executorch.runtime import Runtime

    from edgespec.config import QuantConfig
    from edgespec.export import constants as C
    from edgespec.export.lowering import ProgramMeta, export_forward, export_with_next_token, lower_to_executorch
    from edgespec.kernels import library
    from edgespec.models.llama import LlamaArgs
    from edgespec.quant import plan_quantization, quantize_
    from tiny_models import random_transformer

    library.load()
    args = LlamaArgs(dim=128, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=96, vocab_size=4099, max_seq_len=64)
    model = random_transformer(args, std=0.05)
    quantize_(model, plan_quantization(model, QuantConfig(scheme="8da4w", kernel="edgespec", head_bits=8)))
    assert isinstance(model.output, BlockLinear) and model.output.format == "S8H"
    plain = lower_to_executorch({C.FORWARD: export_forward(model, 64, "exact", glue=True)}, ProgramMeta(64, 4099, 2, 1, (2,)), xnnpack="none").program
    model.output.add_screen_()
    both = lower_to_executorch(export_with_next_token(model, 64, "exact", glue=True), ProgramMeta(64, 4099, 2, 1, (2,)), xnnpack="none").program
    screen_bytes = model.output.screen.numel()
    assert len(both) - len(plain) < screen_bytes + model.output.packed.numel() // 4  # the head's blocks are not stored twice
    program = Runtime.get().load_program(both)
    forward, next_token = program.load_method(C.FORWARD), program.load_method(C.NEXT_TOKEN)
    prompt = torch.randint(0, 4099, (1, 9), generator=torch.Generator().manual_seed(0))
    tok = int(next_token.execute([prompt, torch.tensor([0])])[0][0])
    model.reset_cache()
    with torch.no_grad():
        assert tok == int(model(prompt, torch.tensor([0])).argmax())
    pos = prompt.shape[1]
    for i in range(6):  # alternate: the cache one method wrote is the other's
        method = forward if i % 2 else next_token
        out = method.execute([torch.tensor([[tok]]), torch.tensor([pos])])[0]
        with torch.no_grad():
            ref = int(model(torch.tensor([[tok]]), torch.tensor([pos])).argmax())
        tok = int(out.argmax()) if i % 2 else int(out[0])
        assert tok == ref, i
        pos += 1
