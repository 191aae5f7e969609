"""The normalizer search on the Conformer's LayerNorms, over real speech and stress inputs.

Calibration and held-out rows come from the LibriVox sentences, each also played loud
(x30, clipped to full scale), quiet (x1e-3), as silence and as full-scale noise: the inputs a
microphone can produce at the extremes. The search (edgespec.numerics.search) evaluates
every candidate pre-normalizer on those rows, on the held-out ones and on synthetic rows
spread over the format's whole range, and picks the cheapest safe one per layer.
"""

from __future__ import annotations

import numpy as np
import torch

from edgespec.config import NumericsConfig
from edgespec.models.conformer import Conformer, LogMel


def stress_variants(wave: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """The utterance as recorded, loud, quiet, and silence / noise of the same length."""
    noise = np.random.default_rng(seed).uniform(-1, 1, len(wave)).astype(np.float32)
    return {"speech": wave, "loud": np.clip(wave * 30.0, -1.0, 1.0), "quiet": wave * 1e-3, "silence": np.zeros_like(wave), "noise": noise}


def asr_normsearch(frontend: LogMel, encoder: Conformer, cfg: NumericsConfig, on_layer=lambda name: None) -> dict:
    """`search_norms` over the encoder's LayerNorms (fp32 model) with LibriVox + stress rows."""
    from edgespec.numerics.search import collect_norm_inputs, search_norms
    from edgespec.speech.audio import read_wav
    from edgespec.speech.librivox import librivox_utterances

    utts = librivox_utterances()
    n_cal = min(cfg.calibration_prompts, len(utts) - 1)
    waves = [read_wav(u.audio, encoder.args.sample_rate) for u in utts[: n_cal + cfg.heldout_prompts]]

    def calls(ws: list[np.ndarray]):
        return [lambda x=x: encoder(frontend(torch.from_numpy(x)[None])) for i, w in enumerate(ws) for x in stress_variants(w, i).values()]

    calib = collect_norm_inputs(encoder, calls(waves[:n_cal]))
    held = collect_norm_inputs(encoder, calls(waves[n_cal:]))
    return search_norms(encoder, calib, held, cfg.format, cfg.guarantee, on_layer)
