"""fp16 speech programs under stress: a bundle with the searched pre-normalizers beside one
with plain fp16 LayerNorms (`numerics.search=false`), on the LibriVox sentences as recorded,
loud (x30, clipped), quiet (x1e-3), silent and as full-scale noise. Per variant: non-finite
outputs, frame-argmax agreement with the fp32 eager model, PER where there is speech; and the
emulated overflow/underflow events of both norm choices on the same inputs (the search's
own evaluation). Prints JSON.

    python bench/asr_fp16.py --stable bundles/asr-fp16 --naive bundles/asr-fp16-naive > docs/results/asr_fp16.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from edgespec.harness.metrics import error_rate
from edgespec.speech import librivox as L
from edgespec.speech.asr_suite import _agreement
from edgespec.speech.audio import read_wav
from edgespec.speech.ctc import decode
from edgespec.speech.norm_calibration import stress_variants


def emulated_events(frontend, encoder, waves, choices) -> dict:
    """Overflow + underflow events of each norm choice ('none' and the chosen) on these inputs."""
    from edgespec.numerics.formats import FORMATS
    from edgespec.numerics.search import collect_norm_inputs, evaluate
    from edgespec.numerics.stable_norm import NormChoice

    rows = collect_norm_inputs(encoder, [lambda w=w: encoder(frontend(torch.from_numpy(w)[None])) for w in waves])
    mods = dict(encoder.named_modules())
    out = {"naive": 0, "chosen": 0, "rows": 0}
    for name, x in rows.items():
        m = mods[name]
        for key, choice in (("naive", NormChoice("none")), ("chosen", choices[name])):
            ev = evaluate(x, choice, FORMATS["fp16"], m.weight.detach().float(), m.eps, True)
            out[key] += ev.overflow + ev.underflow
        out["rows"] += len(x)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stable", required=True)
    ap.add_argument("--naive", required=True)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    from edgespec.models.conformer import load_hama_conformer
    from edgespec.models.hama import phoneme_tokens
    from edgespec.numerics.search import choices_of
    from edgespec.runtime.runner import set_threads
    from edgespec.speech.recognize import Recognizer

    set_threads(args.threads)
    recs = {"stable": Recognizer(args.stable), "naive": Recognizer(args.naive)}
    frontend, encoder = load_hama_conformer()
    tokens = phoneme_tokens()
    choices = choices_of(json.loads((Path(args.stable) / "normsearch.json").read_text()))
    utts = L.librivox_utterances()
    refs = [L.reference_phonemes(u.text) for u in utts]
    variants = {}
    for i, u in enumerate(utts):
        for name, w in stress_variants(read_wav(u.audio), i).items():
            variants.setdefault(name, []).append(w)
    out = {"variants": {}}
    for name, waves in variants.items():
        row = {"utterances": len(waves), "events": emulated_events(frontend, encoder, waves, choices)}
        with torch.no_grad():
            eager = [encoder(frontend(torch.from_numpy(w)[None]))[0] for w in waves]
        for key, rec in recs.items():
            got = [rec.recognize(w).log_probs for w in waves]
            frames = sum(len(g) for g in got)
            row[key] = {
                "nonfinite_frames": int(sum((~torch.isfinite(g)).any(-1).sum() for g in got)),
                "agree_fp32_eager": sum(_agreement(g, e) * len(g) for g, e in zip(got, eager, strict=True)) / frames,
            }
            if name in ("speech", "loud", "quiet"):
                row[key]["per"] = error_rate([decode(g, tokens, 0.95, -0.1).phonemes for g in got], refs)
        if name in ("speech", "loud", "quiet"):
            row["per_fp32_eager"] = error_rate([decode(e, tokens, 0.95, -0.1).phonemes for e in eager], refs)
        out["variants"][name] = row
        print(name, json.dumps(row), file=sys.stderr)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
