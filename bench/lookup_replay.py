"""Draft sources replayed exactly over autoregressive greedy outputs: n-gram prompt lookup vs
the suffix matcher (edgespec.speculative.suffix), as a chain of `--depth` drafted tokens.

The bundle's program decodes each held-out prompt greedily (math, reasoning, code; chat
template); then, for every drafter, the decode is replayed: at each call the drafter sees the
prompt plus the tokens emitted so far and proposes up to `depth` tokens, the call emits the
longest matching prefix plus one token (exact greedy verification), so tokens per call are
what the program would emit with that chain as its only draft. Prints JSON.

    python bench/lookup_replay.py --bundle bundles/spec --prompts 100 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from edgespec.speculative.suffix import SuffixMatcher


def replay(prompt: list[int], completion: list[int], draft_fn) -> list[int]:
    """Tokens emitted per call when `draft_fn(context, emitted)` drafts each call's chain."""
    per_call, p = [], 0
    while p < len(completion):
        draft = draft_fn(prompt, completion[:p])
        a = 0
        while a < len(draft) and p + a < len(completion) and draft[a] == completion[p + a]:
            a += 1
        n = min(a + 1, len(completion) - p)
        per_call.append(n)
        p += n
    return per_call


def ngram_continuation(context: list[int], length: int, max_ngram: int, min_ngram: int = 2) -> list[int]:
    """The n-gram prompt lookup edgespec used before the suffix matcher (the baseline): what
    followed the last earlier occurrence of the context's longest tail n-gram, n from
    max_ngram down to min_ngram, found by scanning the whole context."""
    for n in range(min(max_ngram, len(context) - 1), min_ngram - 1, -1):
        tail = context[-n:]
        for s in range(len(context) - n - 1, -1, -1):
            if context[s : s + n] == tail:
                return context[s + n : s + n + length]
    return []


def ngram_drafter(depth: int, max_ngram: int):
    return lambda prompt, out: ngram_continuation(prompt + out, depth, max_ngram)


def suffix_drafter(depth: int, min_match: int):
    state: dict = {}

    def draft(prompt, out):
        m = state.get("m")
        if m is None or state["n"] > len(out) or state["prompt"] is not prompt:
            m, state["n"], state["prompt"] = SuffixMatcher(prompt), 0, prompt
            state["m"] = m
        for t in out[state["n"] :]:
            m.extend(t)
        state["n"] = len(out)
        return m.draft(depth, min_match)[0]

    return draft


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--depth", type=int, default=3)
    args = ap.parse_args()
    from edgespec.corpus.prompts import mixed_prompts
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.generate import generate
    from edgespec.runtime.session import open_bundle

    _, tokenizer, runner = open_bundle(args.bundle)
    data = []
    for p in mixed_prompts("heldout", args.prompts, ("math", "reasoning", "code")):
        ids = encode_prompt(tokenizer, p.text, True)
        res = generate(runner.forward, ids, max_new_tokens=args.max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
        data.append((p.task, ids, res.completion_ids))
        print(f"[{len(data)}/{args.prompts}] {p.task}: {len(res.completion_ids)} tokens", file=sys.stderr)
    drafters = {
        "ngram_3_to_2": lambda: ngram_drafter(args.depth, 3),
        "suffix_min2": lambda: suffix_drafter(args.depth, 2),
        "suffix_min1": lambda: suffix_drafter(args.depth, 1),
        "suffix_min3": lambda: suffix_drafter(args.depth, 3),
    }
    report = {"bundle": args.bundle, "prompts": len(data), "max_new_tokens": args.max_new_tokens, "depth": args.depth, "drafters": {}}
    for name, make in drafters.items():
        per_task: dict[str, list[int]] = {}
        for task, ids, comp in data:
            per_task.setdefault(task, []).extend(replay(ids, comp, make()))
        every = [n for v in per_task.values() for n in v]
        report["drafters"][name] = {
            "tokens_per_call": round(statistics.fmean(every), 4),
            "calls": len(every),
            "per_task": {t: round(statistics.fmean(v), 4) for t, v in sorted(per_task.items())},
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
