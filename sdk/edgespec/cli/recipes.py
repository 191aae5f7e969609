"""Commands that run a recipe: `export`, `train`, `normsearch`, `distill`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edgespec.cli.terminal import RECIPE_ARGS, friendly, overrides_help, progress_bar, quiet_runtime_logs
from edgespec.errors import EdgespecError


@click.command(epilog=overrides_help("export", "quant.scheme=fp32 validate.enabled=false -o bundles/fp32"))
@RECIPE_ARGS
@click.option(
    "-o",
    "--outdir",
    default="bundles/default",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Bundle directory to write: new, empty, or a bundle (replaced only by a complete, validated bundle, on Linux in one atomic swap; a killed export keeps it). A directory holding anything else is refused.",
)
@friendly
def export(recipe_args: tuple[str, ...], outdir: str) -> None:
    """Run RECIPE with FIELD=VALUE overrides and write a bundle."""
    from edgespec.config import recipe_from_args

    cfg = recipe_from_args(recipe_args)
    quiet_runtime_logs()
    from edgespec import tasks
    from edgespec.bundle import check_output

    check_output(outdir)  # before the bar and the slow part
    stages = tasks.export_stages(cfg)
    with progress_bar(len(stages), "export", "stage", bar_format="{desc}: {n_fmt}/{total_fmt} {bar} [{elapsed}] {postfix}") as bar:

        def on_stage(name: str) -> None:
            if name != stages[0]:
                bar.update(1)
            bar.set_postfix_str(name)

        def on_progress(phase: str, done: int, total: int) -> None:
            bar.set_postfix_str(f"validate: {phase} {done}/{total}")

        result = tasks.export_recipe(cfg, outdir, on_stage=on_stage, on_progress=on_progress)
        bar.update(1)
    click.echo(tasks.task_of_recipe(cfg).export_summary(result))


@click.command(epilog=overrides_help("train", "train.data=data/distill/train.jsonl train.steps=120 train.out_dir=runs/s1"))
@RECIPE_ARGS
@friendly
def train(recipe_args: tuple[str, ...]) -> None:
    """Train the drafter of RECIPE with FIELD=VALUE overrides (the train section), and in
    Shared mode (drafter.mode=shared) fine-tune the model with it: one set of adapters serves
    the main stream and the streams, a task fine-tune that drafts itself (train.data: a JSONL
    of prompt/response pairs, or task:NAME). drafter.kind=medusa|hydra for heads, eagle for a
    draft layer, instead of streams. Resumes from train.out_dir/ckpt.pt.

    \b
    Multi-process:
      torchrun --nproc_per_node N $(which edgespec) train [RECIPE] [FIELD=VALUE]...
    """
    from edgespec.config import recipe_from_args

    cfg = recipe_from_args(recipe_args)
    quiet_runtime_logs()
    from edgespec.output_dir import claim_dir
    from edgespec.speculative.train import RUN_FILES, train_from_recipe

    claim_dir(cfg.train.out_dir, RUN_FILES, "train.out_dir")  # before the bar
    with progress_bar(cfg.train.steps, "train", "step") as bar:

        def on_step(step: int, log) -> None:
            bar.n = step
            bar.set_postfix_str(f"loss {log.loss[-1]:.3f}")
            bar.refresh()

        summary = train_from_recipe(cfg, on_status=lambda s: bar.set_description(f"train [{s}]"), on_step=on_step)
    click.echo(json.dumps(summary))


@click.command(epilog=overrides_help("distill", "distill.prompts=200 --source smollm2-135m-instruct --out data/distill/shards"))
@RECIPE_ARGS
@click.option("--bundle", type=click.Path(), help="Teacher: this bundle's program, one prompt at a time; --out is a JSONL file.")
@click.option(
    "--source",
    help="Teacher: this model (a recipe's model.source, e.g. smollm2-135m-instruct) in eager bf16, distill.batch prompts at once, "
    "with top-K probabilities; --out is a directory of shards.",
)
@click.option("--suites", help="Alias of distill.suites: comma-separated training prompt suites (edgespec.corpus.prompts). Default: all.")
@click.option("--split", type=click.Choice(["train", "heldout"]), help="Alias of distill.split.")
@click.option("--n", "n_prompts", type=click.IntRange(min=1), help="Alias of distill.prompts (number of prompts).")
@click.option("--max-new-tokens", type=click.IntRange(min=1), help="Alias of distill.max_new_tokens.")
@click.option("--batch", type=click.IntRange(min=1), help="Alias of distill.batch (--source: sequences decoded at once).")
@click.option("--top-k", type=click.IntRange(min=1), help="Alias of distill.top_k (--source: probabilities kept per response position).")
@click.option("--shard-size", type=click.IntRange(min=1), help="Alias of distill.shard_size (--source: prompts per shard file).")
@click.option("--max-prompt-tokens", type=click.IntRange(min=8), help="Alias of distill.max_prompt_tokens (--source: longer prompts are skipped).")
@click.option("--workers", type=click.IntRange(min=1, max=64), help="Alias of distill.workers (--source: processes, shard i to worker i mod N).")
@click.option("--out", required=True, type=click.Path(), help="Where the data goes (appended to / resumed).")
@friendly
def distill(recipe_args, bundle, source, suites, split, n_prompts, max_new_tokens, batch, top_k, shard_size, max_prompt_tokens, workers, out) -> None:
    """Self-distillation data: the model's own greedy answers to training prompts, from a
    bundle's program (--bundle) or from the eager model in batches with soft labels (--source).
    The prompts get the chat template when the recipe's model.chat_template is true."""
    from edgespec.cli.terminal import aliases
    from edgespec.config import recipe_from_args

    if (bundle is None) == (source is None):
        raise EdgespecError("give either --bundle (the program as teacher) or --source (the eager model as teacher)")
    names = [s.strip() for s in suites.split(",") if s.strip()] if suites else None
    flags = dict(suites=names, split=split, prompts=n_prompts, max_new_tokens=max_new_tokens, batch=batch, top_k=top_k)
    flags |= dict(shard_size=shard_size, max_prompt_tokens=max_prompt_tokens, workers=workers)
    cfg = recipe_from_args((*recipe_args, *aliases("distill", **flags)))
    quiet_runtime_logs()
    from edgespec.corpus.distill import distill_from_model, selected_prompts

    prompts = selected_prompts(cfg.distill)
    with progress_bar(len(prompts), "distill", "prompt") as bar:
        if source is not None:

            def on_tokens(n: int, total=[0]) -> None:  # noqa: B006 (a running count)
                total[0] += n
                bar.update(1)
                bar.set_postfix_str(f"{total[0] / max(bar.format_dict['elapsed'], 1e-9) * 60:,.0f} response tok/min", refresh=False)

            stats = distill_from_model(source, prompts, out, cfg.distill, cfg.model.chat_template, on_tokens=on_tokens)
        else:
            stats = _distill_program(bundle, prompts, out, cfg.distill.max_new_tokens, cfg.model.chat_template, on_done=lambda n: bar.update(1))
    click.echo(json.dumps(stats))


def _distill_program(bundle: str, prompts, out: str, max_new_tokens: int, chat_template: bool, on_done) -> dict:
    from edgespec.corpus.distill import distill as run
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.generate import generate
    from edgespec.runtime.session import open_bundle

    _, tokenizer, runner = open_bundle(bundle)

    def respond(ids: list[int]) -> tuple[list[int], bool]:
        res = generate(runner.forward, ids, max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
        return res.completion_ids, res.stopped_by_eos

    encode = lambda t: encode_prompt(tokenizer, t, chat_template)  # noqa: E731
    return run(respond, encode, prompts, out, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids, on_done=on_done)


@click.command(epilog=overrides_help("normsearch", "numerics.format=bf16 -o runs/normsearch-bf16"))
@RECIPE_ARGS
@click.option("-o", "--outdir", default="runs/normsearch", show_default=True, type=click.Path(file_okay=False), help="Where the report goes.")
@friendly
def normsearch(recipe_args: tuple[str, ...], outdir: str) -> None:
    """Per-layer pre-normalizer search for the model of RECIPE with FIELD=VALUE overrides (the
    numerics section); writes a table and a plot."""
    from edgespec.config import recipe_from_args

    cfg = recipe_from_args(recipe_args)
    quiet_runtime_logs()
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.numerics.search import REPORT_NAMES, norm_layers, run_normsearch, write_search_report
    from edgespec.output_dir import claim_dir

    claim_dir(outdir, REPORT_NAMES, "report directory")  # before the search

    src = read_source(cfg.model.source, cfg.model.max_seq_len)
    model = build_model(src)
    with progress_bar(len(norm_layers(model)), "normsearch", "layer") as bar:
        result = run_normsearch(model, tokenizer_of(src), cfg.numerics, chat_template=cfg.model.chat_template, on_layer=lambda name: bar.update(1))
    files = write_search_report(result, outdir)
    click.echo(json.dumps({"report": [str(Path(outdir) / f) for f in files], **result["summary"]}))


COMMANDS = (export, train, normsearch, distill)
