"""Commands that run a bundle's program: `generate`, `bench`, `transcribe`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edgespec.cli.terminal import THREADS, err, friendly, progress_bar, quiet_runtime_logs, set_thread_count
from edgespec.errors import EdgespecError


def _load_bundle(bundle: str, verify: bool = True):
    from edgespec.runtime.session import open_bundle

    return open_bundle(bundle, verify=verify)


def _prompt_ids(tokenizer, prompt: str, chat_template: bool) -> list[int]:
    from edgespec.models.tokenizer import encode_prompt

    return encode_prompt(tokenizer, prompt, chat_template)


MODE = click.option(
    "--mode",
    type=click.Choice(["auto", "spec", "ar"]),
    default="auto",
    show_default=True,
    help="auto: speculative steps while they pay on this device (measured as it decodes: tokens per step against the step's cost "
    "in autoregressive calls), else one token per call; spec: every call a speculative step (one call verifies and drafts); "
    "ar: one token per call. Greedy output is the same in every mode.",
)
NGRAM = click.option(
    "--no-repeat-ngram-size", default=0, show_default=True, type=click.IntRange(min=0), help="Never repeat an n-gram of this size (prompt included); 0 = off."
)
LOOKUP = click.option(
    "--lookup",
    default=None,
    type=click.IntRange(min=0, max=8),
    help="spec: also draft from the context: what followed the earliest occurrence of the longest repeated suffix, when it is at least this many tokens "
    "(0 = the drafter only). Default: the bundle's own setting (manifest speculative.lookup, what its validation measured).",
)


@click.command()
@click.option("--bundle", required=True, type=click.Path(), help="Bundle directory from `edgespec export`.")
@click.option("--prompt", help="User prompt (or use --input for a batch).")
@click.option(
    "--input",
    "input_path",
    type=click.Path(dir_okay=False),
    help='Batch: a JSONL file, one {"id", "prompt"} object per line (without an id, a line is known by its prompt\'s hash).',
)
@click.option("--output", "output_path", type=click.Path(dir_okay=False), help="Batch: JSONL to append results to (resumable: finished ids are skipped).")
@click.option("--max-new-tokens", default=128, show_default=True, type=click.IntRange(min=1))
@click.option("--temperature", default=0.0, show_default=True, type=click.FloatRange(min=0.0), help="0 = greedy; a finite number.")
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(-(2**63), 2**64 - 1),
    help="Sampling seed (temperature > 0): an integer from -2**63 to 2**64-1, what torch's generator takes.",
)
@MODE
@LOOKUP
@NGRAM
@click.option("--no-chat-template", is_flag=True, help="Feed the prompt as raw text.")
@click.option("--sequential", is_flag=True, help="Batch: no pipelining (read, decode, write one after another).")
@click.option(
    "--batch",
    "batch",
    default=1,
    show_default=True,
    type=click.IntRange(min=1, max=64),
    help="Batch: decode up to this many prompts at once in one program call each step (a program exported with export.batch_slots >= N); "
    "each completion is the one it gets alone. 1 = one prompt at a time.",
)
@click.option(
    "--reuse-prefix/--no-reuse-prefix",
    default=True,
    show_default=True,
    help="Batch: prefill only where a prompt differs from what the KV cache holds (shared system prompt or context).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
@click.option(
    "--verify/--no-verify",
    default=True,
    show_default=True,
    help="Check every bundle file's SHA-256 against the manifest before loading (a file unchanged since this machine checked it is not hashed again).",
)
@THREADS
@friendly
def generate(
    bundle: str,
    prompt: str | None,
    input_path: str | None,
    output_path: str | None,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    mode: str,
    lookup: int | None,
    no_repeat_ngram_size: int,
    no_chat_template: bool,
    sequential: bool,
    batch: int,
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
    if batch > 1 and input_path is None:
        raise EdgespecError("--batch decodes the prompts of an --input file together; with --prompt there is one")
    from edgespec.runtime.sampling import check_temperature

    check_temperature(temperature)
    quiet_runtime_logs()
    set_thread_count(threads)
    from edgespec.models.tokenizer import StreamDecoder
    from edgespec.runtime.session import decoder

    manifest, tokenizer, runner = _load_bundle(bundle, verify)
    mode, run = decoder(runner, mode, lookup, manifest)
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
        together = None
        if batch > 1:
            if runner.batch_slots < batch:
                raise EdgespecError(
                    f"bundle '{bundle}' decodes at most {runner.batch_slots} sequence(s) at once; export it with export.batch_slots={batch} "
                    f"(or pass --batch {runner.batch_slots})"
                )
            if mode == "spec":
                raise EdgespecError("--batch decodes autoregressively (one token per sequence per call); drop --mode spec")
            together = (runner.decode_rows, batch, runner.call_tokens + runner.batch_slots)
        _generate_batch(run, tokenizer, input_path, output_path, kwargs, not no_chat_template, not sequential, together)
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
                    "speculative_share": round(res.speculative_share, 3),
                    "adaptive_events": res.adaptive_events,
                    # per decode call, in order: its time, the tokens it emitted, whether it was a spec_step
                    "step_ms": [round(1000 * t, 4) for t in res.step_times_s],
                    "step_tokens": list(res.tokens_per_call),
                    "step_speculative": list(res.speculative_calls),
                }
            )
        )
    else:
        click.echo()
        if mode == "spec":
            click.echo(f"[spec: {res.decode_tokens_per_s:.1f} tok/s decode, {res.mean_tokens_per_call:.2f} tokens per call]", file=err())
        if mode == "auto":
            why = f"; {res.adaptive_events[-1]}" if res.adaptive_events else ""
            click.echo(
                f"[auto: {res.decode_tokens_per_s:.1f} tok/s decode, {res.speculative_share:.0%} of calls speculative, "
                f"{res.mean_tokens_per_call:.2f} tokens per call{why}]",
                file=err(),
            )


def _generate_batch(run, tokenizer, input_path: str, output_path: str, kwargs: dict, chat: bool, pipelined: bool, together=None) -> None:
    from edgespec.runtime.batch import run_batch

    p = Path(input_path)
    total = sum(1 for line in open(p, encoding="utf-8", errors="replace") if line.strip()) if p.is_file() else 0
    with progress_bar(total, "generate", "prompt") as bar:

        def on_item(stats) -> None:
            bar.n = stats.generated + stats.skipped_done + len(stats.errors)
            bar.set_postfix_str(f"{stats.new_tokens} tokens, {len(stats.errors)} errors")
            bar.refresh()

        stats = run_batch(
            run,
            lambda t: _prompt_ids(tokenizer, t, chat),
            tokenizer.decode,
            p,
            output_path,
            gen_kwargs=kwargs,
            pipelined=pipelined,
            on_item=on_item,
            together=together,
        )
    for e in stats.errors:
        where = ", ".join(f"{k} {e[k]}" for k in ("line", "id") if k in e)
        click.echo(f"skipped {where}: {e['error']}", file=err())
    click.echo(json.dumps(stats.as_dict()))


@click.command()
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
    type=click.Choice(["both", "auto", "spec", "ar", "ar-logits"]),
    default="both",
    show_default=True,
    help="both: every decoder the program has side by side (interleaved runs, alternating order): autoregressive, "
    "speculative (spec_step every call), auto (speculative steps while they pay, `generate`'s default) and ar-logits "
    "(greedy from forward's logits where the program's next_token reads a screened head).",
)
@LOOKUP
@THREADS
@click.option("--json", "as_json", is_flag=True, help="Print JSON (fields: docs/benchmarks.md).")
@friendly
def bench(
    bundle: str, prompts: tuple[str, ...], max_new_tokens: int, warmup: int, runs: int, mode: str, lookup: int | None, threads: int, as_json: bool
) -> None:
    """Decode and prefill tokens/s, speedup, tokens per call, peak RSS and program size."""
    quiet_runtime_logs()
    set_thread_count(threads)
    from edgespec.runtime.bench import bench_generation
    from edgespec.runtime.session import decoder

    manifest, tokenizer, runner = _load_bundle(bundle)
    ids = [_prompt_ids(tokenizer, p, True) for p in prompts]
    modes = ("ar", *(("spec", "auto") if runner.has_spec else ()), *(("ar-logits",) if runner.has_next_token else ())) if mode == "both" else (mode,)
    decoders = dict(decoder(runner, m, lookup, manifest) for m in modes)
    stats = bench_generation(runner, ids, decoders, max_new_tokens=max_new_tokens, warmup=warmup, runs=runs)
    if as_json:
        click.echo(json.dumps(stats, indent=2))
    else:
        for k, v in stats.items():
            if k == "rows":
                continue
            for kk, vv in v.items() if isinstance(v, dict) else [(None, v)]:
                click.echo(f"{k if kk is None else f'{k}.{kk}':>34}: {'n/a' if vv is None else vv}")


@click.command()
@click.option("--bundle", "-b", required=True, type=click.Path(), help="A speech bundle (edgespec export recipes/conformer-hama.yaml).")
@click.argument("audio", nargs=-1, required=True, type=click.Path())
@click.option("--stream", is_flag=True, help="Recognize chunk by chunk with the bundle's streaming settings (any length).")
@click.option("--resample", is_flag=True, help="Resample audio at another rate to the model's (linear interpolation) instead of refusing it.")
@click.option("--phonemes", is_flag=True, help="Print the phonemes instead of words (no P2G).")
@THREADS
@click.option("--json", "as_json", is_flag=True, help="One JSON object per file: text, phonemes, timings.")
@friendly
def transcribe(bundle: str, audio: tuple[str, ...], stream: bool, resample: bool, phonemes: bool, threads: int, as_json: bool) -> None:
    """Transcribe 16-bit PCM WAV files with a speech bundle: phonemes by the program, words by hama's P2G."""
    quiet_runtime_logs()
    import json

    from edgespec.speech.audio import read_wav
    from edgespec.speech.librivox import phonemes_to_text
    from edgespec.speech.recognize import Recognizer

    rec = Recognizer(bundle, threads=threads)
    s = rec.manifest.streaming
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


COMMANDS = (generate, bench, transcribe)
