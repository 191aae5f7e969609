"""The harness's fp32 reference answers decoded one prompt at a time (`generate`, as before
2026-12-07) and in batches (`harness.reference.greedy_completions`, continuous batching of
`REFERENCE_BATCH` sequences): wall seconds of each and how many answers are identical, on the
default validation's prompts (its suites, prompts per suite and seed; chat template; each
suite's answer budget). Prints JSON.

    python bench/reference_batching.py > docs/results/reference_batching.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from edgespec.config import ValidateConfig
from edgespec.harness.reference import REFERENCE_BATCH, greedy_completions, load_reference
from edgespec.harness.suites import load_suite
from edgespec.models.load import read_source, tokenizer_of
from edgespec.models.tokenizer import encode_prompt
from edgespec.runtime.generate import eager_step, generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="smollm2-135m-instruct")
    ap.add_argument("--max-seq-len", type=int, default=1024)
    args = ap.parse_args()
    cfg = ValidateConfig()
    examples = [ex for name in cfg.suites for ex in load_suite(name, cfg.prompts_per_suite, cfg.seed)]
    tok = tokenizer_of(read_source(args.source, args.max_seq_len))
    prompts = [encode_prompt(tok, ex.prompt, True) for ex in examples]
    budgets = [ex.max_new_tokens for ex in examples]
    model = load_reference(args.source, args.max_seq_len)
    eos = tuple(tok.eos_ids)  # what the program stops at (its metadata holds the same ids)
    step = eager_step(model)
    t0 = time.perf_counter()
    with torch.no_grad():
        alone = [generate(step, p, max_new_tokens=b, max_seq_len=args.max_seq_len, eos_ids=eos).completion_ids for p, b in zip(prompts, budgets)]
    t_alone = time.perf_counter() - t0
    t0 = time.perf_counter()
    batched = greedy_completions(model, prompts, budgets, args.max_seq_len, eos)
    t_batched = time.perf_counter() - t0
    differ = [ex.id for ex, a, b in zip(examples, alone, batched) if a != b]
    print(
        json.dumps(
            {
                "source": args.source,
                "suites": list(cfg.suites),
                "prompts": len(prompts),
                "eos_ids": list(eos),
                "generated_tokens": sum(len(a) for a in alone),
                "batch": REFERENCE_BATCH,
                "one_at_a_time_s": round(t_alone, 1),
                "batched_s": round(t_batched, 1),
                "speedup": round(t_alone / t_batched, 2),
                "identical": len(prompts) - len(differ),
                "differ": differ,
                "torch_threads": torch.get_num_threads(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
