"""The `asr` validation suite: a bundle's program on real read speech (LibriVox sentences),
whole-utterance and streaming, beside the fp32 eager model and hama's own engine.

Measured: phoneme error rate (PER, against hama's G2P of the transcript), word error rate
(WER, words spelled by hama's P2G), real-time factor (median of `runs` per utterance,
summed over utterances), per-chunk latency, and frame-argmax agreement with the eager
model and with hama's engine.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from edgespec.config import AsrRecipe
from edgespec.harness.metrics import error_rate
from edgespec.manifest import GateResult
from edgespec.speech import librivox as L
from edgespec.speech.audio import read_wav
from edgespec.speech.ctc import decode


def _engine_log_probs(wave: np.ndarray) -> np.ndarray | None:
    """hama's engine on the waveform ([T, V]), or None where its native library is missing."""
    try:
        from hama import _engine
    except ImportError:
        return None
    if not _engine.available():
        return None
    model = _engine_model()
    wav = wave.reshape(1, -1).astype(np.float32)
    lp, _ = model.session.run(
        [model._log_probs_output_name, model._out_lengths_output_name],
        {model._waveform_input_name: wav, model._waveform_lengths_input_name: np.array([wav.shape[1]], dtype=np.int64)},
    )
    return np.asarray(lp)[0]


@functools.cache
def _engine_model():
    from hama.asr import ASRModel

    return ASRModel()


def _agreement(a: torch.Tensor, b) -> float:
    b = torch.as_tensor(b)
    n = min(len(a), len(b))
    return float((a[:n].argmax(-1) == b[:n].argmax(-1)).float().mean())


def validate_asr(bundle_dir: str | Path, recipe: AsrRecipe, on_progress: Callable[[str, int, int], None] = lambda *a: None) -> dict:
    """Run the suite on a (staged) bundle: per-utterance rows, overall numbers, gates."""
    from edgespec.models.conformer import load_conformer_source
    from edgespec.models.hama import phoneme_tokens
    from edgespec.speech.recognize import Recognizer

    rec = Recognizer(bundle_dir, threads=recipe.validate.threads)
    frontend, encoder = load_conformer_source(recipe.model.source)
    tokens = phoneme_tokens()
    s, c = recipe.streaming, recipe.ctc
    utts = L.librivox_utterances()
    rows, hyp, chunked, ref_eager, refs, words, ref_words = [], [], [], [], [], [], []
    for i, u in enumerate(utts):
        on_progress("asr", i, len(utts))
        wave = read_wav(u.audio, rec.sample_rate)
        runs = [rec.recognize(wave) for _ in range(recipe.validate.runs)]
        whole = runs[0]
        stream = rec.recognize_streaming(wave, s.chunk_frames, s.left_frames, s.right_frames)
        with torch.no_grad():
            eager_lp = encoder(frontend(torch.from_numpy(wave)[None]))[0]
        eager = decode(eager_lp, tokens, c.temperature, c.blank_bias)
        engine_lp = _engine_log_probs(wave)
        ref = L.reference_phonemes(u.text)
        text = L.phonemes_to_text(whole.transcript.phoneme_text)
        hyp.append(whole.transcript.phonemes)
        chunked.append(stream.transcript.phonemes)
        ref_eager.append(eager.phonemes)
        refs.append(ref)
        words.append(text.split())
        ref_words.append(u.text.split())
        rows.append(
            {
                "id": u.id,
                "audio_seconds": whole.audio_seconds,
                "text": text,
                "reference": u.text,
                "per": error_rate([whole.transcript.phonemes], [ref]),
                "per_chunked": error_rate([stream.transcript.phonemes], [ref]),
                "per_eager_fp32": error_rate([eager.phonemes], [ref]),
                "seconds": statistics.median(r.seconds for r in runs),
                "chunk_ms_median": 1000 * statistics.median(stream.chunk_seconds),
                "chunk_ms_max": 1000 * max(stream.chunk_seconds),
                "agree_eager": _agreement(whole.log_probs, eager_lp),
                "agree_engine": None if engine_lp is None else _agreement(whole.log_probs, engine_lp),
                "agree_eager_engine": None if engine_lp is None else _agreement(eager_lp, engine_lp),
            }
        )
    on_progress("asr", len(utts), len(utts))
    audio = sum(r["audio_seconds"] for r in rows)
    frames = [len(h) for h in hyp]

    def weighted(key: str) -> float | None:
        vals = [r[key] for r in rows]
        return None if None in vals else sum(v * r["audio_seconds"] for v, r in zip(vals, rows, strict=True)) / audio

    overall = {
        "utterances": len(rows),
        "audio_seconds": audio,
        "per": error_rate(hyp, refs),
        "per_chunked": error_rate(chunked, refs),
        "per_eager_fp32": error_rate(ref_eager, refs),
        "wer": error_rate(words, ref_words),
        "rtf": sum(r["seconds"] for r in rows) / audio,
        "chunk_ms_median": statistics.median(r["chunk_ms_median"] for r in rows),
        "chunk_ms_max": max(r["chunk_ms_max"] for r in rows),
        "agree_eager": weighted("agree_eager"),
        "agree_engine": weighted("agree_engine"),
        "agree_eager_engine": weighted("agree_eager_engine"),
        "phonemes": sum(frames),
    }
    gates = check_asr_gates(overall, recipe)
    return {
        "suite": "asr",
        "precision": recipe.quant.scheme,
        "frontend": recipe.model.frontend,
        "threads": recipe.validate.threads,
        "streaming": {
            "chunk_frames": s.chunk_frames,
            "left_frames": s.left_frames,
            "right_frames": s.right_frames,
            "chunk_ms": 20 * s.chunk_frames,
            "lookahead_ms": 20 * s.right_frames,
        },
        "overall": overall,
        "rows": rows,
        "gates": [g.to_dict() for g in gates],
        "passed": all(g.passed for g in gates),
    }


def _at_most(name: str, measured: float, allowed: float, message: str) -> GateResult:
    return GateResult(name, measured <= allowed + 1e-12, round(measured, 4), allowed, message)


def check_asr_gates(o: dict, recipe: AsrRecipe) -> list[GateResult]:
    g = recipe.validate.gates
    per_up, ch_up = o["per"] - o["per_eager_fp32"], o["per_chunked"] - o["per"]
    out = [
        _at_most(
            "per", per_up, g.max_per_increase, f"PER {o['per']:.3f} vs fp32 eager {o['per_eager_fp32']:.3f} (+{per_up:.3f}, allowed +{g.max_per_increase})"
        ),
        _at_most(
            "chunked_per",
            ch_up,
            g.max_chunked_per_increase,
            f"streaming PER {o['per_chunked']:.3f} vs whole {o['per']:.3f} (allowed +{g.max_chunked_per_increase})",
        ),
    ]
    if g.max_rtf > 0:
        out.append(_at_most("rtf", o["rtf"], g.max_rtf, f"real-time factor {o['rtf']:.4f} (allowed {g.max_rtf})"))
    return out


def render_asr_markdown(report: dict) -> str:
    o = report["overall"]
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    lines = [
        f"# ASR validation ({report['precision']}, front end in the {report['frontend']}, {report['threads']} thread(s))",
        "",
        f"{o['utterances']} LibriVox utterances, {o['audio_seconds']:.1f} s of audio.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| PER (program, whole utterance) | {pct(o['per'])} |",
        f"| PER (fp32 eager model) | {pct(o['per_eager_fp32'])} |",
        f"| PER (program, streaming {report['streaming']['chunk_ms']} ms chunks, {report['streaming']['lookahead_ms']} ms look-ahead) | {pct(o['per_chunked'])} |",
        f"| WER (words by hama P2G) | {pct(o['wer'])} |",
        f"| real-time factor | {o['rtf']:.4f} |",
        f"| streaming call latency, median / max | {o['chunk_ms_median']:.1f} / {o['chunk_ms_max']:.1f} ms |",
        f"| frame-argmax agreement with the fp32 eager model | {pct(o['agree_eager'])} |",
        f"| frame-argmax agreement with hama's engine | {pct(o['agree_engine'])} |",
        "",
        "| gate | measured | allowed | passed |",
        "|---|---|---|---|",
        *[f"| {g['name']} | {g['measured']} | {g['threshold']} | {'yes' if g['passed'] else 'NO'} |" for g in report["gates"]],
        "",
        "| utterance | s | PER | PER streaming | text |",
        "|---|---|---|---|---|",
        *[f"| {r['id']} | {r['audio_seconds']:.1f} | {pct(r['per'])} | {pct(r['per_chunked'])} | {r['text']} |" for r in report["rows"]],
    ]
    return "\n".join(lines) + "\n"
