"""Shared mode side by side with Lossless: what the tuned model costs in quality and what it
gains in tokens per call, on the fp32 model run eagerly (the code the programs are exported from).

For the base model and each drafter weights file (`--weights`, repeatable; streams in
``shared`` mode change the main stream, every other drafter leaves it the base model's):
- perplexity of the reference answers of held-out prompts (every task type that has one;
  chat format; teacher-forced over up to 64 answer tokens);
- the validation suites' scores (the harness's metrics) of its greedy answers, per suite and
  mean, and the change against the base in prompts per suite;
- tokens per call of real speculative decoding on the same prompts (a chain of gamma), and
  whether the speculative answers equal the same model's autoregressive ones.

    python bench/shared_quality.py --weights sdk/edgespec/weights/smollm2-135m-streams-shared.pt \\
        --weights sdk/edgespec/weights/smollm2-135m-hydra-mix4k.pt > docs/results/shared_quality.json

`--task NAME` (edgespec.corpus.task_data: sql_chinook, translation_de) measures a task
fine-tune on its own held-out split instead: the perplexity of the gold answers, the task's
metrics with their 95% intervals (harness.metrics.task_scores), tokens per call and
losslessness on the same `--n` items:

    python bench/shared_quality.py --task sql_chinook --n 200 --weights runs/sql-shared-c/streams.pt \\
        --base-cache runs/sql_chinook_base200.json   # the base's row, measured once for every arm
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch


def answer_nll(logits_of, tokenizer, pairs: list[tuple[str, str]], max_answer: int = 64) -> list[float]:
    """Negative log-likelihood of every reference-answer token after its chat-formatted prompt."""
    nll = []
    for prompt, ref in pairs:
        ctx = tokenizer.encode(tokenizer.apply_chat_template(prompt))
        ans = tokenizer.encode(ref)[:max_answer]
        logits = logits_of(torch.tensor([ctx + ans]))[0, len(ctx) - 1 : -1]  # [A, V]: row i predicts ans[i]
        nll += (-torch.log_softmax(logits.double(), -1).gather(1, torch.tensor(ans)[:, None])[:, 0]).tolist()
    return nll


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", action="append", default=[], help="drafter weights file (repeatable)")
    ap.add_argument("--texts", type=int, default=120, help="held-out prompts with reference answers (perplexity)")
    ap.add_argument("--per-suite", type=int, default=8, help="prompts per validation suite")
    ap.add_argument("--max-seq-len", type=int, default=1024)
    ap.add_argument("--task", help="a task of edgespec.corpus.task_data: its held-out split instead of the suites")
    ap.add_argument("--n", type=int, default=200, help="items of --task (its --split)")
    ap.add_argument(
        "--split",
        default="heldout",
        choices=["heldout", "heldout_fillings", "train"],
        help="the split of --task measured (heldout: unseen templates; heldout_fillings: new fillings of the training templates, the paper's protocol; train: what the fine-tune saw, to tell memorization from generalization)",
    )
    ap.add_argument(
        "--base-cache",
        type=Path,
        help="a JSON file holding the base model's row and answers: read when it was made for the same items and budget, else measured and written (the base is the slow part: it writes to the end of its budget)",
    )
    args = ap.parse_args()

    from edgespec.config import SUITE_NAMES
    from edgespec.corpus.prompts import mixed_prompts
    from edgespec.harness.metrics import score
    from edgespec.harness.suites import load_suite
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.output_dir import renamed_into_place
    from edgespec.runtime.generate import eager_step, generate
    from edgespec.speculative.drafters import load_drafter
    from edgespec.speculative.step import EagerSpecMethods, SpecProgram
    from edgespec.speculative.tree import Tree

    torch.set_grad_enabled(False)
    src = read_source("smollm2-135m-instruct", args.max_seq_len)
    base = build_model(src).eval()
    tok = tokenizer_of(src)
    if args.task:
        from edgespec.corpus.task_data import FINETUNE_TASKS, task_examples
        from edgespec.harness.metrics import task_scores

        examples = task_examples(args.task, args.split, args.n)
        pairs = [(ex.prompt, ex.reference) for ex in examples]
        suite_of, suites, budget = (lambda ex: ex.task), [args.task], FINETUNE_TASKS[args.task].max_new_tokens
    else:
        pairs = [(p.text, p.reference) for p in mixed_prompts("heldout", args.texts) if p.reference]
        examples = [ex for name in SUITE_NAMES for ex in load_suite(name, args.per_suite)]
        suite_of, suites = (lambda ex: ex.suite), list(SUITE_NAMES)
    ids = [encode_prompt(tok, ex.prompt, True) for ex in examples]
    kw = dict(max_seq_len=args.max_seq_len, eos_ids=src.eos_ids)
    new_tokens = (lambda ex: budget) if args.task else (lambda ex: ex.max_new_tokens)

    def quality(logits_of, step) -> tuple[dict, list[list[int]]]:
        nll = answer_nll(logits_of, tok, pairs)
        outs = [generate(step, p, max_new_tokens=new_tokens(ex), **kw).completion_ids for ex, p in zip(examples, ids)]
        texts = [tok.decode(o) for o in outs]
        scores = [score(ex.metric, t, ex) for ex, t in zip(examples, texts)]
        per_suite = {name: statistics.fmean(s for ex, s in zip(examples, scores) if suite_of(ex) == name) for name in suites}
        row = {
            "perplexity": round(math.exp(statistics.fmean(nll)), 4),
            "answer_tokens": len(nll),
            "suite_scores": {k: round(v, 4) for k, v in per_suite.items()},
            "mean_score": round(statistics.fmean(per_suite.values()), 4),
        }
        if args.task:  # each metric with its 95% interval, and a few answers to read
            row["task_scores"] = {m: [round(x, 4) for x in v] for m, v in task_scores(examples, texts).items()}
            row["examples"] = [{"id": ex.id, "answer": t[:300], "reference": ex.reference[:300]} for ex, t in list(zip(examples, texts))[:3]]
        return row, outs

    t0 = time.time()
    # what the base's row is a function of: its items (prompts and references) and budgets
    key = {"prompts": ids, "pairs": pairs, "max_new_tokens": [new_tokens(ex) for ex in examples], "max_seq_len": args.max_seq_len}
    key = json.loads(json.dumps(key))  # as it reads back (tuples become lists)
    cached = json.loads(args.base_cache.read_text()) if args.base_cache and args.base_cache.exists() else None
    if cached is not None and cached.get("key") == key:
        base_row, base_outs = cached["row"], cached["outs"]
    else:
        base_row, base_outs = quality(lambda t: base.output(base.hidden(t, torch.tensor([0]))).float(), eager_step(base))
        if args.base_cache:
            with renamed_into_place(args.base_cache, ".base-", ".json") as tmp:
                tmp.write_text(json.dumps({"key": key, "row": base_row, "outs": base_outs}))
    print(f"base {time.time() - t0:.0f}s {json.dumps(base_row)}", file=sys.stderr)
    rows = {"base": base_row}
    for w in args.weights:
        drafter = load_drafter(w, base)
        cfg = drafter.cfg
        methods = EagerSpecMethods(SpecProgram(drafter, Tree((1,) * cfg.draft_depth)).eval())
        if cfg.mode == "shared":  # the main stream carries the adapters: a model of its own
            row, outs = quality(lambda t, d=drafter: base.output(d.forward_train(t)[0]).float(), methods.forward)
            row["perplexity_vs_base"] = round(row["perplexity"] / base_row["perplexity"] - 1, 4)
            if not args.task:
                row["score_change_in_prompts"] = {k: round((row["suite_scores"][k] - base_row["suite_scores"][k]) * args.per_suite, 2) for k in SUITE_NAMES}
        else:
            row, outs = {}, base_outs
        calls, same = {name: [] for name in suites}, 0
        for ex, p, ar in zip(examples, ids, outs):
            res = generate(methods.forward, p, max_new_tokens=new_tokens(ex), spec=methods, **kw)
            calls[suite_of(ex)] += res.tokens_per_call
            same += res.completion_ids == ar
        per_suite = {k: round(statistics.fmean(v), 3) for k, v in calls.items()}
        row |= {
            "drafter": cfg.kind,
            "mode": cfg.mode,
            "tokens_per_call": round(statistics.fmean(c for v in calls.values() for c in v), 3),
            "tokens_per_call_per_suite": per_suite,
            "speculative_equals_own_autoregressive": f"{same}/{len(examples)}",
        }
        rows[w] = row  # the path as given: two runs' files are both streams.pt
        print(f"{w} {time.time() - t0:.0f}s {json.dumps(row)}", file=sys.stderr)
    print(
        json.dumps(
            {"task": args.task, "split": args.split if args.task else None, "texts": len(pairs), "per_suite": args.per_suite, "suites": suites, "rows": rows},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
