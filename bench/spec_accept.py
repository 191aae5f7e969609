"""Mean accepted tokens per call by real (eager) decoding on held-out prompts, per task.

Every drafter goes through the same speculative step and tree verifier on the fp32 base
model (`SpecProgram` run eagerly, the code the program is exported from):
  --weights FILE   a drafter's weights from `edgespec train` (streams or Medusa heads; the
                   file says which), repeatable
  --lookup N       suffix matching over prompt and output (at least N tokens), no training

With --check-lossless every speculative output is compared with autoregressive greedy
decoding of the same model (token ids must be identical).

    python bench/spec_accept.py --weights runs/medusa/medusa.pt --lookup 1 --per-task 10 --check-lossless
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", action="append", default=[], help="drafter weights file (repeatable)")
    ap.add_argument("--lookup", type=int, default=0, help="suffix-match drafts of at least N tokens (0: off)")
    ap.add_argument("--tree", default="1,1,1", help="branching per depth")
    ap.add_argument("--suites", default="math,reasoning,code")
    ap.add_argument("--per-task", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--check-lossless", action="store_true")
    args = ap.parse_args()

    from edgespec.corpus.prompts import PROMPT_SOURCES
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.runtime.generate import eager_step, generate
    from edgespec.speculative.common import NoDrafter
    from edgespec.speculative.drafters import load_drafter
    from edgespec.speculative.step import EagerSpecMethods, SpecProgram
    from edgespec.speculative.tree import Tree

    torch.set_grad_enabled(False)
    src = read_source("smollm2-135m-instruct", 1024)
    base = build_model(src)
    tok = tokenizer_of(src)
    tree = Tree(tuple(int(x) for x in args.tree.split(",")))
    contenders = {}  # name -> (spec methods, lookup)
    for w in args.weights:
        drafter = load_drafter(w, base)
        name = f"{drafter.cfg.kind}:{Path(w).stem}"
        contenders[name] = (EagerSpecMethods(SpecProgram(drafter, tree).eval()), 0)
        if args.lookup:
            contenders[name + "+lookup"] = (contenders[name][0], args.lookup)
    if args.lookup:
        contenders["lookup"] = (EagerSpecMethods(SpecProgram(NoDrafter(base), Tree((1,) * len(tree.branching)))), args.lookup)

    prompts = [p for s in args.suites.split(",") for p in PROMPT_SOURCES[s]("heldout", args.per_task)]
    per_task: dict[str, dict[str, list[int]]] = {name: defaultdict(list) for name in contenders}
    lossless = {name: [0, 0] for name in contenders}
    t0 = time.time()
    for i, p in enumerate(prompts):
        ids = tok.encode(tok.apply_chat_template(p.text))
        kw = dict(max_new_tokens=args.max_new_tokens, max_seq_len=1024, eos_ids=src.eos_ids)
        ar = generate(eager_step(base), ids, **kw).completion_ids if args.check_lossless else None
        for name, (methods, lookup) in contenders.items():
            res = generate(methods.forward, ids, spec=methods, lookup=lookup, **kw)
            per_task[name][p.task] += res.tokens_per_call
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
