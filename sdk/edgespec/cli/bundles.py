"""Commands over a written bundle: `info`, `verify`, `validate`, `tune`, `package`, `unpack`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from edgespec.cli.terminal import OVERRIDES, THREADS, aliases, bundle_recipe, friendly, overrides_help, phase_bars, quiet_runtime_logs, set_thread_count
from edgespec.config import SUITE_NAMES

BUNDLE = click.option("--bundle", "-b", required=True, type=click.Path(), help="Bundle directory from `edgespec export`.")


@click.command()
@BUNDLE
@click.option("--verify/--no-verify", default=True, show_default=True, help="Check file checksums.")
@friendly
def info(bundle: str, verify: bool) -> None:
    """What is in a bundle, and the command that runs it."""
    from edgespec.bundle import PROGRAM, read_manifest, verify_checksums
    from edgespec.tasks import task_of_manifest

    m = read_manifest(bundle)
    if verify:
        verify_checksums(bundle, m)
    task = task_of_manifest(m)
    click.echo(f"bundle      {Path(bundle).resolve()} (schema {m.schema_version}{', checksums ok' if verify else ''})")
    click.echo(f"task        {m.task}: {task.DESCRIPTION}")
    for line in task.describe(m):
        click.echo(line)
    q = getattr(m, "quantization", None)
    weights = q.weights_line() if q is not None else None  # None: a bundle from before 2026-12-06
    click.echo(f"precision   {m.precision}: {weights}" if weights else f"precision   {m.precision} (group size {m.recipe.quant.group_size})")
    click.echo(f"methods     {', '.join(m.methods)}")
    for name, f in m.files.items():
        click.echo(f"file        {name:<16} {f.bytes / 1e6:8.2f} MB  sha256 {f.sha256[:16]}…")
    click.echo(f"runtime     {_runtime_line(Path(bundle), m)}")
    quiet_runtime_logs()  # the plan's line loads the program
    line = _kernel_line(Path(bundle) / PROGRAM)
    if line:
        click.echo(line)


def _runtime_line(bundle: Path, m) -> str:
    """Which runtimes run the program: from the manifest's record or, for a bundle from before
    it was kept, from the program itself."""
    from edgespec.bundle import PROGRAM, runtime_needs
    from edgespec.errors import EdgespecError

    if m.runtime is not None:
        return m.runtime.runtimes_line()
    try:
        return runtime_needs((bundle / PROGRAM).read_bytes()).runtimes_line()
    except (EdgespecError, OSError) as e:
        return f"unknown: {e}"


def _kernel_line(program: Path) -> str | None:
    """For a program on edgespec's block kernel: the kernel's SIMD paths this CPU runs (the
    plan picks among them by timing when the program first loads)."""
    from edgespec.errors import EdgespecError
    from edgespec.runtime.runner import uses_edgespec_ops

    if not program.is_file() or not uses_edgespec_ops(program):
        return None
    from edgespec.kernels import plan

    try:
        paths = plan.supported_paths()
    except EdgespecError as e:
        return f"kernel      edgespec's block kernel, not built on this machine: {e}"
    note = " (no SIMD path for this CPU: expect ~16x slower linears)" if paths == ["portable"] else ""
    return f"kernel      edgespec's block kernel; paths on this CPU: {', '.join(paths)}{note}\nplan        {_plan_state(program)}"


def _plan_state(program: Path) -> str:
    """The kernel plan cached for this program on this CPU at the default thread count: when it
    was timed and under what load, or that it is timed at the first load."""
    from edgespec.errors import EdgespecError
    from edgespec.kernels.plan import cached_plan
    from edgespec.runtime.runner import ProgramRunner, threads

    try:
        runner = ProgramRunner(program, plan_kernels=False)
        plan = cached_plan(runner.plan_forward, threads())
    except EdgespecError as e:
        return f"unknown ({e})"
    if plan is None:
        return f"not timed on this CPU at {threads()} threads yet: the first load times it (1-3 s)"
    chosen = "; ".join(f"{name} {r.choice.label()}" for name, r in plan.regimes.items())
    return f"{plan.threads} threads, {plan.when()}; {chosen}"


@click.command()
@BUNDLE
@click.option("--json", "as_json", is_flag=True, help="Print the program's metadata as JSON.")
@friendly
def verify(bundle: str, as_json: bool) -> None:
    """Check a bundle: schema, every file's SHA-256, and that the program loads and answers its
    metadata methods consistently with the manifest (exit 2 with the reason otherwise)."""
    from edgespec.bundle import read_manifest, verify_checksums
    from edgespec.tasks import task_of_manifest

    m = read_manifest(bundle)
    verify_checksums(bundle, m)
    quiet_runtime_logs()
    meta, line = task_of_manifest(m).verify(Path(bundle), m)
    needs = _checked_runtime_needs(Path(bundle), m)
    meta = meta | {"runtime": {"operators": list(needs.operators), "delegates": list(needs.delegates), "beyond_executorch": list(needs.extra_operators())}}
    click.echo(
        json.dumps(meta, indent=1)
        if as_json
        else f"ok: {Path(bundle).resolve()} schema {m.schema_version}, {len(m.files)} files match their SHA-256, {line}\nruntime: {needs.runtimes_line()}"
    )


def _checked_runtime_needs(bundle: Path, m):
    """The program's operators and delegates, read from it; a manifest that records others is
    an error (the program was changed behind it)."""
    from edgespec.bundle import PROGRAM, runtime_needs
    from edgespec.errors import EdgespecError

    needs = runtime_needs((bundle / PROGRAM).read_bytes())
    if m.runtime is not None and m.runtime != needs:
        raise EdgespecError(f"{bundle}: the manifest's runtime record ({m.runtime.runtimes_line()}) is not what the program calls ({needs.runtimes_line()})")
    return needs


@click.command(epilog=overrides_help("validate", "validate.runs=3 validate.gates.min_speedup=1.1", bundle=True))
@BUNDLE
@OVERRIDES
@click.option(
    "--suite",
    "suites",
    multiple=True,
    help=f"validate.suites: a built-in suite ({', '.join(SUITE_NAMES)}), task:NAME (a fine-tune task's held-out split: task:sql_chinook, task:translation_de) or a .jsonl file; repeat for several.",
)
@click.option("--prompts-per-suite", type=click.IntRange(min=1), help="validate.prompts_per_suite.")
@click.option("--runs", type=click.IntRange(min=1, max=100), help="validate.runs (repetitions per prompt; median).")
@click.option("--seed", type=int, help="validate.seed (which prompts each suite draws).")
@click.option("--lookup", type=click.IntRange(min=0, max=8), help="validate.lookup (also measure the hybrid draft).")
@click.option(
    "--reference",
    type=click.Choice(["fp32", "none"]),
    help="validate.reference (none: no fp32 model, so its gates fail unless turned off: --min-score-ratio 0 validate.gates.min_top1_agreement=0 validate.gates.max_perplexity_ratio=0).",
)
@click.option("--min-speedup", type=click.FloatRange(min=0.0), help="validate.gates.min_speedup.")
@click.option("--min-score-ratio", type=click.FloatRange(min=0.0), help="validate.gates.min_score_ratio (mean task score over the fp32 model's; 0: off).")
@click.option("--fidelity-chunks", type=click.IntRange(min=0, max=200), help="validate.fidelity_chunks (512-token held-out chunks; 0: skip fidelity).")
@click.option("-o", "--out", type=click.Path(file_okay=False), help="Write the report (report.json or asr_report.json, report.md, plots) here.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@friendly
def validate(bundle, overrides, suites, prompts_per_suite, runs, seed, lookup, reference, min_speedup, min_score_ratio, fidelity_chunks, out, as_json) -> None:
    """Run the bundle's program on its task's suites and check the gates (exit 1 if one fails)."""
    from edgespec.bundle import read_manifest
    from edgespec.tasks import task_of_manifest

    manifest = read_manifest(bundle)
    if out:
        from edgespec.manifest import LAYOUT
        from edgespec.output_dir import claim_dir

        claim_dir(out, LAYOUT.is_report, "report directory")  # before the slow part
    flags = dict(suites=suites, prompts_per_suite=prompts_per_suite, runs=runs, seed=seed, lookup=lookup, reference=reference, fidelity_chunks=fidelity_chunks)
    gates = aliases("validate.gates", min_speedup=min_speedup, min_score_ratio=min_score_ratio)
    recipe = bundle_recipe(manifest, [*aliases("validate", **flags), *gates, *overrides])
    task = task_of_manifest(manifest)
    quiet_runtime_logs()
    with phase_bars("validate") as on_progress:
        report = task.run_validation(Path(bundle), recipe, on_progress)
    if out:
        task.write_validation_report(report, Path(out))
    click.echo(json.dumps(report, indent=1, ensure_ascii=False) if as_json else task.render_validation(report))
    if not report["passed"]:
        sys.exit(1)


@click.command(epilog=overrides_help("tune", "tune.max_size=8 tune.context=512", bundle=True))
@BUNDLE
@OVERRIDES
@click.option(
    "--prompts",
    "n_prompts",
    type=click.IntRange(min=1),
    help="tune.prompts: held-out prompts whose greedy continuations give the acceptance (a task program: its task's dev items).",
)
@click.option("--max-new-tokens", type=click.IntRange(min=8), help="tune.max_new_tokens.")
@click.option("--max-size", type=click.IntRange(min=2, max=64), help="tune.max_size: largest tree (nodes) to consider.")
@click.option("--context", type=click.IntRange(min=1), help="tune.context: context position at which call costs are measured.")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1), help="Rows to print.")
@THREADS
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@friendly
def tune(bundle, overrides, n_prompts, max_new_tokens, max_size, context, top, threads, as_json) -> None:
    """Pick the draft tree with the highest expected tokens/s on this device.

    Measures the program's cost per call for every tree size and the drafter's acceptance on
    greedy continuations of held-out prompts, then ranks candidate trees (cost model in
    docs/speculative-streaming.md). Re-export with the winner as the recipe's tree.
    """
    from edgespec.bundle import read_manifest

    flags = dict(prompts=n_prompts, max_new_tokens=max_new_tokens, max_size=max_size, context=context)
    recipe = bundle_recipe(read_manifest(bundle), [*aliases("tune", **flags), *overrides])
    quiet_runtime_logs()
    set_thread_count(threads)
    from edgespec.harness.tune import tune_bundle

    with phase_bars("tune") as on_progress:
        out = tune_bundle(bundle, recipe.tune, on_progress=on_progress)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    c, ar_tps = out["device_costs_ms"], out["ar_tokens_per_s"]
    curve = ", ".join(f"{n} {t:.2f}" for n, t in c["forward_by_rows"].items())
    click.echo(
        f"cost per call (ms): forward by rows {curve}; spec_step on {out['own_tree']} {c['spec_step_own_tree']:.2f} ({c['step_beyond_its_rows']:.2f} beyond its rows)"
    )
    click.echo(f"{'tree':<16}{'nodes':>6}{'tok/call':>10}{'ms/call':>9}{'tok/s':>9}{'vs AR':>7}")
    for e in out["trees"][:top]:
        click.echo(f"{str(e['branching']):<16}{e['size']:>6}{e['tokens_per_call']:>10.3f}{e['ms_per_call']:>9.2f}{e['tokens_per_s']:>9.1f}{e['vs_ar']:>7.3f}")
    best = out["trees"][0]
    click.echo(f"best: tree {best['branching']} -> {best['tokens_per_s']:.1f} tok/s expected ({best['vs_ar']:.2f}x autoregressive {ar_tps:.1f} tok/s)")
    if best["vs_ar"] < 1.05:  # edgespec.runtime.adaptive's bar
        click.echo(
            "the drafter alone does not pay on this CPU (every tree under 1.05x autoregressive): `edgespec generate` (--mode auto) "
            "speculates only where a suffix match drafts, or decodes one token per call"
        )
    if out["lookup"] is not None:
        lk = out["lookup"]
        by = ", ".join(f"{n}: {v:.3f}" for n, v in lk["tokens_per_call"].items())
        click.echo(f"hybrid draft on {lk['tree']}, tokens per call by validate.lookup (0: the drafter alone): {by} -> best validate.lookup={lk['best']}")


@click.command()
@BUNDLE
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="Zip file to write (atomically).")
@friendly
def package(bundle: str, out: str) -> None:
    """Pack a verified bundle into one zip for transfer (scripts/push_bundle.sh pushes a directory)."""
    from edgespec.bundle import package_zip

    path = package_zip(bundle, out)
    click.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


@click.command()
@click.argument("zip_file", type=click.Path())
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False), help="Bundle directory to create.")
@click.option("--overwrite", is_flag=True, help="Replace an existing directory at --out.")
@friendly
def unpack(zip_file: str, out: str, overwrite: bool) -> None:
    """Unpack a bundle zip made by `edgespec package`, checking every file against the manifest
    (nothing is written unless all of it checks out)."""
    from edgespec.bundle import unpack_zip

    m = unpack_zip(zip_file, out, overwrite=overwrite)
    click.echo(f"unpacked {len(m.files)} files to {Path(out).resolve()}; their SHA-256 match the manifest")


COMMANDS = (info, verify, validate, tune, package, unpack)
