"""Acceptance lost to a draft vocabulary: tokens per call with the streams' lm head over the
N most frequent tokens (`speculative/vocab.py`) vs the full vocabulary.

Greedy continuations of held-out prompts (math, reasoning, code; chat template) are decoded
by the bundle's program; the streams' rank of every true future token is computed over the
full vocabulary and over each draft vocabulary, and greedy tree decoding is replayed
(`speculative/tree_tuning.py`, exact for greedy decoding) for the bundle's tree and a chain.

    python bench/draft_vocab.py --bundle bundles/spec --prompts 48 > docs/results/draft_vocab.json
"""

from __future__ import annotations

import argparse
import json
import sys

from edgespec.bundle import drafter_weights, read_manifest
from edgespec.corpus.prompts import mixed_prompts
from edgespec.models.load import build_model, read_source
from edgespec.models.tokenizer import encode_prompt
from edgespec.runtime.generate import generate
from edgespec.runtime.session import open_bundle
from edgespec.speculative import tree_tuning as T
from edgespec.speculative.drafters import load_drafter
from edgespec.speculative.vocab import draft_vocabulary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--sizes", type=int, nargs="+", default=[0, 2048, 4096, 8192, 16384], help="draft vocabularies (0 = full)")
    args = ap.parse_args()
    weights = drafter_weights(args.bundle, read_manifest(args.bundle))
    manifest, tokenizer, runner = open_bundle(args.bundle)
    seqs = []
    for i, p in enumerate(mixed_prompts("heldout", args.prompts)):
        ids = encode_prompt(tokenizer, p.text, True)
        res = generate(runner.forward, ids, max_new_tokens=args.max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
        seqs.append((len(ids), ids + res.completion_ids))
        print(f"[draft_vocab] continuation {i + 1}/{args.prompts}", file=sys.stderr)
    src = read_source(manifest.recipe.model.source, runner.max_seq_len)
    base = build_model(src)
    spec = load_drafter(weights, base)
    trees = sorted({tuple(runner.branching), (1,) * spec.cfg.draft_depth})
    rows = []
    for n in args.sizes:
        ranks = T.future_ranks(spec, seqs, spec.cfg.draft_depth, draft_vocabulary(src, n))
        rows.append({"draft_vocab": n or base.args.vocab_size, "tokens_per_call": {str(list(b)): round(T.replay(ranks, b)[0], 4) for b in trees}})
    print(json.dumps({"bundle": args.bundle, "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "results": rows}, indent=1))


if __name__ == "__main__":
    main()
