"""What an exact greedy argmax over a big Q8_0 lm head could skip: a screen from the top bits of
each code, with a proven bound on the dropped bits, and the rows left to re-score exactly.

A Q8_0 head row v computes, per block b of 32 inputs, d_a,b * d_v,b * (q_a,b . q_v,b) with the
activation's int8 codes q_a (the block kernel's `quantize_rows`). Split each code as
q_v = 2^k h + l with l in [0, 2^k - 1]: the screen S_v uses h and the midpoint of l, and the
dropped part is bounded by |d_a,b d_v,b| (2^k - 1) / 2 * |q_a,b|_1 per block (B_v). Every row
with S_v + B_v >= max_u (S_u - B_u) may be the argmax: those are re-scored from the exact
blocks; no other row can win. Worst-case bounds, so the argmax found is the full head's
(a program would add a margin for its float epilogue's rounding).

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="gemma-3-270m", help="a model.source whose lm head is Q8_0 blocks")
    ap.add_argument("--tokens", type=int, default=50, help="hidden states screened")
    ap.add_argument("--bits", type=int, nargs="+", default=[4, 5, 6], help="bits of each code the screen keeps")
    ap.add_argument("--bundle", type=Path, help="also split this bundle's one-token forward by ETDump (the head's share)")
    a = ap.parse_args()
    h, head = final_hidden(a.source, a.tokens)
    out = {"source": a.source, "tokens": len(h), "screens": screen_counts(h, head, a.bits)}
    if a.bundle:
        out["program"] = {str(t): head_share(a.bundle, t) for t in (1, 2)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
