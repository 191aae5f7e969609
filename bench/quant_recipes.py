"""Quantization recipes side by side: size, accuracy vs fp32, speed (autoregressive and speculative).

For each bundle (same model, different `quant` sections):
- size of model.pte;
- perplexity on held-out text: the held-out suites' prompts with their reference answers
  (chat format), teacher-forced through the program's `forward` one token per call (the
  decode path), over the reference answer tokens;
- greedy agreement with fp32: on the same teacher-forced positions, the share of positions
  where the program's argmax equals the fp32 program's argmax (the first bundle must be fp32);
- decode tokens/s, autoregressive and (when the program has it) speculative, medians over
  held-out prompts, measured side by side in this process.

    python bench/quant_recipes.py bundles/spec-fp32 bundles/spec-8da4w bundles/spec-int8wo > docs/results/quant_recipes.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))


def texts(n: int) -> list[tuple[str, str]]:
    from edgespec.corpus.prompts import mixed_prompts

    return [(p.text, p.reference) for p in mixed_prompts("heldout", n, ("reasoning", "code", "math")) if p.reference]


def teacher_forced(runner, tokenizer, pairs) -> tuple[list[float], list[int]]:
    """NLL and argmax at every reference-answer position."""
    nll, top = [], []
    for prompt, ref in pairs:
        ctx = tokenizer.encode(tokenizer.apply_chat_template(prompt))
        ans = tokenizer.encode(ref)[:64]
        logits = runner.forward(torch.tensor([ctx]), 0)
        pos = len(ctx)
        for t in ans:
            lp = torch.log_softmax(logits.double(), -1)
            nll.append(-float(lp[t]))
            top.append(int(logits.argmax()))
            logits = runner.forward(torch.tensor([[t]]), pos)
            pos += 1
    return nll, top


def speed(runner, tokenizer, prompts, max_new_tokens: int) -> dict:
    from edgespec.runtime.generate import generate

    kw = dict(max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=())
    ids = [tokenizer.encode(tokenizer.apply_chat_template(p)) for p, _ in prompts]
    generate(runner.forward, ids[0], **kw)  # warm-up
    ar, sp, acc = [], [], []
    for x in ids:
        ar.append(generate(runner.forward, x, **kw).decode_tokens_per_s)
        if runner.has_spec:
            r = generate(runner.forward, x, **kw, spec=runner)
            sp.append(r.decode_tokens_per_s)
            acc.append(r.mean_tokens_per_call)
    out = {"ar_decode_tokens_per_s": round(statistics.median(ar), 2)}
    if sp:
        out |= {"spec_decode_tokens_per_s": round(statistics.median(sp), 2), "spec_tokens_per_call": round(statistics.mean(acc), 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundles", nargs="+", help="bundles; the first must be fp32 (the agreement reference)")
    ap.add_argument("--texts", type=int, default=24)
    ap.add_argument("--speed-prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    from edgespec.runtime.session import open_bundle as _load_bundle

    pairs = texts(args.texts)
    report, ref_top = [], None
    for b in args.bundles:
        manifest, tokenizer, runner = _load_bundle(b)
        nll, top = teacher_forced(runner, tokenizer, pairs)
        if ref_top is None:
            if manifest["precision"] != "fp32":
                raise SystemExit("the first bundle must be fp32")
            ref_top = top
        row = {
            "bundle": b,
            "precision": manifest["precision"],
            "embedding_bits": manifest["recipe"]["quant"]["embedding_bits"],
            "group_size": manifest["recipe"]["quant"]["group_size"],
            "pte_mb": round(runner.path.stat().st_size / 1e6, 2),
            "speculative": runner.has_spec,
            "heldout_tokens": len(nll),
            "perplexity": round(math.exp(statistics.mean(nll)), 4),
            "greedy_agreement_with_fp32": round(sum(a == b for a, b in zip(top, ref_top)) / len(top), 4),
            **speed(runner, tokenizer, pairs[: args.speed_prompts], args.max_new_tokens),
        }
        print(json.dumps(row), file=sys.stderr)
        report.append(row)
    print(json.dumps({"texts": len(pairs), "rows": report}, indent=1))


if __name__ == "__main__":
    main()
