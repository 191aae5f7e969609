"""What an exact greedy argmax over a big Q8_0 lm head could skip: a screen from the top bits of
each code, with a proven bound on the dropped bits, and the rows left to re-score exactly.

A Q8_0 head row v computes, per block b of 32 inputs, d_a,b * d_v,b * (q_a,b . q_v,b) with the
activation's int8 codes q_a (the block kernel's `quantize_rows`). Split each code as
q_v = 2^k h + l with l in [0, 2^k - 1]: the screen S_v uses h and the midpoint of l, and the
dropped part is bounded by |d_a,b d_v,b| (2^k - 1) / 2 * |q_a,b|_1 per block (B_v). Every row
with S_v + B_v >= max_u (S_u - B_u) may be the argmax: those are re-scored from the exact
blocks; no other row can win. Worst-case bounds, so the argmax found is the full head's
(a program would add a margin for its float epilogue's rounding).

With --program BUNDLE (exported with quant.head_screen, so its program has `next_token`): the
screened head as built, beside the full one, on held-out prose: `edgespec bench --mode both`
(greedy decoding through `next_token` as "ar" and through forward's logits as "ar-logits",
interleaved runs, identical tokens checked) at each thread count in a fresh process, and the
outputs `edgespec::block_argmax` re-scored exactly per generated token.

    python bench/head_screen.py --program /tmp/gemma/screen > docs/results/head_screen_program_gemma3.json

With --kernel: the screen's pass against the Q8_0 head's on one thread, a head that stays in
cache (the arithmetic) and one of Gemma's size (memory).

    python bench/head_screen.py --kernel > docs/results/head_screen_kernel.json

For each of --tokens final hidden states of the model on held-out prose (every 4th of the
first 4 * tokens positions): how many rows the screen leaves, per number of bits kept (the
screen reads those bits and the scales; the re-scoring reads whole rows). With --bundle, the
program's one-token forward is also split by ETDump: the head's block-linear call against the
whole token, at 1 and 2 threads.

    python bench/head_screen.py --source gemma-3-270m --bundle /tmp/gemma/recipe_bundle > docs/results/head_screen_gemma3.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import edgespec  # noqa: F401  (before torch: its OpenMP workers sleep, edgespec.host.passive_openmp)

# isort: split
import torch

BLOCK = 32


@torch.no_grad()
def final_hidden(source: str, tokens: int) -> tuple[torch.Tensor, object]:
    """The final norm's outputs [tokens, d] on held-out prose, and the head's blocks."""
    from edgespec.corpus.varied_text import varied_lines
    from edgespec.models.load import build_model, read_source, tokenizer_of

    src = read_source(source, 1024)
    head = src.blocks.get("output.weight") or src.blocks.get("tok_embeddings.weight")
    if head is None or head.format != "Q8_0":
        sys.exit(f"head_screen: {source}'s lm head is not Q8_0 blocks")
    model = build_model(src).eval()
    ids = torch.tensor([tokenizer_of(src).encode(" ".join(varied_lines(20)["prose"]))[: 4 * tokens]])
    seen = {}
    hook = model.norm.register_forward_hook(lambda m, a, o: seen.__setitem__("h", o))
    model(ids, torch.tensor([0]))
    hook.remove()
    return seen["h"][0, ::4], head


def screen_counts(h: torch.Tensor, head, kept_bits: list[int]) -> dict:
    from edgespec.kernels.block_linear import quantize_activations

    qa, da, _ = quantize_activations(h)  # [T, G, 32], [T, G]
    qa, da = qa.double(), da.double()
    V, n = head.codes.shape
    codes = head.codes.double().view(V, n // BLOCK, BLOCK)
    d = head.scales.double()  # [V, G]
    out = {}
    for bits in kept_bits:
        step = 2 ** (8 - bits)
        hi = torch.div(codes, step, rounding_mode="floor")  # code = step * hi + lo, lo in [0, step - 1]
        half = (step - 1) / 2
        counts = []
        for t in range(len(h)):
            w = d * da[t][None, :]  # [V, G]
            exact = (w * torch.einsum("vbk,bk->vb", codes, qa[t])).sum(-1)
            screen = (w * (step * torch.einsum("vbk,bk->vb", hi, qa[t]) + half * qa[t].sum(-1))).sum(-1)
            bound = (w.abs() * half * qa[t].abs().sum(-1)).sum(-1)
            maybe = screen + bound >= (screen - bound).max()
            if not maybe[exact.argmax()]:
                raise RuntimeError(f"the {bits}-bit screen's bound missed the argmax of hidden state {t}")
            counts.append(int(maybe.sum()))
        counts.sort()
        row_bytes = n + 2 * (n // BLOCK)  # a Q8_0 row: codes and fp16 scales
        screen_bytes = V * (n * bits // 8 + 2 * (n // BLOCK))
        med = counts[len(counts) // 2]
        out[str(bits)] = {
            "rows_left_median": med,
            "rows_left_p90": counts[int(0.9 * (len(counts) - 1))],
            "rows_left_max": counts[-1],
            "rows": V,
            "screen_mb": round(screen_bytes / 1e6, 1),
            "rescore_mb_median": round(med * row_bytes / 1e6, 2),
            "full_head_mb": round(V * row_bytes / 1e6, 1),
        }
    return out


def head_share(bundle: Path, threads: int) -> dict:
    """ETDump of one-token forwards at position 200, in a fresh process: the largest block-linear
    call (the head) against the whole forward (medians, ms)."""
    code = f"""
import tempfile, json
from pathlib import Path
import edgespec, torch
import executorch.extension.pybindings.portable_lib as pl
from executorch.devtools import Inspector
from edgespec.runtime.runner import ProgramRunner
pl._unsafe_reset_threadpool({threads})
ProgramRunner(Path({str(bundle / "model.pte")!r}))
torch.set_num_threads(1)
m = pl._load_for_executorch({str(bundle / "model.pte")!r}, enable_etdump=True)
m.run_method("forward", (torch.zeros((1, 200), dtype=torch.long), torch.tensor([0])))
for _ in range(30):
    m.run_method("forward", (torch.zeros((1, 1), dtype=torch.long), torch.tensor([200])))
with tempfile.TemporaryDirectory() as d:
    p = Path(d) / "r.etdp"
    m.write_etdump_result_to_file(str(p))
    ev = [e for e in [b for b in Inspector(etdump_path=str(p)).event_blocks if b.name == "Execute"][-1].events if e.perf_data is not None]
    total = sum(e.perf_data.p50 for e in ev if e.name == "Method::execute")
    head = max(e.perf_data.p50 for e in ev if "block_linear" in e.name)
    print(json.dumps({{"forward_ms": round(total, 3), "head_ms": round(head, 3), "head_share": round(head / total, 3)}}))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def prose_prompts(count: int) -> list[str]:
    from edgespec.corpus.varied_text import varied_lines

    return varied_lines(count)["prose"][:count]


def decode_side_by_side(bundle: Path, threads: int, prompts: list[str], new_tokens: int, runs: int) -> dict:
    """`edgespec bench --mode both` in a fresh process: next_token ("ar") beside forward's logits ("ar-logits")."""
    cmd = [sys.executable, "-m", "edgespec.cli", "bench", "--bundle", str(bundle), "--mode", "both", "--threads", str(threads), "--json"]
    cmd += ["--runs", str(runs), "--max-new-tokens", str(new_tokens), *(a for p in prompts for a in ("--prompt", p))]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    stats = json.loads(done.stdout)
    keep = ("tokens_per_s", "ms_per_call", "prefill_tokens_per_s")
    return {
        "screened_next_token": {k: stats["ar"][k] for k in keep},
        "full_head_logits": {k: stats["ar-logits"][k] for k in keep},
        "speedup_decode": round(stats["ar"]["tokens_per_s"] / stats["ar-logits"]["tokens_per_s"], 3),
        "identical": f"{stats['lossless']['identical']}/{stats['lossless']['prompts']}",
    }


RESCORED_CHILD = """
import json, sys, ctypes, statistics
import edgespec
import torch
from edgespec.kernels import library
from edgespec.runtime.session import open_bundle
bundle, tokens = sys.argv[1], int(sys.argv[2])
prompts = json.loads(sys.stdin.read())
manifest, tokenizer, runner = open_bundle(bundle)
lib = ctypes.CDLL(str(library.load()))
lib.edgespec_argmax_exact_rows.restype = ctypes.c_int64
counts = []
for p in prompts:
    ids = tokenizer.encode(p)
    tok = runner.next_token(torch.tensor([ids]), 0)
    lib.edgespec_argmax_exact_rows()
    pos = len(ids)
    for _ in range(tokens):
        tok = runner.next_token(torch.tensor([[tok]]), pos)
        counts.append(lib.edgespec_argmax_exact_rows())
        pos += 1
counts.sort()
q = lambda f: counts[int(f * (len(counts) - 1))]
print(json.dumps({"tokens": len(counts), "rows": runner.vocab_size, "median": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": counts[-1]}))
"""


def rescored_rows(bundle: Path, prompts: list[str], tokens: int) -> dict:
    """Outputs re-scored exactly per generated token (16 per pair of tiles holding a candidate)."""
    done = subprocess.run([sys.executable, "-c", RESCORED_CHILD, str(bundle), str(tokens)], input=json.dumps(prompts), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def kernel_speed(rows: int, reps: int) -> dict:
    """One row's pass, single-threaded, over a random head of `rows` x 640: the screen's
    intervals (`edgespec_screen_intervals`, the widest path) against block_linear's Q8_0 pass
    (`edgespec_bench_pass`, its fastest path and prefetch); medians of `reps`, ms (the screen's
    time includes quantizing the row and writing the intervals). Small heads stay in cache
    (the arithmetic), large ones stream from memory."""
    import ctypes
    import statistics
    import time

    import numpy as np

    from edgespec.kernels import library
    from edgespec.kernels.block_linear import BlockCodes, pack_screen

    lib = ctypes.CDLL(str(library.load()))
    i64 = ctypes.c_int64
    lib.edgespec_screen_intervals.restype = i64
    lib.edgespec_bench_new.restype, lib.edgespec_bench_new.argtypes = ctypes.c_void_p, [ctypes.POINTER(i64), i64, i64]
    lib.edgespec_bench_pass.restype, lib.edgespec_bench_pass.argtypes = ctypes.c_double, [ctypes.c_void_p, i64, i64, i64, i64, i64, i64]
    lib.edgespec_bench_free.argtypes = [ctypes.c_void_p]
    path = next(p for p in (3, 2, 1, 5, 4, 0) if lib.edgespec_path_supported(i64(p)))
    k = 640
    g = torch.Generator().manual_seed(0)
    head = BlockCodes(
        "S8H", torch.randint(-128, 128, (rows, k), generator=g, dtype=torch.int8), (torch.rand(rows, k // BLOCK, generator=g) * 0.01).half().float()
    )
    screen = pack_screen(head).numpy()
    x = (torch.randn(k, generator=g) * 3).numpy()
    lo, hi = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    bench = lib.edgespec_bench_new((i64 * 3)(rows, k, 3), 1, 1)
    # the head at its best: every path this CPU runs, prefetching as the plan may choose (16 pair blocks, or none)
    choices = [(q, pf) for q in (3, 2, 1) if lib.edgespec_path_supported(i64(q)) for pf in (16, 0)]
    screen_ms, head_ms = [], {c: [] for c in choices}
    for _ in range(reps):  # alternating
        t0 = time.perf_counter()
        lib.edgespec_screen_intervals(i64(path), ptr(x), i64(k), ptr(screen), i64(rows), ptr(lo), ptr(hi))
        screen_ms.append(1e3 * (time.perf_counter() - t0))
        for q, pf in choices:
            head_ms[(q, pf)].append(lib.edgespec_bench_pass(bench, 1, q, pf, 1 << 40, 0, 1))
    lib.edgespec_bench_free(bench)
    s = statistics.median(screen_ms)
    (hq, hpf), h = min(((c, statistics.median(v)) for c, v in head_ms.items()), key=lambda cv: cv[1])
    return {
        "rows": rows,
        "screen_path": path,
        "screen_mb": round(screen.nbytes / 1e6, 2),
        "screen_ms": round(s, 4),
        "q8_head_ms": round(h, 4),
        "q8_head_choice": {"path": hq, "prefetch": hpf},
        "head_over_screen": round(h / s, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="gemma-3-270m", help="a model.source whose lm head is Q8_0 blocks")
    ap.add_argument("--tokens", type=int, default=50, help="hidden states screened")
    ap.add_argument("--bits", type=int, nargs="+", default=[4, 5, 6], help="bits of each code the screen keeps")
    ap.add_argument("--bundle", type=Path, help="also split this bundle's one-token forward by ETDump (the head's share)")
    ap.add_argument("--program", type=Path, help="a bundle with next_token (quant.head_screen): decode with it beside the full head instead")
    ap.add_argument("--prompts", type=int, default=12, help="--program: held-out prose prompts")
    ap.add_argument("--new-tokens", type=int, default=64, help="--program: tokens per generation")
    ap.add_argument("--runs", type=int, default=3, help="--program: runs per prompt and decoder (the median kept)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="--program: thread counts")
    ap.add_argument("--kernel", action="store_true", help="the screen's pass against the Q8_0 head's, one thread, in cache and from memory")
    a = ap.parse_args()
    if a.kernel:
        from edgespec.host import cpu_name

        print(json.dumps({"cpu": cpu_name(), "passes": [kernel_speed(4096, 301), kernel_speed(262144, 21)]}, indent=1))
        return
    if a.program:
        from edgespec.host import cpu_name

        prompts = prose_prompts(a.prompts)
        out = {"bundle": str(a.program), "cpu": cpu_name(), "prompts": len(prompts), "new_tokens": a.new_tokens}
        out["decode"] = {str(t): decode_side_by_side(a.program, t, prompts, a.new_tokens, a.runs) for t in a.threads}
        out["rescored_outputs_per_token"] = rescored_rows(a.program, prompts, a.new_tokens)
        print(json.dumps(out, indent=1))
        return
    h, head = final_hidden(a.source, a.tokens)
    out = {"source": a.source, "tokens": len(h), "screens": screen_counts(h, head, a.bits)}
    if a.bundle:
        out["program"] = {str(t): head_share(a.bundle, t) for t in (1, 2)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
