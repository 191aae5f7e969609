"""edgespec's autoregressive decode vs ExecuTorch's stock path, side by side in one run.

Contenders (each round runs all of them, each in a fresh process, in turn):
  edgespec      edgespec's Python runtime on edgespec's program
  stock         ExecuTorch's TextLLMRunner on a program made by ExecuTorch's own export_llm
                (model class smollm2, KV cache + custom SDPA op), same weights and quantization
  stock@ours    ExecuTorch's TextLLMRunner on edgespec's program (isolates runtime vs program)

Prints one JSON object: per-contender medians over rounds (decode and prefill tokens/s,
peak RSS of the decoding process), the .pte sizes and the ratios edgespec / stock.

    python bench/ar_vs_stock.py --scheme 8da4w --workdir /tmp/es-bench --rounds 5

Building the stock program takes 10-20 minutes (ExecuTorch's export_llm); it is cached in
--workdir, as is edgespec's bundle.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."
NEW_TOKENS = 128
MAX_SEQ_LEN = 1024


def _peak_rss_mb() -> float:
    from edgespec.runtime.bench import peak_rss_mb

    return peak_rss_mb()


def worker_edgespec(pte: str, tokenizer: str, warmup: int) -> dict:
    from edgespec.models.tokenizer import Tokenizer
    from edgespec.runtime.generate import generate
    from edgespec.runtime.runner import ProgramRunner

    runner = ProgramRunner(pte)
    tok = Tokenizer.from_file(tokenizer)
    ids = tok.encode(_chat(PROMPT))
    for i in range(warmup + 1):
        res = generate(runner.forward, ids, max_new_tokens=NEW_TOKENS, max_seq_len=runner.max_seq_len, eos_ids=())
    return {
        "decode_tokens_per_s": res.decode_tokens_per_s,
        "prefill_tokens_per_s": res.prefill_tokens_per_s,
        "generated_tokens": len(res.completion_ids),
        "prompt_tokens": len(ids),
        "peak_rss_mb": _peak_rss_mb(),
    }


def worker_stock(pte: str, tokenizer: str, warmup: int) -> dict:
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers llama::custom_sdpa)
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    runner = TextLLMRunner(pte, tokenizer)
    stats = []
    for i in range(warmup + 1):
        runner.reset()
        cfg = GenerationConfig(echo=False, max_new_tokens=NEW_TOKENS, temperature=0.0)
        runner.generate(_chat(PROMPT), cfg, stats_callback=lambda s: stats.append(json.loads(s.to_json_string())))
    s = stats[-1]
    return {
        "decode_tokens_per_s": s["decode_token_per_sec"],
        "prefill_tokens_per_s": s["prefill_token_per_sec"],
        "generated_tokens": s["generated_tokens"],
        "prompt_tokens": s["prompt_tokens"],
        "peak_rss_mb": _peak_rss_mb(),
    }


def _chat(text: str) -> str:
    return (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    )


def build_ours(workdir: Path, scheme: str) -> Path:
    bundle = workdir / f"edgespec-{scheme}"
    if not (bundle / "model.pte").is_file():
        from edgespec import tasks
        from edgespec.config import Recipe

        recipe = Recipe().replace(quant={"scheme": scheme}, model={"max_seq_len": MAX_SEQ_LEN})
        tasks.export_recipe(recipe, bundle, on_stage=lambda s: print(f"[edgespec export] {s}", file=sys.stderr))
    return bundle


def build_stock(workdir: Path, scheme: str) -> Path:
    """ExecuTorch's export_llm on the same weights (Meta checkpoint layout, from the GGUF)."""
    out = workdir / f"stock-{scheme}.pte"
    if out.is_file():
        return out
    import torch

    from edgespec.models.load import read_source

    src = read_source("smollm2-135m-instruct", MAX_SEQ_LEN)
    a = src.args
    ckpt, params = workdir / "smollm2_meta.pth", workdir / "smollm2_params.json"
    torch.save({k: v.contiguous() for k, v in src.state_dict.items()}, ckpt)
    params.write_text(
        json.dumps(
            {
                "dim": a.dim,
                "n_layers": a.n_layers,
                "n_heads": a.n_heads,
                "n_kv_heads": a.n_kv_heads,
                "vocab_size": a.vocab_size,
                "hidden_dim": a.hidden_dim,
                "norm_eps": a.norm_eps,
                "rope_theta": a.rope_theta,
                "use_scaled_rope": False,
                "use_hf_rope": False,
            }
        )
    )
    cmd = [
        sys.executable,
        "-m",
        "executorch.extension.llm.export.export_llm",
        "base.model_class=smollm2",
        f"base.checkpoint={ckpt}",
        f"base.params={params}",
        f"base.metadata='{json.dumps({'get_bos_id': src.bos_id, 'get_eos_ids': list(src.eos_ids)})}'",
        "model.use_kv_cache=True",
        "model.use_sdpa_with_kv_cache=True",
        "model.enable_dynamic_shape=True",
        f"export.max_seq_length={MAX_SEQ_LEN}",
        f"export.max_context_length={MAX_SEQ_LEN}",
        "backend.xnnpack.enabled=True",
        "backend.xnnpack.extended_ops=True",
        f"export.output_dir={workdir}",
        f"export.output_name={out.name}",
    ]
    if scheme == "8da4w":
        cmd += ["quantization.qmode=8da4w", "quantization.group_size=32"]
    print("[stock export] " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=workdir)
    return out


def run_worker(kind: str, pte: Path, tokenizer: Path, warmup: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--pte", str(pte), "--tokenizer", str(tokenizer), "--warmup", str(warmup)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scheme", choices=["fp32", "8da4w"], default="8da4w")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/edgespec-bench"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--worker", choices=["edgespec", "stock"])
    ap.add_argument("--pte")
    ap.add_argument("--tokenizer")
    args = ap.parse_args()

    if args.worker:
        fn = worker_edgespec if args.worker == "edgespec" else worker_stock
        print(json.dumps(fn(args.pte, args.tokenizer, args.warmup)))
        return

    args.workdir.mkdir(parents=True, exist_ok=True)
    ours = build_ours(args.workdir, args.scheme)
    stock = build_stock(args.workdir, args.scheme)
    tok = ours / "tokenizer.json"
    contenders = {"edgespec": ("edgespec", ours / "model.pte"), "stock": ("stock", stock), "stock@ours": ("stock", ours / "model.pte")}
    rows: dict[str, list[dict]] = {k: [] for k in contenders}
    for r in range(args.rounds):
        for name, (kind, pte) in contenders.items():
            rows[name].append(run_worker(kind, pte, tok, args.warmup))
            print(f"[round {r + 1}/{args.rounds}] {name}: {rows[name][-1]['decode_tokens_per_s']:.1f} tok/s", file=sys.stderr)

    def med(name: str, key: str) -> float:
        return round(statistics.median(x[key] for x in rows[name]), 2)

    summary = {
        name: {k: med(name, k) for k in ("decode_tokens_per_s", "prefill_tokens_per_s", "peak_rss_mb", "generated_tokens", "prompt_tokens")}
        for name in contenders
    }
    sizes = {"edgespec_pte_mb": round((ours / "model.pte").stat().st_size / 1e6, 2), "stock_pte_mb": round(stock.stat().st_size / 1e6, 2)}
    ratios = {
        "decode_edgespec_over_stock": round(summary["edgespec"]["decode_tokens_per_s"] / summary["stock"]["decode_tokens_per_s"], 3),
        "peak_rss_edgespec_over_stock": round(summary["edgespec"]["peak_rss_mb"] / summary["stock"]["peak_rss_mb"], 3),
        "pte_size_edgespec_over_stock": round(sizes["edgespec_pte_mb"] / sizes["stock_pte_mb"], 3),
    }
    print(
        json.dumps(
            {
                "scheme": args.scheme,
                "rounds": args.rounds,
                "warmup": args.warmup,
                "new_tokens": NEW_TOKENS,
                "threads": os.cpu_count(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "medians": summary,
                "sizes": sizes,
                "ratios": ratios,
                "raw": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
