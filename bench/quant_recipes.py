"""Quantization recipes side by side, and llama.cpp on the same GGUF and the same text.

For each bundle (same model, different `quant` sections), in one run:
- size of model.pte; peak RSS of a fresh process decoding with it;
- fidelity against the fp32 source model on held-out text (edgespec.harness.fidelity: the
  validation harness's own measurement): top-1 agreement, perplexity ratio, mean/p99 KL;
- autoregressive decode tokens/s at 1 and 2 threads: every program loaded in one process
  per thread count and measured with edgespec.runtime.speed (warm-up, interleaved runs,
  per-prompt medians), so the ratios to the first bundle are side by side;
- the suites' mean score and the fp32 model's, from the bundle's validation (if it has one).

With --llama-cpp DIR (a folder holding llama.cpp's `llama-perplexity` and `llama-bench`,
built by you; nothing of it is in this repository), llama.cpp runs the model's own GGUF on
the same held-out chunks (perplexity and KL against an F32 GGUF of the same weights, written
here from the source) and `llama-bench` tg (as many new tokens as the programs decode) at 1
and 2 threads, each right after edgespec's programs at that thread count: every row gets its
speed ratio to llama.cpp's measured in the same minutes.

    python bench/quant_recipes.py bundles/default bundles/requant bundles/8da8w bundles/fp32 \\
        --llama-cpp /work/scratch/llamacpp/bin > docs/results/quant_recipes.json
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def speed_worker(bundles: list[str], threads: int, prompts: int, max_new_tokens: int, runs: int) -> dict:
    """AR decode tokens/s of every bundle, side by side in this process at `threads`."""
    from edgespec.corpus.prompts import mixed_prompts
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.generate import generate
    from edgespec.runtime.runner import set_threads
    from edgespec.runtime.session import open_bundle
    from edgespec.runtime.speed import measure, row_stats, summarize

    set_threads(threads)
    opened = [open_bundle(b) for b in bundles]
    tok = opened[0][1]
    ids = [encode_prompt(tok, p.text, True) for p in mixed_prompts("heldout", prompts, ("reasoning", "code", "math"))]
    names = ["ar", *[f"b{i}" for i in range(1, len(bundles))]]  # "ar": the first bundle, the one the others are compared with
    decoders = {n: functools.partial(generate, r.forward) for n, (_, _, r) in zip(names, opened)}
    measured = measure(decoders, ids, max_new_tokens=max_new_tokens, max_seq_len=opened[0][2].max_seq_len, eos_ids=(), warmup=1, runs=runs)
    s = summarize([row_stats(res, len(p)) for p, res in zip(ids, measured)])
    out = {}
    for n, b in zip(names, bundles):
        d = s[n]
        out[b] = {"decode_tokens_per_s": d["tokens_per_s"], "ratio_to_first": 1.0 if n == "ar" else d["speedup"]}
    return out


def speed(bundles: list[str], threads: int, prompts: int, max_new_tokens: int, runs: int) -> dict:
    payload = json.dumps([bundles, threads, prompts, max_new_tokens, runs])
    out = subprocess.run([sys.executable, __file__, "--speed-worker", payload], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"speed worker failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_f32_gguf(src: Path, dst: Path) -> None:
    """A copy of a GGUF file with every tensor dequantized to F32 (llama.cpp's KL base)."""
    import gguf
    import numpy as np

    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name.startswith("general.file_type"):
            continue
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(name, f.contents())
        else:
            w.add_key_value(name, f.contents(), vtype)
    for t in r.tensors:
        x = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        w.add_tensor(t.name, x.reshape(tuple(int(s) for s in reversed(t.shape))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_bench(bin_dir: Path, gguf_path: Path, threads: int, new_tokens: int) -> float | None:
    """llama.cpp's `llama-bench` decode tokens/s (tg) on the GGUF: the mean of 5 runs."""
    from edgespec.host import foreign_environ

    p = subprocess.run(
        [str(bin_dir / "llama-bench"), "-m", str(gguf_path), "-p", "0", "-n", str(new_tokens), "-t", str(threads), "-r", "5", "-o", "json"],
        capture_output=True,
        text=True,
        env=foreign_environ(),  # llama.cpp's OpenMP workers spin as it intends (not edgespec's passive policy)
    )
    rows = json.loads(p.stdout) if p.returncode == 0 else []
    return round(rows[0]["avg_ts"], 2) if rows else None


def llama_cpp(bin_dir: Path, gguf_path: Path, text: str, chunks: int, ctx: int) -> dict:
    """llama.cpp on the same held-out text: perplexity of the GGUF, KL against its F32 copy."""
    from edgespec.host import foreign_environ

    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "text.txt").write_text(text)
        write_f32_gguf(gguf_path, d / "f32.gguf")
        common = ["-f", str(d / "text.txt"), "-c", str(ctx), "--chunks", str(chunks), "-b", str(ctx), "-t", "2"]

        def run(model: Path, *extra: str) -> str:
            p = subprocess.run([str(bin_dir / "llama-perplexity"), "-m", str(model), *common, *extra], capture_output=True, text=True, env=foreign_environ())
            if p.returncode:
                raise SystemExit(f"llama-perplexity failed: {p.stderr[-1500:]}")
            return p.stdout + p.stderr

        base = run(d / "f32.gguf", "--kl-divergence-base", str(d / "base.kld"))
        q = run(gguf_path, "--kl-divergence-base", str(d / "base.kld"), "--kl-divergence")

        def num(pattern: str, s: str) -> float | None:
            m = re.search(pattern, s)
            return float(m.group(1)) if m else None

        ppl_f32 = num(r"Final estimate: PPL = ([\d.]+)", base)
        ppl_q = num(r"Mean PPL\(Q\)\s*:\s*([\d.]+)", q) or num(r"Final estimate: PPL = ([\d.]+)", q)
        out = {
            "gguf": gguf_path.name,
            "perplexity_f32": ppl_f32,
            "perplexity": ppl_q,
            "perplexity_ratio": round(ppl_q / ppl_f32, 5) if ppl_q and ppl_f32 else None,
            "kl_mean": num(r"Mean\s+KLD:\s*([\d.]+)", q),
            "kl_p99": num(r"99\.0%\s+KLD:\s*([\d.]+)", q),
            "top1_agreement": (num(r"Same top p:\s*([\d.]+)", q) or 0) / 100 or None,
        }
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundles", nargs="+", help="bundles of one model; speed ratios are to the first")
    ap.add_argument("--chunks", type=int, default=8, help="held-out chunks of 512 tokens (256 scored each)")
    ap.add_argument("--prompts", type=int, default=8, help="held-out prompts for decode speed")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--llama-cpp", type=Path, help="folder with llama.cpp's llama-perplexity and llama-bench")
    args = ap.parse_args()

    from edgespec.harness.fidelity import CHUNK, heldout_chunks, heldout_text, measure_fidelity
    from edgespec.harness.process_measure import peak_rss_fresh
    from edgespec.harness.reference import load_reference
    from edgespec.models.load import embedded_path, is_embedded
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.session import open_bundle

    src = open_bundle(args.bundles[0])[0].recipe.model.source
    gguf_path = embedded_path(src) if is_embedded(src) else Path(src)
    # per thread count: edgespec's programs, then llama-bench on the GGUF right after (the same
    # minutes of the machine), as many new tokens
    speeds, llama_tg = {}, {}
    for t in (1, 2):
        speeds[t] = speed(args.bundles, t, args.prompts, args.max_new_tokens, args.runs)
        if args.llama_cpp:
            llama_tg[t] = llama_bench(args.llama_cpp, gguf_path, t, args.max_new_tokens)
    rows = []
    reference = functools.cache(load_reference)  # one fp32 model per (source, context) for every bundle
    for b in args.bundles:
        manifest, tokenizer, runner = open_bundle(b)
        fid = measure_fidelity(runner.forward, reference(manifest.recipe.model.source, runner.max_seq_len), tokenizer, args.chunks)
        v = manifest.validation
        row = {
            "bundle": b,
            "precision": manifest.precision,
            "quant": manifest.recipe.quant.to_dict(),
            "quantization": manifest.quantization and manifest.quantization.to_dict(),
            "pte_mb": round(runner.path.stat().st_size / 1e6, 2),
            "peak_rss_mb": peak_rss_fresh(b, "ar", [encode_prompt(tokenizer, "Name three colours.", True)], 32),
            **{f"decode_tokens_per_s_{t}t": speeds[t][b]["decode_tokens_per_s"] for t in (1, 2)},
            **{f"speed_ratio_to_first_{t}t": speeds[t][b]["ratio_to_first"] for t in (1, 2)},
            "fidelity": fid.to_dict(),
            "suites_score": v and v.score,
            "suites_reference_score": v and v.reference_score,
        }
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
        del runner
    report = {"chunks": args.chunks, "chunk_tokens": CHUNK, "rows": rows}
    if args.llama_cpp:
        tokens = sum(len(c) for c in heldout_chunks(tokenizer, args.chunks, CHUNK))
        report["llama_cpp"] = {
            **llama_cpp(args.llama_cpp, gguf_path, heldout_text(tokenizer), args.chunks, CHUNK),
            **{f"decode_tokens_per_s_{t}t": tg for t, tg in llama_tg.items()},
            "bench_new_tokens": args.max_new_tokens,
            "edgespec_tokens_in_chunks": tokens,
        }
        for row in rows:  # each program's decode speed over llama.cpp's, measured in the same minutes
            for t, tg in llama_tg.items():
                row[f"ratio_to_llama_cpp_{t}t"] = round(row[f"decode_tokens_per_s_{t}t"] / tg, 3) if tg else None
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--speed-worker":
        print(json.dumps(speed_worker(*json.loads(sys.argv[2]))))
    else:
        main()
