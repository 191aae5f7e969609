"""Drafter quality versus training budget: tokens per call on held-out prompts as training sees
more self-distilled response tokens.

One training run (`train_drafter`, the recipe's settings, `--steps` steps) on `--data`; at
geometrically spaced steps the drafter is evaluated by exact greedy replay (the decode loop
call for call, `edgespec.speculative.tree_tuning.replay`) over the teacher's greedy continuations of
held-out prompts (`--heldout`, shards from `edgespec distill --source ... --split heldout`):
mean tokens per call of a chain of gamma (and of the recipe's tree), overall and per task,
against response tokens seen. `--override drafter.kind=medusa` trains Medusa-1 heads on the same data and
features instead (equal budget). Prints JSON; `--plot` draws the curve(s) of one or more
JSON files written before.

    python bench/stream_curve.py --data /work/distill-v1/shards --heldout /work/distill-v1/heldout \\
        --steps 2000 --override drafter.kind=streams > docs/results/stream_curve_streams.json
    python bench/stream_curve.py --plot docs/stream_curve.png docs/results/stream_curve_*.json

A long run goes in `--out-dir DIR`: checkpoints every `--checkpoint-every` steps and the
curve's points so far (DIR/curve.json) are kept there, so the same command, run again after
a stop, resumes where the last checkpoint left off (same data, settings and `--steps`: the
learning-rate schedule spans them) and keeps the points it had; `--eval-every N` adds an
evaluation every N steps to the geometric ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import torch


def evaluate(model, seqs: list[tuple[str, int, list[int]]], feats: list[torch.Tensor], gamma: int, vocab, trees: list[tuple[int, ...]]) -> dict:
    from edgespec.speculative.tree_tuning import future_ranks, replay

    was = model.training
    model.eval()
    ranks = future_ranks(model, [(n, ids) for _, n, ids in seqs], gamma, vocab, feats)
    model.train(was)
    out = {}
    for tree in trees:
        name = "x".join(map(str, tree))
        by_task = defaultdict(list)
        for (task, _, _), r in zip(seqs, ranks):
            by_task[task].append(r)
        out[name] = {"all": round(replay(ranks, tree)[0], 4)} | {t: round(replay(rs, tree)[0], 4) for t, rs in sorted(by_task.items())}
    return out


def plot(path: str, files: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    runs = [json.loads(Path(f).read_text()) for f in files]
    shared = set.intersection(*(set(r.get("overrides", [])) for r in runs))  # label runs by what differs
    for run in runs:
        tree = "x".join(["1"] * run["gamma"])
        pts = [(p["response_tokens_seen"], p["tokens_per_call"][tree]["all"]) for p in run["points"] if p["response_tokens_seen"]]  # log axis
        own = ", ".join(o for o in run.get("overrides", []) if o not in shared and not o.startswith("drafter.kind="))  # named already
        ax.plot(*zip(*pts), marker="o", label=f"{run['drafter']} (chain of {run['gamma']}{', ' + own if own else ''})")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("self-distilled response tokens seen in training")
    ax.set_ylabel("tokens per call (held-out, greedy replay)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--heldout")
    ap.add_argument("--recipe", default="recipes/smollm2-135m-spec.yaml")
    ap.add_argument("--override", action="append", default=[], help="recipe FIELD=VALUE")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--evals", type=int, default=6, help="evaluation points, geometrically spaced up to --steps")
    ap.add_argument("--heldout-sequences", type=int, default=300)
    ap.add_argument("--features", help="feature cache file (shared by a streams and a Medusa run on the same data)")
    ap.add_argument("--save", help="write the trained weights here (edgespec's weights format), also at each evaluation")
    ap.add_argument("--init", help="start from these weights (with --steps 0: only evaluate them)")
    ap.add_argument("--out-dir", help="a resumable run: checkpoints and the curve so far live here (module docstring)")
    ap.add_argument("--checkpoint-every", type=int, default=50, help="with --out-dir: steps between checkpoints")
    ap.add_argument("--eval-every", type=int, default=0, help="also evaluate every N steps (0: only the geometric points)")
    ap.add_argument("--plot", help="write this PNG from the JSON files given as arguments")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    if args.plot:
        plot(args.plot, args.files)
        return

    from edgespec.config import load_recipe
    from edgespec.corpus.distill import read_shards
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.speculative.drafters import new_drafter, save_drafter
    from edgespec.speculative.features import FeatureCache
    from edgespec.speculative.train import train_drafter
    from edgespec.speculative.train_data import load_examples
    from edgespec.speculative.vocab import draft_vocabulary

    r = load_recipe(args.recipe, args.override)
    s, t = r.drafter, r.train
    src = read_source(r.model.source, max(r.model.max_seq_len, t.seq_len + s.draft_depth + 1))
    base = build_model(src)
    model = new_drafter(base, s)
    if args.init:
        model.params.load_state_dict(torch.load(args.init, weights_only=True)["state_dict"])
    t0 = time.perf_counter()
    examples = load_examples(args.data, tokenizer_of(src), t.seq_len, r.model.chat_template) if args.steps else []
    feats = FeatureCache(model, examples, Path(args.features) if args.features else None, bf16=t.bf16).h if args.steps else []
    feature_s = time.perf_counter() - t0
    rows = list(read_shards(args.heldout))[: args.heldout_sequences]
    seqs = [(row["task"], len(row["prompt_ids"]), (row["prompt_ids"] + row["response_ids"])[: t.seq_len]) for row in rows]
    vocab = draft_vocabulary(src, s.draft_vocab)  # the program's drafting head, for streams and heads alike
    with torch.no_grad():  # the held-out sequences' frozen features, fp32, once
        hfeats = [model.lower_hidden(torch.tensor([ids]))[0] for _, _, ids in seqs]
    trees = sorted({(1,) * s.draft_depth, tuple(s.tree)})
    eval_at = {max(1, round(args.steps / 2**k)) for k in range(args.evals)}
    if args.eval_every:
        eval_at |= set(range(args.eval_every, args.steps + 1, args.eval_every))
    curve_file = Path(args.out_dir) / "curve.json" if args.out_dir else None
    if curve_file:
        curve_file.parent.mkdir(parents=True, exist_ok=True)
    points = json.loads(curve_file.read_text())["points"] if curve_file and curve_file.is_file() else []
    eval_s = [0.0]

    def evaluate_now(step: int, log=None) -> None:
        t = time.perf_counter()
        point = {"step": step, "response_tokens_seen": log.tokens_seen[-1] if log else 0}
        if log:
            point["loss"] = round(sum(log.loss[-20:]) / len(log.loss[-20:]), 4)  # the last 20 steps' mean
        points.append(point | {"tokens_per_call": evaluate(model, seqs, hfeats, s.draft_depth, vocab, trees)})
        eval_s[0] += time.perf_counter() - t
        print(json.dumps(points[-1]), file=sys.stderr, flush=True)
        if curve_file:
            tmp = curve_file.with_suffix(".tmp")
            tmp.write_text(json.dumps({"points": points}, indent=1))
            tmp.replace(curve_file)
        if args.save and log:  # a stopped long run keeps its latest evaluated weights
            save_drafter(args.save, model.params, model.cfg, vocab)

    def on_step(step: int, log) -> None:
        if step in eval_at and all(p["step"] != step for p in points):
            evaluate_now(step, log)

    hp = replace(t, steps=max(1, args.steps), checkpoint_every=args.checkpoint_every if args.out_dir else 10**9)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(args.out_dir or scratch)
        if not (out / "ckpt.pt").is_file() and not points:
            evaluate_now(0)  # the untrained drafter (a resumed run has it already)
        log = train_drafter(model, examples, feats, hp, out, on_step=on_step, draft_ids=vocab) if args.steps else None
    train_s = time.perf_counter() - t1
    if args.save:
        save_drafter(args.save, model.params, model.cfg, vocab)
    print(
        json.dumps(
            {
                "drafter": s.kind,
                "recipe": args.recipe,
                "overrides": args.override,
                "init": args.init,
                "gamma": s.draft_depth,
                "train_sequences": len(examples),
                "train_response_tokens": sum(len(e.tokens) - e.n_prompt for e in examples),
                "heldout_sequences": len(seqs),
                "heldout_tasks": sorted({x[0] for x in seqs}),
                "steps": args.steps,
                "batch_size": t.batch_size,
                "feature_seconds": round(feature_s, 1),
                "train_seconds": round(train_s - eval_s[0], 1),  # this process's
                "train_seconds_all_runs": round(log.seconds, 1) if log else None,  # across resumed runs (to the last checkpoint)
                "eval_seconds": round(eval_s[0], 1),
                "train_response_tokens_per_s": round(log.tokens_seen[-1] / (train_s - eval_s[0]), 1) if log else None,
                "points": points,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
