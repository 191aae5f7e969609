"""`edgespec tune`: choose a bundle's draft tree by measurement, on this device.

The models are in `edgespec.speculative.tree_tuning` (acceptance replay, step cost model), the
timing of the program's calls in `edgespec.runtime.speed`; this module runs them against a
bundle's own program and drafter weights.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from edgespec.config import TuneConfig
from edgespec.runtime.speed import forward_curve, step_cost
from edgespec.speculative import tree_tuning as T
from edgespec.speculative.tree import Tree


def tuning_prompts(train_data: str, n: int) -> list[str]:
    """What a bundle decodes: a task fine-tune's (``train.data: task:NAME``) n items of its
    task's dev split (units kept out of training), else n held-out prompts of the built-in
    suites in turn."""
    from edgespec.config.lm_sections import TASK_SUITE_PREFIX

    if train_data.startswith(TASK_SUITE_PREFIX):
        from edgespec.corpus.task_data import task_examples

        return [x.prompt for x in task_examples(train_data[len(TASK_SUITE_PREFIX) :], "dev", n)]
    from edgespec.corpus.prompts import mixed_prompts

    return [p.text for p in mixed_prompts("heldout", n)]


def tune_bundle(bundle_dir: str | Path, cfg: TuneConfig | None = None, on_progress: Callable[[str, int, int], None] = lambda phase, done, total: None) -> dict:
    """Rank every draft tree up to `cfg.max_size` nodes by expected tokens/s for a speculative
    bundle on this device: its program's call costs at position `cfg.context`, its drafter's
    acceptance on greedy continuations (`cfg.max_new_tokens`) of `cfg.prompts` prompts
    (`tuning_prompts`: a task program's own task). Returns the table
    (best first) with the measured costs, and for a chain the hybrid draft's tokens per call by
    `validate.lookup` (same tree, same cost: the most tokens per call wins); reports (phase,
    done, total) through on_progress."""
    from edgespec.bundle import drafter_weights, read_manifest
    from edgespec.errors import EdgespecError
    from edgespec.models.load import build_model, read_source
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.generate import generate
    from edgespec.runtime.session import open_bundle
    from edgespec.speculative.drafters import drafting_vocabulary, load_drafter

    cfg = cfg or TuneConfig()
    context, max_size = cfg.context, cfg.max_size
    weights = drafter_weights(bundle_dir, read_manifest(bundle_dir))  # before any slow work
    manifest, tokenizer, runner = open_bundle(bundle_dir)
    if context + 64 >= runner.max_seq_len:
        raise EdgespecError(f"tuning context {context} leaves no room in the program's context of {runner.max_seq_len}")
    prompts = tuning_prompts(manifest.recipe.train.data, cfg.prompts)
    seqs = []
    for i, text in enumerate(prompts):
        ids = encode_prompt(tokenizer, text, True)
        res = generate(runner.forward, ids, max_new_tokens=cfg.max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
        seqs.append((len(ids), ids + res.completion_ids))
        on_progress("continuations", i + 1, len(prompts))
    on_progress("acceptance", 0, 1)
    src = read_source(manifest.recipe.model.source, runner.max_seq_len)
    base = build_model(src)
    spec = load_drafter(weights, base)
    vocab = drafting_vocabulary(weights, src, manifest.speculative.draft_vocab)  # the program's own id map
    ranks = T.future_ranks(spec, seqs, spec.cfg.draft_depth, vocab)
    on_progress("costs", 0, 1)
    curve = forward_curve(runner, context)
    t_1 = curve[1]
    t_own = step_cost(runner, context)
    cost = T.StepCostModel.calibrate(curve, t_own, Tree(runner.branching), spec.draft_layers / base.args.n_layers)
    # drafts that continue earlier drafts (Hydra, eagle) are replayed exactly for chains (top-k at the last depth only)
    table = T.estimate(ranks, cost, T.candidate_trees(spec.cfg.draft_depth, max_size, chains_only=spec.chains_only))
    ar_tps = 1.0 / t_1
    own = tuple(runner.branching)
    lookup = None  # the hybrid draft replays exactly on chains only (a product tree's other candidates follow the match)
    if all(k == 1 for k in own):
        tpc = T.replay_lookup([(ids[:n], ids[n:]) for n, ids in seqs], ranks, len(own))
        lookup = {"tree": list(own), "tokens_per_call": {n: round(v, 3) for n, v in tpc.items()}, "best": max(tpc, key=tpc.get)}
    return {
        "device_costs_ms": {
            "forward_1_token": round(1000 * t_1, 3),
            "forward_by_rows": {n: round(1000 * t, 3) for n, t in curve.items()},
            "spec_step_own_tree": round(1000 * t_own, 3),
            "step_beyond_its_rows": round(1000 * cost.t_extra, 3),
        },
        "context": context,
        "own_tree": list(runner.branching),
        "ar_tokens_per_s": round(ar_tps, 2),
        "lookup": lookup,
        "trees": [
            {
                "branching": list(e.branching),
                "size": e.size,
                "tokens_per_call": round(e.tokens_per_call, 3),
                "ms_per_call": round(e.ms_per_call, 3),
                "tokens_per_s": round(e.tokens_per_s, 2),
                "vs_ar": round(e.tokens_per_s / ar_tps, 3),
            }
            for e in table
        ],
    }
