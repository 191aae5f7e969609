"""N-gram blocking cost per decoding step: incremental (edgespec.runtime.ngram.banned_tokens)
vs the dictionary algorithm (banned_naive), at context lengths 128 / 512 / 2048.

Contexts are real text in SmolLM2 tokens (reasoning-gym word problems, repeated to length, so
n-gram matches occur). Both run in this process, interleaved, several rounds; medians.

    python bench/ngram_blocking.py > docs/results/ngram_blocking.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from edgespec.runtime.ngram import banned_naive, banned_tokens


def context_tokens(length: int) -> list[int]:
    import reasoning_gym

    from edgespec.models.load import read_source, tokenizer_of

    tk = tokenizer_of(read_source("smollm2-135m-instruct", 4096))
    text = " ".join(x["question"] for x in reasoning_gym.create_dataset("gsm_symbolic", size=40, seed=1))
    ids = tk.encode(text)
    return (ids * (length // len(ids) + 1))[:length]


def per_step_us(fn, ctx, n: int, steps: int) -> float:
    t = time.perf_counter()
    for _ in range(steps):
        fn(ctx, n)
    return 1e6 * (time.perf_counter() - t) / steps


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # no flags; --help prints the docstring
    torch.set_num_threads(1)
    base = context_tokens(2048)
    out = {"n": 3, "rounds": 7, "lengths": {}}
    for L in (128, 512, 2048):
        ids = base[:L]
        tensor = torch.tensor(ids, dtype=torch.long)
        assert set(banned_tokens(tensor, 3).tolist()) == banned_naive(ids, 3)
        steps = max(20, 20000 // L)
        inc, naive = [], []
        for _ in range(7):
            inc.append(per_step_us(banned_tokens, tensor, 3, steps))
            naive.append(per_step_us(banned_naive, ids, 3, steps))
        out["lengths"][L] = {
            "incremental_us_per_step": round(statistics.median(inc), 2),
            "dictionary_us_per_step": round(statistics.median(naive), 2),
            "speedup": round(statistics.median(n / i for n, i in zip(naive, inc)), 2),
        }
        print(L, out["lengths"][L], file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
