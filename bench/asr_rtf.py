"""Real-time factor of speech bundles side by side with hama's own engine, in one run: each
LibriVox sentence recognized whole `--runs` times per bundle (after a warm-up), median per
sentence, summed over sentences / audio seconds. Also the frame-argmax agreement of each
program with the engine and its PER. Prints JSON.

    python bench/asr_rtf.py --bundles bundles/asr-fp32 bundles/asr --threads 1 > docs/results/asr_rtf.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from edgespec.harness.metrics import error_rate
from edgespec.speech import librivox as L
from edgespec.speech.asr_suite import _agreement, _engine_log_probs
from edgespec.speech.audio import read_wav


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundles", nargs="+", required=True)
    ap.add_argument("--threads", type=int, default=1, help="ExecuTorch threads (set before any program loads)")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    from edgespec.runtime.runner import set_threads
    from edgespec.speech.recognize import Recognizer

    set_threads(args.threads)
    utts = L.librivox_utterances()
    waves = [read_wav(u.audio) for u in utts]
    refs = [L.reference_phonemes(u.text) for u in utts]
    audio = sum(len(w) for w in waves) / 16000
    engine = []
    for w in waves:
        _engine_log_probs(w)  # warm-up
        ts = []
        for _ in range(args.runs):
            t = time.perf_counter()
            lp = _engine_log_probs(w)
            ts.append(time.perf_counter() - t)
        engine.append((statistics.median(ts), lp))
    out = {
        "threads": args.threads,
        "runs": args.runs,
        "utterances": len(utts),
        "audio_seconds": audio,
        "hama_engine": {"rtf": sum(t for t, _ in engine) / audio},
        "bundles": [],
    }
    for b in args.bundles:
        rec = Recognizer(b)
        rows = []
        for w, (_, elp) in zip(waves, engine, strict=True):
            rec.recognize(w)  # warm-up
            rs = [rec.recognize(w) for _ in range(args.runs)]
            rows.append((statistics.median(r.seconds for r in rs), rs[0]))
        frames = sum(len(r.log_probs) for _, r in rows)
        out["bundles"].append(
            {
                "bundle": b,
                "precision": rec.manifest.precision,
                "frontend": rec.manifest.recipe.model.frontend,
                "bytes": rec.manifest.file_bytes("model.pte"),
                "rtf": sum(t for t, _ in rows) / audio,
                "per": error_rate([r.transcript.phonemes for _, r in rows], refs),
                "agree_engine": sum(_agreement(r.log_probs, elp) * len(r.log_probs) for (_, r), (_, elp) in zip(rows, engine, strict=True)) / frames,
            }
        )
        out["bundles"][-1]["speed_vs_engine"] = out["hama_engine"]["rtf"] / out["bundles"][-1]["rtf"]
        print(json.dumps(out["bundles"][-1]), file=sys.stderr)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
