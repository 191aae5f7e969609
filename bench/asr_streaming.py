"""Streaming recognition: phoneme error rate and per-call latency of an ASR bundle's program
for chunk / left-context / look-ahead sizes, on the LibriVox sentences, beside the
whole-utterance PER of the same program. Prints JSON; `--plot` draws PER against the
algorithmic latency (chunk + look-ahead).

    python bench/asr_streaming.py --bundle bundles/asr --threads 1 --plot docs/asr_streaming.png \\
        > docs/results/asr_streaming.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys

from edgespec.harness.metrics import error_rate
from edgespec.speech import librivox as L
from edgespec.speech.audio import read_wav
from edgespec.speech.recognize import Recognizer


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chunks", type=ints, default=[8, 16, 32, 64], help="output frames per call (20 ms each)")
    ap.add_argument("--lefts", type=ints, default=[16, 32, 64, 128])
    ap.add_argument("--rights", type=ints, default=[0, 4, 8, 16])
    ap.add_argument("--plot", default="")
    args = ap.parse_args()

    rec = Recognizer(args.bundle, threads=args.threads)
    utts = L.librivox_utterances()
    waves = [read_wav(u.audio, rec.sample_rate) for u in utts]
    refs = [L.reference_phonemes(u.text) for u in utts]
    whole = [rec.recognize(w) for w in waves]
    audio = sum(r.audio_seconds for r in whole)
    rows = []
    for chunk, left, right in itertools.product(args.chunks, args.lefts, args.rights):
        rs = [rec.recognize_streaming(w, chunk, left, right) for w in waves]
        calls = [t for r in rs for t in r.chunk_seconds]
        rows.append(
            {
                "chunk_frames": chunk,
                "left_frames": left,
                "right_frames": right,
                "algorithmic_latency_ms": 20 * (chunk + right),
                "per": error_rate([r.transcript.phonemes for r in rs], refs),
                "call_ms_median": 1000 * statistics.median(calls),
                "call_ms_max": 1000 * max(calls),
                "rtf": sum(calls) / audio,
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr)
    out = {
        "bundle": args.bundle,
        "precision": rec.manifest.precision,
        "threads": args.threads,
        "utterances": len(utts),
        "audio_seconds": audio,
        "per_whole": error_rate([r.transcript.phonemes for r in whole], refs),
        "rtf_whole": sum(r.seconds for r in whole) / audio,
        "rows": rows,
    }
    print(json.dumps(out, indent=2))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for left in args.lefts:
            sel = [r for r in rows if r["left_frames"] == left]
            best = {}
            for r in sel:  # the best look-ahead at each latency
                k = r["algorithmic_latency_ms"]
                best[k] = min(best.get(k, 1.0), r["per"])
            ks = sorted(best)
            ax.plot(ks, [100 * best[k] for k in ks], marker="o", label=f"left context {20 * left} ms")
        ax.axhline(100 * out["per_whole"], color="k", ls="--", label="whole utterance")
        ax.set_xlabel("algorithmic latency: chunk + look-ahead (ms)")
        ax.set_ylabel("phoneme error rate (%)")
        ax.set_title(f"Streaming Conformer ({out['precision']}, {len(utts)} LibriVox sentences)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
