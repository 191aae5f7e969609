"""A Conformer recognizer as an ExecuTorch program: `forward` over a whole utterance (or a
streaming window) of any length up to the recipe's `max_seconds`, XNNPACK-delegated. A
waveform program takes a multiple of 2 hops (320 samples): `usable_samples`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgespec.export import constants as C
from edgespec.models.conformer import Conformer, LogMel, WaveformConformer


@dataclass(frozen=True)
class AsrMeta:
    """What the program's metadata methods answer (edgespec.export.constants)."""

    sample_rate: int
    hop: int
    n_mels: int
    max_samples: int
    takes_waveform: bool
    vocab_size: int

    def constant_methods(self) -> dict[str, object]:
        return {
            C.GET_SAMPLE_RATE: self.sample_rate,
            C.GET_HOP_LENGTH: self.hop,
            C.GET_N_MELS: self.n_mels,
            C.GET_MAX_SAMPLES: self.max_samples,
            C.GET_TAKES_WAVEFORM: self.takes_waveform,
            C.GET_VOCAB_SIZE: self.vocab_size,
        }


def recognizer_module(frontend: LogMel, encoder: Conformer, takes_waveform: bool) -> nn.Module:
    return WaveformConformer(frontend, encoder) if takes_waveform else encoder


def export_recognizer(module: nn.Module, meta: AsrMeta) -> torch.export.ExportedProgram:
    """`torch.export` with a dynamic length. The example input has the largest length: the
    memory plan of ExecuTorch 1.5 sizes buffers from the example, not from the Dim's max."""
    a = module.encoder.args if isinstance(module, WaveformConformer) else module.args
    min_samples = 2 * a.samples_per_frame  # two output frames
    # lengths in whole output frames (2 hops): with a free length torch.export cannot prove the
    # guards of the frame count; the runtime drops the < 2 hop tail, which keeps the count
    step = a.samples_per_frame
    k = torch.export.Dim("output_frames", min=-(-min_samples // step), max=meta.max_samples // step)
    if meta.takes_waveform:
        example = torch.zeros(1, meta.max_samples // step * step)
        shapes = ({1: step * k},)
    else:  # features of such a waveform: 1 + 2 k frames
        example = torch.zeros(1, a.n_mels, a.feature_frames(meta.max_samples // step * step))
        shapes = ({2: 2 * k + 1},)
    with torch.no_grad():
        return torch.export.export(module, (example,), dynamic_shapes=shapes, strict=False)


def usable_samples(n: int, hop: int) -> int:
    """The samples of an n-sample waveform a waveform program takes: whole output frames
    (2 hops). The output frame count, n // (2 hop) + 1, is unchanged."""
    return n // (2 * hop) * (2 * hop)
