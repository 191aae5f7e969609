"""Are R rows in one `forward` call the bits of R one-row calls, on a real program?

For a bundle's program: prefill held-out prompts, then at many positions and for R = 2..8
compare the last row's logits of one R-row call with those of R one-row calls over the same
tokens, and the logits of the next one-row call after each (it reads the cache rows the two
wrote). `export.step_attention: exact` programs must be equal everywhere; `custom_sdpa`
programs are not (its GEMM and softmax reduce in an order that depends on R).

    python bench/exact_rows.py bundles/spec --positions 24 > docs/results/exact_rows_8da4w.json

Prints one JSON object: per R, how many positions matched bitwise and the largest |difference|.
"""

from __future__ import annotations

import argparse
import json

import edgespec  # noqa: F401  (before torch: its OpenMP workers sleep instead of spinning, edgespec.host.passive_openmp)

# isort: split
import torch

from edgespec.corpus.prompts import mixed_prompts
from edgespec.models.tokenizer import encode_prompt
from edgespec.runtime.session import open_bundle


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--positions", type=int, default=24, help="prompts (one position each, after its prompt)")
    args = ap.parse_args()
    manifest, tokenizer, runner = open_bundle(args.bundle)
    result = {"bundle": args.bundle, "step_attention": manifest.recipe.export.step_attention, "by_rows": {}}
    g = torch.Generator().manual_seed(0)
    stats = {R: {"equal": 0, "next_equal": 0, "positions": 0, "max_abs_diff": 0.0} for R in range(2, 9)}
    for p in mixed_prompts("heldout", args.positions):
        ids = encode_prompt(tokenizer, p.text, True)
        P = len(ids)
        runner.forward(torch.tensor([ids]), 0)
        for R, s in stats.items():
            rows = torch.randint(0, runner.vocab_size, (1, R), generator=g)
            block = runner.forward(rows, P)
            after_block = runner.forward(rows[:, :1], P + R)
            for i in range(R):
                one = runner.forward(rows[:, i : i + 1], P + i)
            after_one = runner.forward(rows[:, :1], P + R)
            s["positions"] += 1
            s["equal"] += int(torch.equal(block, one))
            s["next_equal"] += int(torch.equal(after_block, after_one))
            s["max_abs_diff"] = max(s["max_abs_diff"], float((block - one).abs().max()), float((after_block - after_one).abs().max()))
    result["by_rows"] = {str(R): s for R, s in stats.items()}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
