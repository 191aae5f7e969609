"""Batch generation on one program: the asynchronous pipeline vs a sequential loop, and
shared-prefix KV reuse on a RAG-style batch. Prints JSON.

1. Throughput: N prompts (held-out math and reasoning prompts, chat template, greedy, fixed budget, EOS
   stops) through `run_batch(pipelined=True)` and `run_batch(pipelined=False)`: same program,
   same outputs, alternating order over rounds; prompts/s, median ratio.
2. Shared prefix: Q questions over one long common context (a reasoning-gym haystack; chat
   template + context form the shared prefix). Each round runs the whole batch with prefix
   reuse (CacheState) and without, alternating; total prefill seconds and ratio, and how many
   completions are identical between the two.

    python bench/batch_pipeline.py --bundle bundles/default > docs/results/batch_pipeline.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from edgespec.models.tokenizer import encode_prompt
from edgespec.runtime.batch import run_batch
from edgespec.runtime.generate import CacheState, generate
from edgespec.runtime.session import open_bundle


def throughput(bundle: str, n: int, max_new_tokens: int, rounds: int) -> dict:
    from edgespec.corpus.prompts import mixed_prompts

    _, tk, runner = open_bundle(bundle)
    work = Path(tempfile.mkdtemp())
    inp = work / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": p.id, "prompt": p.text}) + "\n" for p in mixed_prompts("heldout", n, ("math", "reasoning"))))
    kw = dict(max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
    model_s = [0.0]

    def decode(ids, **k):
        res = generate(runner.forward, ids, **k)
        model_s[0] += res.prefill_s + res.decode_s
        return res

    encode = lambda t: encode_prompt(tk, t, True)  # noqa: E731
    host_fraction = []
    rates: dict[str, list[float]] = {"pipelined": [], "sequential": []}
    outputs = {}
    for r in range(rounds):
        for mode in ("pipelined", "sequential") if r % 2 == 0 else ("sequential", "pipelined"):
            out = work / f"{mode}-{r}.jsonl"
            model_s[0] = 0.0
            s = run_batch(decode, encode, tk.decode, inp, out, gen_kwargs=kw, pipelined=mode == "pipelined")
            rates[mode].append(s.generated / s.seconds)
            if mode == "sequential":  # time outside the program's calls: what a pipeline can hide
                host_fraction.append(1 - model_s[0] / s.seconds)
            outputs[mode] = [json.loads(line)["completion"] for line in open(out)]
            print(f"round {r} {mode}: {s.generated} prompts in {s.seconds:.1f}s", file=sys.stderr)
    return {
        "prompts": n,
        "max_new_tokens": max_new_tokens,
        "rounds": rounds,
        "pipelined_prompts_per_s": round(statistics.median(rates["pipelined"]), 3),
        "sequential_prompts_per_s": round(statistics.median(rates["sequential"]), 3),
        "ratio": round(statistics.median(p / s for p, s in zip(rates["pipelined"], rates["sequential"])), 3),
        "same_outputs": outputs["pipelined"] == outputs["sequential"],
        "sequential_host_time_fraction": round(statistics.median(host_fraction), 4),
    }


def shared_prefix(bundle: str, questions: int, rounds: int, max_new_tokens: int) -> dict:
    import reasoning_gym

    _, tk, runner = open_bundle(bundle)
    items = list(reasoning_gym.create_dataset("needle_haystack", size=1, seed=11))
    haystack = items[0]["question"].rsplit("\n", 1)[0]
    sentences = [s.strip() for s in haystack.split(". ") if s.strip()]
    context = ". ".join(sentences[:40]) + "."
    subjects = [s.split(" ", 1)[1] for s in sentences[:40]][:questions]
    prompts = [encode_prompt(tk, f"Context:\n{context}\n\nWho {subj.rstrip('.')}? Reply only with a name.", True) for subj in subjects]
    kw = dict(max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
    prefill = {"reuse": [], "full": []}
    total = {"reuse": [], "full": []}
    outs = {}
    for r in range(rounds):
        for mode in ("reuse", "full") if r % 2 == 0 else ("full", "reuse"):
            cache = CacheState() if mode == "reuse" else None
            res = [generate(runner.forward, p, cache=cache, **kw) for p in prompts]
            prefill[mode].append(sum(x.prefill_s for x in res))
            total[mode].append(sum(x.prefill_s + x.decode_s for x in res))
            outs[mode] = [x.completion_ids for x in res]
            if mode == "reuse":
                reused = sum(x.reused_prefix for x in res)
    return {
        "questions": len(prompts),
        "prompt_tokens_mean": round(statistics.mean(len(p) for p in prompts), 1),
        "reused_tokens_per_prompt_after_first": round(reused / max(1, len(prompts) - 1), 1),
        "rounds": rounds,
        "prefill_s_full": round(statistics.median(prefill["full"]), 3),
        "prefill_s_reuse": round(statistics.median(prefill["reuse"]), 3),
        "prefill_speedup": round(statistics.median(f / u for f, u in zip(prefill["full"], prefill["reuse"])), 3),
        "end_to_end_speedup": round(statistics.median(f / u for f, u in zip(total["full"], total["reuse"])), 3),
        "identical_completions": f"{sum(a == b for a, b in zip(outs['reuse'], outs['full']))}/{len(prompts)}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--questions", type=int, default=30)
    args = ap.parse_args()
    out = {
        "bundle": args.bundle,
        "shared_prefix": shared_prefix(args.bundle, args.questions, 3, 8),
        "pipeline": throughput(args.bundle, args.prompts, args.max_new_tokens, args.rounds),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
