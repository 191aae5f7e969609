"""The sections of a speech recognition recipe (``task: asr``) and `AsrRecipe`, which holds them
(the quantization and numerics sections are the language model's, with other defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from edgespec.config.lm_sections import NumericsConfig, QuantConfig
from edgespec.config.records import Record, require


@dataclass(frozen=True)
class SpeechModelConfig(Record):
    """source: ``hama-asr`` (the hama package's Conformer, read from the installed package)
    or a path to a ``.hama`` file of the same architecture. frontend: where the log-mel
    features are computed: ``program`` (the program takes the waveform) or ``host``
    (the program takes features [1, n_mels, frames])."""

    PATH: ClassVar[str] = "model"
    source: str = "hama-asr"
    frontend: Literal["program", "host"] = "program"
    max_seconds: float = 30.0

    def _check(self) -> None:
        require(bool(self.source), self._at("source"), "must not be empty")
        require(1.0 <= self.max_seconds <= 600.0, self._at("max_seconds"), f"must be in [1, 600], got {self.max_seconds}")


@dataclass(frozen=True)
class StreamingConfig(Record):
    """Chunked recognition: each call encodes `chunk_frames` output frames (20 ms each) with
    `left_frames` of past and `right_frames` of future (look-ahead) context."""

    PATH: ClassVar[str] = "streaming"
    chunk_frames: int = 32
    left_frames: int = 128
    right_frames: int = 8

    def _check(self) -> None:
        require(1 <= self.chunk_frames <= 1000, self._at("chunk_frames"), f"must be in [1, 1000], got {self.chunk_frames}")
        require(0 <= self.left_frames <= 1000, self._at("left_frames"), f"must be in [0, 1000], got {self.left_frames}")
        require(0 <= self.right_frames <= 100, self._at("right_frames"), f"must be in [0, 100], got {self.right_frames}")


@dataclass(frozen=True)
class CtcConfig(Record):
    """Greedy CTC decoding: frame argmax of log_probs / temperature with `blank_bias` added
    to the blank (hama's defaults: 0.95 and -0.1)."""

    PATH: ClassVar[str] = "ctc"
    temperature: float = 0.95
    blank_bias: float = -0.1

    def _check(self) -> None:
        require(0.0 < self.temperature <= 10.0, self._at("temperature"), f"must be in (0, 10], got {self.temperature}")


@dataclass(frozen=True)
class AsrGatesConfig(Record):
    """What an ASR bundle must show on the `asr` suite. max_per_increase: phoneme error rate
    above the fp32 eager model's (absolute, 0.01 = one point); max_rtf: real-time factor of
    whole-utterance recognition (compute seconds per audio second; 0 turns it off)."""

    PATH: ClassVar[str] = "validate.gates"
    max_per_increase: float = 0.01
    max_chunked_per_increase: float = 0.01
    max_rtf: float = 0.05

    def _check(self) -> None:
        require(self.max_rtf >= 0.0, self._at("max_rtf"), f"must be >= 0, got {self.max_rtf}")


@dataclass(frozen=True)
class AsrValidateConfig(Record):
    """The `asr` suite: the LibriVox sentences of pocketsphinx-testdata; runs per utterance
    for timing (median); threads of the program."""

    PATH: ClassVar[str] = "validate"
    enabled: bool = True
    runs: int = 3
    threads: int = 1
    gates: AsrGatesConfig = field(default_factory=AsrGatesConfig)

    def _check(self) -> None:
        require(1 <= self.runs <= 100, self._at("runs"), f"must be in [1, 100], got {self.runs}")
        require(1 <= self.threads <= 64, self._at("threads"), f"must be in [1, 64], got {self.threads}")


def _asr_quant() -> QuantConfig:
    return QuantConfig(scheme="8da8w", kernel="xnnpack")


def _asr_numerics() -> NumericsConfig:
    # "prompts" are utterances here: 3 LibriVox sentences calibrate, the other 2 are held out
    return NumericsConfig(calibration_prompts=3, heldout_prompts=2)


@dataclass(frozen=True)
class AsrRecipe(Record):
    """A speech recognition export (``task: asr``): Conformer CTC -> ExecuTorch program."""

    TASK: ClassVar[str] = "asr"  # its task kind (edgespec.config.RECIPE_KINDS)
    name: str = "conformer-hama"
    task: Literal["asr"] = "asr"
    model: SpeechModelConfig = field(default_factory=SpeechModelConfig)
    quant: QuantConfig = field(default_factory=_asr_quant)
    numerics: NumericsConfig = field(default_factory=_asr_numerics)
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    ctc: CtcConfig = field(default_factory=CtcConfig)
    validate: AsrValidateConfig = field(default_factory=AsrValidateConfig)

    def _check(self) -> None:
        require(bool(self.name), "name", "must not be empty")
        require(
            self.quant.scheme in ("fp32", "fp16", "8da8w", "8da4w"), "quant.scheme", f"an asr recipe takes fp32, fp16, 8da8w or 8da4w, got {self.quant.scheme}"
        )
        require(self.quant.embedding_bits == 0, "quant.embedding_bits", "a Conformer has no embedding table; leave it 0")
        require(
            self.quant.kernel == "xnnpack",
            "quant.kernel",
            "a speech program runs on XNNPACK (edgespec's block kernel serves language models): set quant.kernel: xnnpack",
        )
