"""Mean accepted tokens per call by real (eager) decoding on held-out prompts, per task.

Drafters, all through the same tree verifier on the fp32 base model:
  streams   trained speculative streams (--streams FILE from `edgespec train`)
  medusa    trained Medusa-1 heads (--medusa FILE)
  lookup    prompt lookup decoding (no training)

With --check-lossless every speculative output is compared with autoregressive greedy
decoding of the same model (token ids must be identical).

    python bench/spec_accept.py --streams runs/streams/streams.pt --per-task 10 --check-lossless
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams")
    ap.add_argument("--medusa")
    ap.add_argument("--lookup", action="store_true")
    ap.add_argument("--tree", default="3,2,1", help="branching per depth")
    ap.add_argument("--suites", default="math,reasoning,code")
    ap.add_argument("--per-task", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--check-lossless", action="store_true")
    args = ap.parse_args()

    from edgespec.speculative.decode import spec_generate, stream_drafter

    from edgespec.corpus.prompts import SUITES
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.runtime.generate import eager_step, generate
    from edgespec.speculative.lookup import prompt_lookup_drafter
    from edgespec.speculative.medusa import MedusaHeads, MedusaModel
    from edgespec.speculative.streams import SpecModel, load_streams, read_architecture
    from edgespec.speculative.tree import Tree

    torch.set_grad_enabled(False)
    src = read_source("smollm2-135m-instruct", 1024)
    base = build_model(src)
    tok = tokenizer_of(src)
    tree = Tree(tuple(int(x) for x in args.tree.split(",")))
    contenders = {}
    if args.streams:
        spec = SpecModel(base, load_streams(args.streams, base))
        contenders["streams"] = (spec, stream_drafter(spec), tree)
    if args.medusa:
        blob = torch.load(args.medusa, weights_only=True)
        heads = MedusaHeads(base.args.dim, read_architecture(blob)["gamma"])
        heads.load_state_dict(blob["state_dict"])
        m = MedusaModel(base, heads)
        contenders["medusa"] = (m.verifier(), m.drafter(), tree)
    if args.lookup:
        contenders["lookup"] = (SpecModel(base, None), prompt_lookup_drafter(), Tree((1,) * len(tree.branching)))

    prompts = [p for s in args.suites.split(",") for p in SUITES[s]("heldout", args.per_task)]
    per_task: dict[str, dict[str, list[int]]] = {name: defaultdict(list) for name in contenders}
    lossless = {name: [0, 0] for name in contenders}
    t0 = time.time()
    for i, p in enumerate(prompts):
        ids = tok.encode(tok.apply_chat_template(p.text))
        ar = (
            generate(eager_step(base), ids, max_new_tokens=args.max_new_tokens, max_seq_len=1024, eos_ids=src.eos_ids).completion_ids
            if args.check_lossless
            else None
        )
        for name, (model, drafter, tr) in contenders.items():
            res = spec_generate(model, tr, ids, max_new_tokens=args.max_new_tokens, eos_ids=src.eos_ids, drafter=drafter)
            per_task[name][p.task] += res.stats.tokens_per_call
            if ar is not None:
                lossless[name][0] += res.completion_ids == ar
                lossless[name][1] += 1
        print(f"[{i + 1}/{len(prompts)}] {p.id} {time.time() - t0:.0f}s", file=sys.stderr)

    report = {"tree": list(tree.branching), "prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "results": {}}
    for name in contenders:
        calls = [c for v in per_task[name].values() for c in v]
        report["results"][name] = {
            "mean_accepted_per_call": round(statistics.mean(calls), 3),
            "per_task": {t: round(statistics.mean(v), 3) for t, v in sorted(per_task[name].items())},
            "histogram": {k: calls.count(k) for k in sorted(set(calls))},
            **({"lossless": f"{lossless[name][0]}/{lossless[name][1]}"} if args.check_lossless else {}),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
