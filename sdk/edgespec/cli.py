"""The `edgespec` command line: a thin shell over the library.

Commands that read a recipe take `[RECIPE] [FIELD=VALUE]...` (dotted overrides of recipe
fields, parsed and checked in edgespec.config); other flags map 1:1 to function arguments.
Heavy modules (torch, torchao, ExecuTorch) are imported inside the commands, so
`edgespec --help` is instant.
Every `EdgespecError` is printed as one line `error: ...` with exit code 2 (1 when a
validation gate failed).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from pathlib import Path

import click

from edgespec.config import SUITE_NAMES
from edgespec.errors import EdgespecError


def _friendly(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EdgespecError as e:
            # one line, whatever the message quotes (user text may hold line breaks)
            click.echo("error: " + str(e).replace("\r", "\\r").replace("\n", "\\n"), file=_err())
            sys.exit(getattr(e, "exit_code", 2))
        except OSError as e:  # the machine's, not the input's: disk full, read-only, permissions
            where = f" ('{e.filename}')" if e.filename else ""
            click.echo(
                f"error: {e.strerror or e}{where}; free the space or fix the path, then run again (outputs are written to temporary names and renamed, so no half-written bundle is left)",
                file=_err(),
            )
            sys.exit(1)

    return wrapper


_TERMINAL: list = []  # the stream edgespec's own lines go to while runtime logs are hidden


def _err():
    """Where edgespec's own progress, notes and `error:` lines go: the terminal's stderr."""
    return _TERMINAL[-1] if _TERMINAL else sys.stderr


THREADS = click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="ExecuTorch threads (0: its default, one per core); set before the program loads.",
)


def _set_threads(n: int) -> None:
    from edgespec.runtime.program import set_threads

    set_threads(n)


def _quiet_runtime_logs() -> None:
    """Keep the terminal to edgespec's own lines for the rest of the command.

    ExecuTorch's runtime logs (cpuinfo, "No temp allocator provided", ...) reach Python's
    `sys.stderr` through its bindings' stream redirection, or file descriptor 2 directly, and
    torch's warnings go through `logging`/`warnings`. Unless `edgespec --verbose`, both
    `sys.stderr` and descriptor 2 point at /dev/null until the command ends; edgespec's own
    lines (`_err()`) keep going to the terminal through a duplicate of the original stream.
    """
    import logging
    import os
    import warnings

    ctx = click.get_current_context()
    if ctx.find_root().params.get("verbose") or ctx.meta.get("edgespec.quiet"):
        return
    ctx.meta["edgespec.quiet"] = True
    warnings.filterwarnings("ignore")
    for name in ("torch", "torchao", "executorch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    saved_stream = sys.stderr
    saved_stream.flush()
    saved_fd = os.dup(2)
    null_fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null_fd, 2)
    os.close(null_fd)
    try:
        real = saved_stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a test runner's in-memory stream
        real = False
    terminal = open(os.dup(saved_fd), "w", buffering=1, encoding=saved_stream.encoding, errors="backslashreplace") if real else saved_stream
    _TERMINAL.append(terminal)
    sys.stderr = open(os.devnull, "w")

    def restore() -> None:
        sys.stderr.close()
        sys.stderr = saved_stream
        _TERMINAL.pop()
        if terminal is not saved_stream:
            terminal.close()
        os.dup2(saved_fd, 2)
        os.close(saved_fd)

    ctx.call_on_close(restore)


RECIPE_ARGS = click.argument("recipe_args", nargs=-1, metavar="[RECIPE] [FIELD=VALUE]...")
OVERRIDES_HELP = """RECIPE is a YAML file (default: the built-in SmolLM2-135M recipe; a first argument with
'=' starts the overrides). FIELD=VALUE sets the recipe field at that dotted path, the value
read as YAML (true/false, numbers such as 1e-3, flow lists [1,1,1]; a string field takes the
text as is) and checked exactly like the file.

\b
Examples:
  edgespec {cmd} recipes/smollm2-135m.yaml {example}
  edgespec {cmd} {example}"""


def _overrides_help(cmd: str, example: str) -> str:
    return OVERRIDES_HELP.format(cmd=cmd, example=example)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edgespec")
@click.option("-v", "--verbose", is_flag=True, help="Also show ExecuTorch's and torch's own log lines and warnings.")
def main(verbose: bool) -> None:
    """edgespec: export a pretrained LM (or the Conformer speech recognizer of
    recipes/conformer-hama.yaml) to a fast, verified ExecuTorch bundle for phones."""


@main.command(epilog=_overrides_help("export", "quant.scheme=fp32 validate.enabled=false -o bundles/fp32"))
@RECIPE_ARGS
@click.option(
    "-o", "--outdir", default="bundles/default", show_default=True, type=click.Path(file_okay=False), help="Bundle directory to write (replaced atomically)."
)
@_friendly
def export(recipe_args: tuple[str, ...], outdir: str) -> None:
    """Run RECIPE with FIELD=VALUE overrides and write a bundle."""
    from edgespec.config import recipe_from_args

    cfg = recipe_from_args(recipe_args)
    _quiet_runtime_logs()
    from tqdm import tqdm

    from edgespec.config import AsrRecipe

    if isinstance(cfg, AsrRecipe):
        from edgespec.speech.pipeline import STAGES
        from edgespec.speech.pipeline import export_asr_bundle as run_export
    else:
        from edgespec.pipeline import STAGES
        from edgespec.pipeline import export_bundle as run_export

    with tqdm(total=len(STAGES), desc="export", unit="stage", file=_err(), bar_format="{desc}: {n_fmt}/{total_fmt} {bar} [{elapsed}] {postfix}") as bar:

        def on_stage(name: str) -> None:
            if name != STAGES[0]:
                bar.update(1)
            bar.set_postfix_str(name)

        def on_progress(phase: str, done: int, total: int) -> None:
            bar.set_postfix_str(f"validate: {phase} {done}/{total}")

        result = run_export(cfg, outdir, on_stage=on_stage, on_progress=on_progress)
        bar.update(1)
    m = result.manifest
    size_mb = m["files"]["model.pte"]["bytes"] / 1e6
    total = sum(result.stage_seconds.values())
    parts = ", ".join(f"{k} {v:.0f}s" for k, v in result.stage_seconds.items())
    v = m.get("validation")
    checked = ""
    if v and m.get("task") == "asr":
        checked = f"; validated on {v['utterances']} utterances: PER {100 * v['per']:.1f}% (fp32 eager {100 * v['per_eager_fp32']:.1f}%), streaming {100 * v['per_chunked']:.1f}%, WER {100 * v['wer']:.1f}%, RTF {v['rtf']:.4f}, gates passed; report {result.bundle_dir}/report.md"
    elif v:
        spec = f", spec {v['spec']['tokens_per_s']:.1f} tok/s ({v['spec']['speedup']:.2f}x, lossless {v['lossless']})" if v.get("spec") else ""
        ref = f" (fp32 base {v['reference_score']:.3f})" if v.get("reference_score") is not None else ""
        f = v.get("fidelity")
        fid = f", held-out vs fp32: top-1 {f['top1_agreement']:.1%}, perplexity {f['perplexity_ratio']:.3f}x, KL {f['kl_mean']:.4f}" if f else ""
        checked = f"; validated on {v['prompts']} prompts: score {v['score']:.3f}{ref}{fid}, AR {v['ar_tokens_per_s']:.1f} tok/s{spec}, gates passed; report {result.bundle_dir}/report.md"
    click.echo(f"wrote {result.bundle_dir} ({cfg.quant.scheme}, model.pte {size_mb:.1f} MB) in {total:.0f}s [{parts}]{checked}")


@main.command()
@click.option("--bundle", "-b", required=True, type=click.Path(), help="A speech bundle (edgespec export recipes/conformer-hama.yaml).")
@click.argument("audio", nargs=-1, required=True, type=click.Path())
@click.option("--stream", is_flag=True, help="Recognize chunk by chunk with the bundle's streaming settings (any length).")
@click.option("--resample", is_flag=True, help="Resample audio at another rate to the model's (linear interpolation) instead of refusing it.")
@click.option("--phonemes", is_flag=True, help="Print the phonemes instead of words (no P2G).")
@THREADS
@click.option("--json", "as_json", is_flag=True, help="One JSON object per file: text, phonemes, timings.")
@_friendly
def transcribe(bundle: str, audio: tuple[str, ...], stream: bool, resample: bool, phonemes: bool, threads: int, as_json: bool) -> None:
    """Transcribe 16-bit PCM WAV files with a speech bundle: phonemes by the program, words by hama's P2G."""
    _quiet_runtime_logs()
    import json

    from edgespec.speech.audio import read_wav
    from edgespec.speech.librivox import phonemes_to_text
    from edgespec.speech.recognize import Recognizer

    rec = Recognizer(bundle, threads=threads)
    s = rec.manifest["streaming"]
    for path in audio:
        wave = read_wav(path, rec.sample_rate, resample=resample)
        r = rec.recognize_streaming(wave, s["chunk_frames"], s["left_frames"], s["right_frames"]) if stream else rec.recognize(wave)
        text = r.transcript.phoneme_text if phonemes else phonemes_to_text(r.transcript.phoneme_text)
        if as_json:
            out = {
                "file": path,
                "text": text,
                "phonemes": r.transcript.phoneme_text,
                "audio_seconds": round(r.audio_seconds, 3),
                "compute_seconds": round(r.seconds, 4),
                "rtf": round(r.rtf, 4),
            }
            if stream:
                out["chunk_ms"] = [round(1000 * t, 2) for t in r.chunk_seconds]
            click.echo(json.dumps(out, ensure_ascii=False))
        else:
            click.echo(text if len(audio) == 1 else f"{path}: {text}")


def _load_bundle(bundle: str, verify: bool = False):
    from edgespec.runtime.session import open_bundle

    return open_bundle(bundle, verify=verify)


def _prompt_ids(tokenizer, prompt: str, chat_template: bool) -> list[int]:
    from edgespec.runtime.session import prompt_ids

    return prompt_ids(tokenizer, prompt, chat_template)


def _decoder(runner, mode: str, lookup: int = 0):
    from edgespec.runtime.session import decoder

    return decoder(runner, mode, lookup)


MODE = click.option(
    "--mode",
    type=click.Choice(["auto", "spec", "ar"]),
    default="auto",
    show_default=True,
    help="spec: speculative (one call verifies and drafts); ar: one token per call; auto: spec when the program has it.",
)
NGRAM = click.option(
    "--no-repeat-ngram-size", default=0, show_default=True, type=click.IntRange(min=0), help="Never repeat an n-gram of this size (prompt included); 0 = off."
)
LOOKUP = click.option(
    "--lookup",
    default=0,
    show_default=True,
    type=click.IntRange(min=0, max=8),
    help="spec: also draft from the context: what followed the earliest occurrence of the longest repeated suffix, when it is at least this many tokens (0 = streams only).",
)


@main.command()
@click.option("--bundle", required=True, type=click.Path(), help="Bundle directory from `edgespec export`.")
@click.option("--prompt", help="User prompt (or use --input for a batch).")
@click.option("--input", "input_path", type=click.Path(dir_okay=False), help='Batch: a JSONL file, one {"id", "prompt"} object per line.')
@click.option("--output", "output_path", type=click.Path(dir_okay=False), help="Batch: JSONL to append results to (resumable: finished ids are skipped).")
@click.option("--max-new-tokens", default=128, show_default=True, type=click.IntRange(min=1))
@click.option("--temperature", default=0.0, show_default=True, type=click.FloatRange(min=0.0), help="0 = greedy.")
@click.option("--seed", default=0, show_default=True, type=int, help="Sampling seed (temperature > 0).")
@MODE
@LOOKUP
@NGRAM
@click.option("--no-chat-template", is_flag=True, help="Feed the prompt as raw text.")
@click.option("--sequential", is_flag=True, help="Batch: no pipelining (read, decode, write one after another).")
@click.option(
    "--reuse-prefix/--no-reuse-prefix",
    default=True,
    show_default=True,
    help="Batch: prefill only where a prompt differs from what the KV cache holds (shared system prompt or context).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
@click.option("--verify", is_flag=True, help="Check every bundle file's SHA-256 against the manifest before loading.")
@THREADS
@_friendly
def generate(
    bundle: str,
    prompt: str | None,
    input_path: str | None,
    output_path: str | None,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    mode: str,
    lookup: int,
    no_repeat_ngram_size: int,
    no_chat_template: bool,
    sequential: bool,
    reuse_prefix: bool,
    as_json: bool,
    verify: bool,
    threads: int,
) -> None:
    """Generate a completion with the bundle's program, streaming text; or, with --input and
    --output, a whole JSONL batch through an asynchronous pipeline."""
    if (prompt is None) == (input_path is None):
        raise EdgespecError("give either --prompt or --input (with --output)")
    if input_path is not None and output_path is None:
        raise EdgespecError("--input needs --output (the JSONL file results are appended to)")
    _quiet_runtime_logs()
    _set_threads(threads)
    from edgespec.models.tokenizer import StreamDecoder

    _, tokenizer, runner = _load_bundle(bundle, verify)
    mode, run = _decoder(runner, mode, lookup)
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        max_seq_len=runner.max_seq_len,
        eos_ids=runner.eos_ids,
        temperature=temperature,
        seed=seed,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    if input_path is not None:
        if reuse_prefix:
            from edgespec.runtime.generate import CacheState

            kwargs["cache"] = CacheState()
        _generate_batch(run, tokenizer, input_path, output_path, kwargs, not no_chat_template, not sequential)
        return
    ids = _prompt_ids(tokenizer, prompt, not no_chat_template)
    stream = StreamDecoder(tokenizer)

    def on_token(tok: int) -> None:
        if not as_json:
            click.echo(stream.push(tok), nl=False)

    res = run(ids, on_token=on_token, **kwargs)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "mode": mode,
                    "prompt_ids": res.prompt_ids,
                    "completion_ids": res.completion_ids,
                    "text": tokenizer.decode(res.completion_ids),
                    "stopped_by_eos": res.stopped_by_eos,
                    "prefill_s": round(res.prefill_s, 4),
                    "decode_s": round(res.decode_s, 4),
                    "prefill_tokens_per_s": round(res.prefill_tokens_per_s, 2),
                    "decode_tokens_per_s": round(res.decode_tokens_per_s, 2),
                    "decode_calls": len(res.step_times_s),
                    "tokens_per_call": round(res.mean_tokens_per_call, 3),
                }
            )
        )
    else:
        click.echo()
        if mode == "spec":
            click.echo(f"[spec: {res.decode_tokens_per_s:.1f} tok/s decode, {res.mean_tokens_per_call:.2f} tokens per call]", file=_err())


def _generate_batch(run, tokenizer, input_path: str, output_path: str, kwargs: dict, chat: bool, pipelined: bool) -> None:
    from tqdm import tqdm

    from edgespec.runtime.batch import run_batch

    p = Path(input_path)
    total = sum(1 for line in open(p, encoding="utf-8", errors="replace") if line.strip()) if p.is_file() else 0
    with tqdm(total=total, desc="generate", unit="prompt", file=_err()) as bar:

        def on_item(stats) -> None:
            bar.n = stats.generated + stats.skipped_done + len(stats.errors)
            bar.set_postfix_str(f"{stats.new_tokens} tokens, {len(stats.errors)} errors")
            bar.refresh()

        stats = run_batch(
            run, lambda t: _prompt_ids(tokenizer, t, chat), tokenizer.decode, p, output_path, gen_kwargs=kwargs, pipelined=pipelined, on_item=on_item
        )
    for e in stats.errors:
        where = f"line {e['line']}" if "line" in e else f"id {e['id']}"
        click.echo(f"skipped {where}: {e['error']}", file=_err())
    click.echo(json.dumps(stats.as_dict()))


@main.command()
@click.option("--bundle", required=True, type=click.Path(), help="Bundle directory.")
@click.option(
    "--prompt",
    "prompts",
    multiple=True,
    default=["Write a short story about a robot who learns to paint."],
    show_default=True,
    help="Repeat for several prompts (speedup: median of the per-prompt ratios).",
)
@click.option(
    "--max-new-tokens",
    default=128,
    show_default=True,
    type=click.IntRange(min=1),
    help="Tokens per generation (EOS ignored); decode speed needs at least 2 (the first token comes from prefill).",
)
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(min=0), help="Uncounted generations of every decoder first.")
@click.option("--runs", default=5, show_default=True, type=click.IntRange(min=1), help="Runs per prompt and decoder; the median one is kept.")
@click.option(
    "--mode",
    type=click.Choice(["both", "spec", "ar"]),
    default="both",
    show_default=True,
    help="both: autoregressive and speculative side by side (interleaved runs, alternating order).",
)
@LOOKUP
@THREADS
@click.option("--json", "as_json", is_flag=True, help="Print JSON (fields: docs/benchmarks.md).")
@_friendly
def bench(bundle: str, prompts: tuple[str, ...], max_new_tokens: int, warmup: int, runs: int, mode: str, lookup: int, threads: int, as_json: bool) -> None:
    """Decode and prefill tokens/s, speedup, tokens per call, peak RSS and program size."""
    _quiet_runtime_logs()
    _set_threads(threads)
    from edgespec.runtime.bench import bench_generation

    _, tokenizer, runner = _load_bundle(bundle)
    ids = [_prompt_ids(tokenizer, p, True) for p in prompts]
    modes = ("ar", "spec") if mode == "both" else (mode,)
    if mode == "both" and not runner.has_spec:
        modes = ("ar",)
    decoders = dict(_decoder(runner, m, lookup) for m in modes)
    stats = bench_generation(runner, ids, decoders, max_new_tokens=max_new_tokens, warmup=warmup, runs=runs)
    if as_json:
        click.echo(json.dumps(stats, indent=2))
    else:
        for k, v in stats.items():
            if k == "rows":
                continue
            for kk, vv in v.items() if isinstance(v, dict) else [(None, v)]:
                click.echo(f"{k if kk is None else f'{k}.{kk}':>34}: {'n/a' if vv is None else vv}")


@main.command()
@click.option("--bundle", required=True, type=click.Path(), help="Bundle directory from `edgespec export`.")
@click.option(
    "--suite",
    "suites",
    multiple=True,
    help=f"A built-in suite ({', '.join(SUITE_NAMES)}) or a .jsonl file; repeat for several. Default: the bundle recipe's validate.suites.",
)
@click.option("--prompts-per-suite", type=click.IntRange(min=1), help="Override validate.prompts_per_suite.")
@click.option("--runs", type=click.IntRange(min=1, max=100), help="Override validate.runs (repetitions per prompt; median).")
@click.option("--seed", type=int, help="Override validate.seed (which prompts each suite draws).")
@click.option("--lookup", type=click.IntRange(min=0, max=8), help="Override validate.lookup (also measure prompt-lookup drafting).")
@click.option("--reference", type=click.Choice(["fp32", "none"]), help="Override validate.reference.")
@click.option("--min-speedup", type=click.FloatRange(min=0.0), help="Override validate.gates.min_speedup.")
@click.option(
    "--min-score-ratio", type=click.FloatRange(min=0.0), help="Override validate.gates.min_score_ratio (mean task score over the fp32 model's; 0: off)."
)
@click.option("--fidelity-chunks", type=click.IntRange(min=0, max=200), help="Override validate.fidelity_chunks (512-token held-out chunks; 0: skip fidelity).")
@click.option("-o", "--out", type=click.Path(file_okay=False), help="Write report.json, report.md and plots here.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@_friendly
def validate(
    bundle: str,
    suites: tuple[str, ...],
    prompts_per_suite: int | None,
    runs: int | None,
    seed: int | None,
    lookup: int | None,
    reference: str | None,
    min_speedup: float | None,
    min_score_ratio: float | None,
    fidelity_chunks: int | None,
    out: str | None,
    as_json: bool,
) -> None:
    """Run the bundle's program on the task suites and check the gates (exit 1 if one fails)."""
    from edgespec.bundle import read_manifest
    from edgespec.config import Recipe, from_dict

    manifest = read_manifest(bundle)
    if manifest.get("task") == "asr":
        return _validate_asr(
            bundle,
            manifest,
            out,
            as_json,
            speech_only=not (
                suites
                or prompts_per_suite
                or seed is not None
                or lookup is not None
                or reference
                or min_speedup is not None
                or min_score_ratio is not None
                or fidelity_chunks is not None
            ),
            runs=runs,
        )
    recipe = from_dict(Recipe, manifest["recipe"])
    fields = {
        k: v
        for k, v in {
            "suites": list(suites) or None,
            "prompts_per_suite": prompts_per_suite,
            "runs": runs,
            "seed": seed,
            "lookup": lookup,
            "reference": reference,
            "fidelity_chunks": fidelity_chunks,
        }.items()
        if v is not None
    }
    gates = {k: v for k, v in {"min_speedup": min_speedup, "min_score_ratio": min_score_ratio}.items() if v is not None}
    if gates:
        fields["gates"] = {**recipe.to_dict()["validate"]["gates"], **gates}
    cfg = recipe.replace(validate=fields).validate if fields else recipe.validate
    _quiet_runtime_logs()
    report = _run_validation(bundle, cfg, source=None)
    if out:
        from edgespec.harness.report import write_report

        write_report(report, out)
    if as_json:
        click.echo(json.dumps(report, indent=1))
    else:
        click.echo(_validation_summary(report))
    if not report["passed"]:
        sys.exit(1)


def _validate_asr(bundle: str, manifest: dict, out: str | None, as_json: bool, speech_only: bool, runs: int | None) -> None:
    """`edgespec validate` of a speech bundle: the asr suite with the bundle's own recipe."""
    from edgespec.config import AsrRecipe, from_dict

    if not speech_only:
        raise EdgespecError(f"bundle '{bundle}' is a speech bundle: it takes the asr suite only (options: --runs, --out, --json)")
    recipe = from_dict(AsrRecipe, manifest["recipe"])
    if runs is not None:
        recipe = from_dict(AsrRecipe, {**recipe.to_dict(), "validate": {**recipe.to_dict()["validate"], "runs": runs}})
    _quiet_runtime_logs()
    from edgespec.speech.pipeline import write_asr_report
    from edgespec.speech.validate import validate_asr

    report = validate_asr(bundle, recipe)
    if out:
        write_asr_report(report, Path(out))
    o = report["overall"]
    if as_json:
        click.echo(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        gates = ", ".join(f"{g['name']} {'ok' if g['passed'] else 'FAILED'} ({g['message']})" for g in report["gates"])
        click.echo(
            f"asr: {o['utterances']} utterances, PER {100 * o['per']:.1f}% (fp32 eager {100 * o['per_eager_fp32']:.1f}%), streaming {100 * o['per_chunked']:.1f}%, WER {100 * o['wer']:.1f}%, RTF {o['rtf']:.4f}; {gates}"
        )
    if not report["passed"]:
        sys.exit(1)


@contextlib.contextmanager
def _phase_bars(name: str):
    """An on_progress(phase, done, total) callback drawing one transient bar per phase."""
    from tqdm import tqdm

    bars: dict = {}

    def on_progress(phase: str, done: int, total: int) -> None:
        if phase not in bars:
            for b in bars.values():
                b.close()
            bars.clear()
            bars[phase] = tqdm(total=total, desc=f"{name} [{phase}]", unit="step", file=_err(), leave=False)
        bars[phase].n = done
        bars[phase].refresh()

    try:
        yield on_progress
    finally:
        for b in bars.values():
            b.close()


def _run_validation(bundle, cfg, source):
    from edgespec.harness.validate import validate_bundle

    with _phase_bars("validate") as on_progress:
        return validate_bundle(bundle, cfg, source=source, on_progress=on_progress)


def _validation_summary(report: dict) -> str:
    o = report["overall"]
    lines = [f"{'suite':<14}{'metric':<18}{'score':>7}{'fp32':>7}{'AR tok/s':>10}{'spec tok/s':>11}{'speedup':>9}{'tok/call':>9}{'lossless':>10}"]
    for name, s in [*report["suites"].items(), ("all", {**o, "metric": "mean"})]:
        sp = s.get("spec") or {}
        ref = s.get("reference_score")
        lines.append(
            f"{name:<14}{s['metric']:<18}{s['score']:>7.3f}{'' if ref is None else f'{ref:.3f}':>7}{s['ar']['tokens_per_s']:>10.1f}"
            f"{sp.get('tokens_per_s', float('nan')):>11.1f}{sp.get('speedup', float('nan')):>9.3f}{sp.get('tokens_per_call', float('nan')):>9.3f}{s['lossless'] if sp else '':>10}"
        )
    lines.append("peak RSS " + ", ".join(f"{k} {v:.0f} MB" for k, v in report["peak_rss_mb"].items()) + f"; program {report['program_bytes'] / 1e6:.1f} MB")
    f = report.get("fidelity")
    if f:
        lines.append(
            f"fidelity vs fp32 source ({f['tokens']} held-out tokens): top-1 {f['top1_agreement']:.1%}, perplexity {f['perplexity']:.3f} vs {f['reference_perplexity']:.3f}"
            f" ({f['perplexity_ratio']:.4f}x), KL mean {f['kl_mean']:.4f} p99 {f['kl_p99']:.4f}"
        )
    for g in report["gates"]:
        lines.append(f"gate {'pass' if g['passed'] else 'FAIL'}: {g['message']}")
    lines.append("validation " + ("passed" if report["passed"] else "FAILED"))
    return "\n".join(lines)


@main.command()
@click.option("--bundle", required=True, type=click.Path(), help="Bundle with speculative methods.")
@click.option(
    "--prompts",
    "n_prompts",
    default=24,
    show_default=True,
    type=click.IntRange(min=1),
    help="Held-out suite prompts whose greedy continuations give the acceptance statistics.",
)
@click.option("--max-new-tokens", default=96, show_default=True, type=click.IntRange(min=8))
@click.option("--max-size", default=24, show_default=True, type=click.IntRange(min=2, max=64), help="Largest tree (nodes) to consider.")
@click.option("--context", default=256, show_default=True, type=click.IntRange(min=1), help="Context position at which call costs are measured.")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1), help="Rows to print.")
@THREADS
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_friendly
def tune(bundle: str, n_prompts: int, max_new_tokens: int, max_size: int, context: int, top: int, threads: int, as_json: bool) -> None:
    """Pick the draft tree with the highest expected tokens/s on this device.

    Measures the program's cost per call for every tree size and the streams' acceptance on
    greedy continuations of held-out prompts, then ranks candidate trees (cost model in
    docs/speculative-streaming.md). Re-export with the winner as `streams.tree`.
    """
    _quiet_runtime_logs()
    _set_threads(threads)
    from edgespec.harness.tune import tune_bundle

    with _phase_bars("tune") as on_progress:
        out = tune_bundle(bundle, n_prompts, max_new_tokens, max_size, context, on_progress=on_progress)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    c, ar_tps = out["device_costs_ms"], out["ar_tokens_per_s"]
    click.echo(
        f"cost per call (ms): forward 1 token {c['forward_1_token']:.2f}; spec_step on {out['own_tree']} {c['spec_step_own_tree']:.2f}; per extra row {c['per_extra_row']:.2f}"
    )
    click.echo(f"{'tree':<16}{'nodes':>6}{'tok/call':>10}{'ms/call':>9}{'tok/s':>9}{'vs AR':>7}")
    for e in out["trees"][:top]:
        click.echo(f"{str(e['branching']):<16}{e['size']:>6}{e['tokens_per_call']:>10.3f}{e['ms_per_call']:>9.2f}{e['tokens_per_s']:>9.1f}{e['vs_ar']:>7.3f}")
    best = out["trees"][0]
    click.echo(f"best: streams.tree {best['branching']} -> {best['tokens_per_s']:.1f} tok/s expected ({best['vs_ar']:.2f}x autoregressive {ar_tps:.1f} tok/s)")


@main.command(epilog=_overrides_help("train", "train.data=data/distill/train.jsonl train.steps=120 train.out_dir=runs/s1"))
@RECIPE_ARGS
@_friendly
def train(recipe_args: tuple[str, ...]) -> None:
    """Train the drafter of RECIPE with FIELD=VALUE overrides (the train section;
    streams.drafter=medusa|hydra for heads instead of streams); resumes from train.out_dir/ckpt.pt.

    \b
    Multi-process:
      torchrun --nproc_per_node N $(which edgespec) train [RECIPE] [FIELD=VALUE]...
    """
    from edgespec.config import recipe_from_args

    cfg = recipe_from_args(recipe_args)
    _quiet_runtime_logs()
    from tqdm import tqdm

    from edgespec.speculative.train import train_from_recipe

    with tqdm(total=cfg.train.steps, desc="train", unit="step", file=_err()) as bar:

        def on_step(step: int, loss: float) -> None:
            bar.n = step
            bar.set_postfix_str(f"loss {loss:.3f}")
            bar.refresh()

        summary = train_from_recipe(cfg, on_status=lambda s: bar.set_description(f"train [{s}]"), on_step=on_step)
    click.echo(json.dumps(summary))


@main.command()
@click.option("--bundle", type=click.Path(), help="Teacher: this bundle's program, one prompt at a time; --out is a JSONL file.")
@click.option(
    "--source",
    help="Teacher: this model (a recipe's model.source, e.g. smollm2-135m-instruct) in eager bf16, --batch prompts at once, "
    "with top-K probabilities; --out is a directory of shards.",
)
@click.option("--suites", help="Comma-separated training prompt suites (edgespec.corpus.prompts). Default: all.")
@click.option("--split", type=click.Choice(["train", "heldout"]), default="train", show_default=True)
@click.option("--n", "n_prompts", default=3000, show_default=True, type=click.IntRange(min=1), help="Number of prompts.")
@click.option("--max-new-tokens", default=192, show_default=True, type=click.IntRange(min=1))
@click.option("--batch", default=64, show_default=True, type=click.IntRange(min=1), help="--source: sequences decoded at once.")
@click.option("--top-k", default=8, show_default=True, type=click.IntRange(min=1), help="--source: probabilities kept per response position.")
@click.option("--shard-size", default=1024, show_default=True, type=click.IntRange(min=1), help="--source: prompts per shard file.")
@click.option("--max-prompt-tokens", default=448, show_default=True, type=click.IntRange(min=8), help="--source: longer prompts are skipped.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1, max=64),
    help="--source: processes, each with its own teacher and cores/workers threads (shard i to worker i mod N).",
)
@click.option("--out", required=True, type=click.Path(), help="Where the data goes (appended to / resumed).")
@_friendly
def distill(
    bundle: str | None,
    source: str | None,
    suites: str | None,
    split: str,
    n_prompts: int,
    max_new_tokens: int,
    batch: int,
    top_k: int,
    shard_size: int,
    max_prompt_tokens: int,
    workers: int,
    out: str,
) -> None:
    """Self-distillation data: the model's own greedy answers to suite prompts, from a bundle's
    program (--bundle) or from the eager model in batches with soft labels (--source)."""
    if (bundle is None) == (source is None):
        raise EdgespecError("give either --bundle (the program as teacher) or --source (the eager model as teacher)")
    _quiet_runtime_logs()
    from edgespec.corpus.prompts import SUITES, mixed_prompts

    names = tuple(s.strip() for s in suites.split(",") if s.strip()) if suites else tuple(SUITES)
    unknown = [s for s in names if s not in SUITES]
    if unknown:
        raise EdgespecError(f"unknown suite(s) {unknown}; known: {', '.join(SUITES)}")
    prompts = mixed_prompts(split, n_prompts, names)
    if source is not None:
        stats = _distill_eager(
            source, prompts, out, batch=batch, max_new_tokens=max_new_tokens, top_k=top_k, shard_size=shard_size, max_prompt=max_prompt_tokens, workers=workers
        )
    else:
        stats = _distill_program(bundle, prompts, out, max_new_tokens)
    click.echo(json.dumps(stats))


def _distill_program(bundle: str, prompts, out: str, max_new_tokens: int) -> dict:
    from tqdm import tqdm

    from edgespec.corpus.distill import distill as run
    from edgespec.runtime.generate import generate

    _, tokenizer, runner = _load_bundle(bundle)
    with tqdm(total=len(prompts), desc="distill", unit="prompt", file=_err()) as bar:

        def respond(ids: list[int]) -> tuple[list[int], bool]:
            res = generate(runner.forward, ids, max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
            return res.completion_ids, res.stopped_by_eos

        return run(
            respond,
            lambda t: _prompt_ids(tokenizer, t, True),
            prompts,
            out,
            max_seq_len=runner.max_seq_len,
            eos_ids=runner.eos_ids,
            on_done=lambda n: bar.update(1),
        )


def _distill_eager(source: str, prompts, out: str, *, batch: int, max_new_tokens: int, top_k: int, shard_size: int, max_prompt: int, workers: int) -> dict:
    import time

    import torch
    from tqdm import tqdm

    from edgespec.corpus.distill import distill_shards, distill_shards_parallel
    from edgespec.corpus.teacher import as_teacher_
    from edgespec.models.load import build_model, read_source, tokenizer_of

    src = read_source(source, max_prompt + max_new_tokens)
    tokenizer = tokenizer_of(src)
    rows = [(p.id, p.task, _prompt_ids(tokenizer, p.text, True)) for p in prompts]
    kept = [r for r in rows if len(r[2]) <= max_prompt]
    t0 = time.perf_counter()
    tokens = [0]
    with tqdm(total=len(kept), desc="distill", unit="prompt", file=_err()) as bar:

        def on_tokens(n: int) -> None:
            tokens[0] += n
            bar.update(1)
            bar.set_postfix_str(f"{tokens[0] / max(bar.format_dict['elapsed'], 1e-9) * 60:,.0f} response tok/min", refresh=False)

        kwargs = {"batch": batch, "max_new_tokens": max_new_tokens, "eos_ids": tuple(src.eos_ids), "top_k": top_k, "shard_size": shard_size}
        if workers > 1:
            stats = distill_shards_parallel(source, max_prompt + max_new_tokens, kept, out, workers=workers, on_tokens=on_tokens, **kwargs)
        else:
            stats = distill_shards(as_teacher_(build_model(src), torch.bfloat16), kept, out, on_tokens=on_tokens, **kwargs)
    seconds = time.perf_counter() - t0
    return stats | {
        "skipped_long_prompts": len(rows) - len(kept),
        "seconds": round(seconds, 1),
        "response_tokens_per_min": round(stats["new_response_tokens"] / seconds * 60) if stats["new_response_tokens"] else None,
    }


@main.command(epilog=_overrides_help("normsearch", "numerics.format=bf16 -o runs/normsearch-bf16"))
@RECIPE_ARGS
@click.option("-o", "--outdir", default="runs/normsearch", show_default=True, type=click.Path(file_okay=False), help="Where the report goes.")
@_friendly
def normsearch(recipe_args: tuple[str, ...], outdir: str) -> None:
    """Per-layer pre-normalizer search for the model of RECIPE with FIELD=VALUE overrides (the
    numerics section); writes a table and a plot."""
    from edgespec.config import recipe_from_args

    cfg = recipe_from_args(recipe_args)
    _quiet_runtime_logs()
    from tqdm import tqdm

    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.numerics.search import run_normsearch, write_report

    src = read_source(cfg.model.source, cfg.model.max_seq_len)
    model = build_model(src)
    n_norms = 2 * src.args.n_layers + 1
    with tqdm(total=n_norms, desc="normsearch", unit="layer", file=_err()) as bar:
        result = run_normsearch(model, tokenizer_of(src), cfg.numerics, on_layer=lambda name: bar.update(1))
    Path(outdir).mkdir(parents=True, exist_ok=True)
    files = write_report(result, outdir)
    click.echo(json.dumps({"report": [str(Path(outdir) / f) for f in files], **result["summary"]}))


@main.command()
@click.option("--bundle", required=True, type=click.Path(), help="Bundle directory.")
@click.option("--verify/--no-verify", default=True, show_default=True, help="Check file checksums.")
@_friendly
def info(bundle: str, verify: bool) -> None:
    """What is in a bundle."""
    from edgespec.bundle import read_manifest, verify_checksums

    m = read_manifest(bundle)
    if verify:
        verify_checksums(bundle, m)
    model = m["model"]
    click.echo(f"bundle      {Path(bundle).resolve()} (schema {m['schema_version']}{', checksums ok' if verify else ''})")
    if m.get("task") == "asr":
        a = model["args"]
        click.echo(
            f"model       {model['name']} from {model['source']}: speech recognition, {a['n_blocks']} Conformer blocks, dim {a['dim']}, {a['vocab_size']} phoneme tokens, {a['sample_rate']} Hz"
        )
        click.echo(f"front end   {m['recipe']['model']['frontend']}; streaming {m['streaming']}")
    else:
        click.echo(
            f"model       {model['name']} from {model['source']}: {model['n_layers']} layers, dim {model['dim']}, vocab {model['vocab_size']}, context {model['max_seq_len']}"
        )
    click.echo(f"precision   {m['precision']} (group size {m['recipe']['quant']['group_size']})")
    click.echo(f"methods     {', '.join(m['methods'])}")
    for name, f in m["files"].items():
        click.echo(f"file        {name:<16} {f['bytes'] / 1e6:8.2f} MB  sha256 {f['sha256'][:16]}…")


@main.command()
@click.option("--bundle", required=True, type=click.Path(), help="Bundle directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the program's metadata as JSON.")
@_friendly
def verify(bundle: str, as_json: bool) -> None:
    """Check a bundle: schema, every file's SHA-256, and that the program loads and answers its
    metadata methods consistently with the manifest (exit 2 with the reason otherwise)."""
    from edgespec.bundle import read_manifest, verify_checksums
    from edgespec.runtime.session import verify_program

    m = read_manifest(bundle)
    verify_checksums(bundle, m)
    _quiet_runtime_logs()
    if m.get("task") == "asr":
        from edgespec.speech.recognize import verify_asr_program

        meta = verify_asr_program(bundle, m)
        line = f"ok: {Path(bundle).resolve()} schema {m['schema_version']}, {len(m['files'])} files match their SHA-256, speech program answers {len(meta)} metadata methods ({meta['get_sample_rate']} Hz, up to {meta['get_max_samples'] / meta['get_sample_rate']:.0f} s, {meta['get_vocab_size']} tokens)"
        click.echo(json.dumps(meta, indent=1) if as_json else line)
        return
    meta = verify_program(bundle, m)
    if as_json:
        click.echo(json.dumps(meta, indent=1))
    else:
        spec = f", spec tree {meta['get_spec_branching']}" if "get_spec_branching" in meta else ""
        click.echo(
            f"ok: {Path(bundle).resolve()} schema {m['schema_version']}, {len(m['files'])} files match their SHA-256, program answers {len(meta)} metadata methods (context {meta['get_max_seq_len']}, vocab {meta['get_vocab_size']}, eos {meta['get_eos_ids']}{spec})"
        )


@main.command()
@click.option("--bundle", required=True, type=click.Path(), help="Bundle directory.")
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="Zip file to write (atomically).")
@_friendly
def package(bundle: str, out: str) -> None:
    """Pack a verified bundle into one zip for transfer (scripts/push_bundle.sh pushes a directory)."""
    from edgespec.bundle import package_zip

    path = package_zip(bundle, out)
    click.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


@main.command()
@click.argument("zip_file", type=click.Path())
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False), help="Bundle directory to create.")
@click.option("--overwrite", is_flag=True, help="Replace an existing directory at --out.")
@_friendly
def unpack(zip_file: str, out: str, overwrite: bool) -> None:
    """Unpack a bundle zip made by `edgespec package`, checking every file against the manifest
    (nothing is written unless all of it checks out)."""
    from edgespec.bundle import unpack_zip

    m = unpack_zip(zip_file, out, overwrite=overwrite)
    click.echo(f"unpacked {len(m['files'])} files to {Path(out).resolve()}; their SHA-256 match the manifest")


if __name__ == "__main__":
    main()
