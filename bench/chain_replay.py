"""What a tree of several chains would earn: the drafter's chain and the suffix match's
continuation verified side by side in one call, replayed exactly over greedy decoding.

A speculative bundle's program decodes held-out prompts greedily (AR, `forward`); its
drafter's acceptance at every position comes from one teacher-forced pass
(`tree_tuning.future_ranks`: a chain of depth D accepts depth d when the true token is the
drafter's top-1 at every depth <= d, exact for drafters that continue their own top-1). Then
the decode loop is replayed call by call for each way of filling the tree:

- ``drafter``: the drafter's chain alone (1 + D rows);
- ``hybrid_N``: `generate(lookup=N)`: the suffix match's continuation replaces the drafter's
  chain when the match is at least N tokens long (1 + D rows);
- ``two_chains_L``: both chains from the root, the suffix chain L long (1 + D + L rows every
  call); greedy acceptance takes the longer accepted chain;
- ``two_chains_when_matched_L``: the same tree only on calls where a suffix match of at
  least 2 tokens exists (another program method), else the drafter's chain;
- ``suffix_long_L``: when the match is >= 3 tokens, a suffix chain of L alone (1 + L rows),
  else the hybrid of 2.

Tokens per call are exact for greedy decoding. Speed is estimated per call from the
program's own measured cost of `forward` over R rows (R = 1..12, at position --context, in
this run) plus what its `spec_step` adds beyond its rows (tree_tuning.StepCostModel's
t_extra, per row), relative to one AR token of the same program.

    python bench/chain_replay.py --bundle bundles/spec --prompts 108 --max-new-tokens 64 > docs/results/chain_replay.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict

from edgespec.speculative.tree_tuning import accepted_depths, hybrid_fill, matched_prefix, replay_with_context

ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12)


def fills(depth: int) -> dict:
    def two_chains(L):
        def fill(m, truth, a):
            chain = m.draft(L, 1)[0]
            return max(a, matched_prefix(chain, truth)), 1 + depth + L

        return fill

    def two_chains_when_matched(L):
        def fill(m, truth, a):
            chain = m.draft(L, 2)[0]
            return (max(a, matched_prefix(chain, truth)), 1 + depth + L) if chain else (a, 1 + depth)

        return fill

    def suffix_long(L):
        def fill(m, truth, a):
            chain, n = m.draft(L, 1)
            if chain and n >= 3:
                return matched_prefix(chain, truth), 1 + L
            return hybrid_fill(depth, 2)(m, truth, a)

        return fill

    out = {"drafter": hybrid_fill(depth, 0)} | {f"hybrid_{n}": hybrid_fill(depth, n) for n in (1, 2, 3)}
    for L in (2, 3, 4, 6):
        out[f"two_chains_{L}"] = two_chains(L)
    for L in (3, 4, 6):
        out[f"two_chains_when_matched_{L}"] = two_chains_when_matched(L)
    for L in (6, 8):
        out[f"suffix_long_{L}"] = suffix_long(L)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="a speculative bundle (its program and drafter)")
    ap.add_argument("--prompts", type=int, default=108)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--context", type=int, default=200, help="position the call costs are measured at")
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    from edgespec.bundle import drafter_weights, read_manifest
    from edgespec.corpus.prompts import PROMPT_SOURCES, mixed_prompts
    from edgespec.models.load import build_model, read_source
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.generate import generate
    from edgespec.runtime.session import open_bundle
    from edgespec.runtime.speed import forward_curve, step_cost
    from edgespec.speculative import tree_tuning as T
    from edgespec.speculative.drafters import drafting_vocabulary, load_drafter
    from edgespec.speculative.tree import Tree

    manifest, tokenizer, runner = open_bundle(args.bundle)
    if not runner.has_spec:
        sys.exit(f"{args.bundle}: not a speculative bundle")
    data = []
    for p in mixed_prompts("heldout", args.prompts, tuple(PROMPT_SOURCES)):
        ids = encode_prompt(tokenizer, p.text, True)
        res = generate(runner.forward, ids, max_new_tokens=args.max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
        data.append((p.task, ids, res.completion_ids))
        print(f"[{len(data)}/{args.prompts}] {p.task}: {len(res.completion_ids)} tokens", file=sys.stderr)
    src = read_source(manifest.recipe.model.source, runner.max_seq_len)
    weights = drafter_weights(args.bundle, read_manifest(args.bundle))
    spec = load_drafter(weights, build_model(src))
    depth = runner.depth
    vocab = drafting_vocabulary(weights, src, manifest.speculative.draft_vocab)
    ranks = T.future_ranks(spec, [(len(ids), ids + comp) for _, ids, comp in data], depth, vocab)
    accepts = [accepted_depths(r, depth) for r in ranks]  # row p: the call whose root is completion[p]

    curve = forward_curve(runner, args.context, args.reps, ROWS)
    t_own = step_cost(runner, args.context, reps=args.reps)
    own = Tree(runner.branching)
    cost = T.StepCostModel.calibrate(curve, t_own, own, spec.draft_layers / spec.base.args.n_layers)
    extra_per_row = cost.t_extra / own.size  # acceptance and the lm head grow with the rows

    def call_cost(rows: int) -> float:
        return cost.rows_cost(rows) + extra_per_row * rows

    report = {
        "bundle": args.bundle,
        "prompts": len(data),
        "max_new_tokens": args.max_new_tokens,
        "depth": depth,
        "forward_ms_by_rows": {n: round(1000 * t, 3) for n, t in curve.items()},
        "spec_step_own_tree_ms": round(1000 * t_own, 3),
        "fills": {},
    }
    for name, fill in fills(depth).items():
        per_task = defaultdict(list)
        for (task, ids, comp), acc in zip(data, accepts):
            per_task[task] += replay_with_context(ids, comp, acc, fill, depth)
        calls = [c for v in per_task.values() for c in v]
        tokens = sum(n for n, _ in calls)
        seconds = sum(call_cost(r) for _, r in calls)
        report["fills"][name] = {
            "tokens_per_call": round(tokens / len(calls), 4),
            "rows_per_call": round(statistics.fmean(r for _, r in calls), 3),
            "estimated_vs_ar": round(tokens / seconds * curve[1], 3),
            "tokens_per_call_by_task": {t: round(sum(n for n, _ in v) / len(v), 3) for t, v in sorted(per_task.items())},
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
