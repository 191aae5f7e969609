"""Run an ASR bundle's program: whole utterances or streaming chunks, then greedy CTC.

Streaming re-encodes a window per chunk: `left` output frames of past context, the chunk,
and `right` frames of look-ahead; only the chunk's frames are kept. Output frame j covers
samples around 320 j (hop 160 x stride 2), so a window of frames [a, b) is the samples
[320 a, 320 b) and its frame k is frame a + k of the utterance.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from edgespec.errors import EdgespecError
from edgespec.export import constants as C
from edgespec.manifest import LAYOUT, AsrManifest
from edgespec.runtime.runner import set_threads
from edgespec.speech.ctc import Transcript, decode
from edgespec.speech.recognizer_program import usable_samples

TOKENS = LAYOUT.phoneme_tokens
FRONTEND = LAYOUT.frontend


@dataclass(frozen=True)
class Window:
    """One streaming call: encode output frames [start, stop), keep [keep_start, keep_stop)."""

    start: int
    keep_start: int
    keep_stop: int
    stop: int


def chunk_windows(n_frames: int, chunk: int, left: int, right: int) -> list[Window]:
    """The windows that cover frames [0, n_frames) in chunks, each with its context."""
    return [Window(max(0, s - left), s, min(s + chunk, n_frames), min(n_frames, s + chunk + right)) for s in range(0, n_frames, chunk)]


def stream_log_probs(
    run: Callable[[np.ndarray], torch.Tensor], wave: np.ndarray, step: int, min_samples: int, chunk: int, left: int, right: int
) -> tuple[torch.Tensor, list[float]]:
    """Log-probabilities [T, V] of `wave` from windows of `run` (samples -> [frames, V]), step
    samples per output frame; and the seconds of each call."""
    n_frames = len(wave) // step + 1
    parts, times = [], []
    for w in chunk_windows(n_frames, chunk, left, right):
        seg = wave[w.start * step : w.stop * step]
        if len(seg) < min_samples:  # a short last window: zeros after the end, as the front end pads
            seg = np.pad(seg, (0, min_samples - len(seg)))
        t = time.perf_counter()
        lp = run(seg)
        times.append(time.perf_counter() - t)
        parts.append(lp[w.keep_start - w.start : w.keep_stop - w.start])
    return torch.cat(parts), times


@dataclass
class Recognition:
    transcript: Transcript
    log_probs: torch.Tensor  # [T, V]
    seconds: float  # compute time of the program calls
    audio_seconds: float
    chunk_seconds: list[float] = field(default_factory=list)  # per streaming call

    @property
    def rtf(self) -> float:
        return self.seconds / self.audio_seconds


class Recognizer:
    """An ASR bundle loaded for recognition (threads: ExecuTorch threadpool size, 0 = default)."""

    def __init__(self, bundle_dir: str | Path, threads: int = 0):
        from edgespec.bundle import read_manifest, verify_checksums
        from edgespec.runtime.runner import Program

        d = Path(bundle_dir)
        self.manifest = read_manifest(d)
        if not isinstance(self.manifest, AsrManifest):
            raise EdgespecError(
                f"bundle '{d}' is a {self.manifest.KIND} bundle, not a speech recognizer's: use `{self.manifest.USE.format(bundle=d)}` (or export a speech bundle with `edgespec export recipes/conformer-hama.yaml`)"
            )
        verify_checksums(d, self.manifest, remembered=True)
        set_threads(threads)
        self.runner = Program(d / LAYOUT.program)
        self.tokens: list[str] = json.loads((d / TOKENS).read_text(encoding="utf-8"))
        ctc = self.manifest.ctc
        self.temperature, self.blank_bias = float(ctc["temperature"]), float(ctc["blank_bias"])
        self.sample_rate = int(self.runner.constant(C.GET_SAMPLE_RATE))
        self.max_samples = int(self.runner.constant(C.GET_MAX_SAMPLES))
        self.hop = int(self.runner.constant(C.GET_HOP_LENGTH))
        self.frontend = None
        if not bool(self.runner.constant(C.GET_TAKES_WAVEFORM)):
            from edgespec.models.conformer import ConformerArgs, LogMel

            self.frontend = LogMel(ConformerArgs(**self.manifest.model.args))
            self.frontend.load_state_dict(torch.load(d / FRONTEND, weights_only=True))

    def _run(self, wave: np.ndarray) -> torch.Tensor:
        wave = wave[: usable_samples(len(wave), self.hop)]
        x = torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32))[None]
        if self.frontend is not None:
            with torch.no_grad():
                x = self.frontend(x).contiguous()
        return self.runner.call_forward(x)[0][0]  # [T, V]

    @property
    def min_samples(self) -> int:
        """Two output frames (the shortest input the program is exported for)."""
        return 4 * self.hop

    def _check_length(self, wave: np.ndarray) -> None:
        if len(wave) < self.min_samples:
            raise EdgespecError(f"audio is too short ({len(wave)} samples; at least {self.min_samples}, {1000 * self.min_samples / self.sample_rate:.0f} ms)")

    def recognize(self, wave: np.ndarray) -> Recognition:
        """The whole utterance in one call (at most the program's max_samples)."""
        self._check_length(wave)
        if len(wave) > self.max_samples:
            raise EdgespecError(
                f"audio is {len(wave) / self.sample_rate:.1f} s, longer than this program takes in one call ({self.max_samples / self.sample_rate:.0f} s): use streaming (--stream)"
            )
        t = time.perf_counter()
        lp = self._run(wave)
        dt = time.perf_counter() - t
        return Recognition(self._decode(lp), lp, dt, len(wave) / self.sample_rate)

    def recognize_streaming(self, wave: np.ndarray, chunk: int, left: int, right: int) -> Recognition:
        """Chunk by chunk, each window re-encoded with its left and right context."""
        self._check_length(wave)
        lp, times = stream_log_probs(self._run, wave, 2 * self.hop, self.min_samples, chunk, left, right)
        return Recognition(self._decode(lp), lp, sum(times), len(wave) / self.sample_rate, times)

    def _decode(self, lp: torch.Tensor) -> Transcript:
        return decode(lp, self.tokens, self.temperature, self.blank_bias)


def verify_asr_program(bundle_dir: str | Path, manifest: AsrManifest) -> dict:
    """Load a speech bundle's program and check it against the manifest: every method the
    manifest lists, the metadata of the contract, as many outputs as tokens.json has tokens.
    Returns the metadata it read; EdgespecError naming the first difference."""
    from edgespec.runtime.runner import Program

    d = Path(bundle_dir)
    prog = Program(d / LAYOUT.program)
    missing = sorted(set(manifest.methods) - set(prog.program.method_names))
    if missing:
        raise EdgespecError(f"bundle '{d}': the program lacks methods the manifest lists: {missing}")
    meta = {name: prog.constant(name) for name in C.ASR_METADATA_METHODS}
    n_tokens = len(json.loads((d / TOKENS).read_text(encoding="utf-8")))
    if int(meta[C.GET_VOCAB_SIZE]) != n_tokens:
        raise EdgespecError(f"bundle '{d}': the program has {meta[C.GET_VOCAB_SIZE]} outputs but {TOKENS} {n_tokens} tokens")
    if bool(meta[C.GET_TAKES_WAVEFORM]) != (manifest.recipe.model.frontend == "program"):
        raise EdgespecError(
            f"bundle '{d}': the program's input ({'waveform' if meta[C.GET_TAKES_WAVEFORM] else 'features'}) differs from the recipe's front end"
        )
    return meta
