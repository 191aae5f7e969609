"""Drafter training throughput: response tokens per second of `train_drafter` on real data.

Each `--config NAME=FIELD=VALUE,FIELD=VALUE` is a set of recipe overrides on top of
`--recipe` (e.g. `train.bf16=false`, `drafter.draft_vocab=0`, `drafter.kind=streams`). All
configs train a fresh drafter of their `drafter.kind` (edgespec.speculative.drafters.new_drafter)
on the same first `--sequences` sequences of `--data` (a shard directory from
`edgespec distill --source`, or JSONL) with cached layer features; the configs take turns
for `--rounds` rounds of `--warmup` + `--steps` steps, so a noisy machine slows them alike.
Tokens/s = response tokens in the timed steps / their wall time (median over rounds).

    python bench/train_speed.py --data /work/distill-v1/shards --sequences 256 \\
        --config fp32_full=train.bf16=false,drafter.draft_vocab=0 --config bf16_draft=train.bf16=true

Prints one JSON object (docs/speculative-streaming.md, "Trainer throughput").
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace

import torch

from edgespec.config import load_recipe
from edgespec.models.load import build_model, read_source, tokenizer_of
from edgespec.speculative.drafters import new_drafter
from edgespec.speculative.features import FeatureCache
from edgespec.speculative.train import train_drafter
from edgespec.speculative.train_data import load_examples
from edgespec.speculative.vocab import draft_vocabulary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--recipe", default="recipes/smollm2-135m-spec.yaml")
    ap.add_argument("--config", action="append", required=True, help="NAME=FIELD=VALUE[,FIELD=VALUE...]")
    ap.add_argument("--sequences", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    configs = {}
    for c in args.config:
        name, _, over = c.partition("=")
        configs[name] = load_recipe(args.recipe, [o for o in over.split(",") if o])
    first = next(iter(configs.values()))
    src = read_source(first.model.source, max(first.model.max_seq_len, first.train.seq_len + first.drafter.draft_depth + 1))
    base = build_model(src)
    examples = load_examples(args.data, tokenizer_of(src), first.train.seq_len, first.model.chat_template)[: args.sequences]
    feats: dict[tuple[int, ...], list[torch.Tensor]] = {}  # by the layers the drafter reads (its taps)
    vocab: dict[int, torch.Tensor | None] = {}
    t0 = time.perf_counter()
    for r in configs.values():
        s = r.drafter
        model = new_drafter(base, s)
        if model.taps not in feats:
            feats[model.taps] = FeatureCache(model, examples).h
        if s.draft_vocab not in vocab:
            vocab[s.draft_vocab] = draft_vocabulary(src, s.draft_vocab)
    setup_s = time.perf_counter() - t0

    rates: dict[str, list[float]] = {n: [] for n in configs}
    step_s: dict[str, list[float]] = {n: [] for n in configs}
    per_step_tokens: dict[str, list[int]] = {n: [] for n in configs}
    for _ in range(args.rounds):
        for name, r in configs.items():
            torch.manual_seed(r.train.seed)
            model = new_drafter(base, r.drafter)
            hp = replace(r.train, steps=args.warmup + args.steps, checkpoint_every=10**9, warmup_steps=1)
            stamps: list[float] = []
            with tempfile.TemporaryDirectory() as out:
                stamps.append(time.perf_counter())
                log = train_drafter(
                    model,
                    examples,
                    feats[model.taps],
                    hp,
                    out,
                    on_step=lambda s, log, stamps=stamps: stamps.append(time.perf_counter()),
                    draft_ids=vocab[r.drafter.draft_vocab],
                )
            seen = [0, *log.tokens_seen]
            timed = range(args.warmup, args.warmup + args.steps)
            tokens = sum(seen[i + 1] - seen[i] for i in timed)
            seconds = sum(stamps[i + 1] - stamps[i] for i in timed)
            rates[name].append(tokens / seconds)
            step_s[name] += [stamps[i + 1] - stamps[i] for i in timed]
            per_step_tokens[name] += [seen[i + 1] - seen[i] for i in timed]
    base_name = next(iter(configs))
    out = {
        "data": args.data,
        "recipe": args.recipe,
        "sequences": len(examples),
        "threads": args.threads,
        "setup_seconds": round(setup_s, 1),
        "configs": {
            name: {
                "overrides": c.partition("=")[2],
                "batch_size": configs[name].train.batch_size,
                "seq_len": configs[name].train.seq_len,
                "response_tokens_per_s": round(statistics.median(rates[name]), 1),
                "median_step_s": round(statistics.median(step_s[name]), 3),
                "median_response_tokens_per_step": statistics.median(per_step_tokens[name]),
                "speedup_vs_" + base_name: round(statistics.median(rates[name]) / statistics.median(rates[base_name]), 2),
            }
            for name, c in zip(configs, args.config)
        },
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
