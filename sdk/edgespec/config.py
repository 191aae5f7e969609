"""Typed, frozen, validated configuration: the single source of truth for a recipe.

YAML files, ``FIELD=VALUE`` overrides and CLI flags only ever *produce* these objects. Every
construction checks every field; an unknown or invalid field raises `EdgespecError` naming
its dotted path (``recipe field 'quant.scheme': ...``).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args, get_origin

from edgespec.errors import EdgespecError

QuantScheme = Literal["fp32", "fp16", "8da4w", "8da8w", "int8wo"]
SUITE_NAMES = ("summarization", "translation", "qa", "math", "sql", "rag")
"""The built-in validation suites, in report order (edgespec.corpus.validation_sets builds them)."""


_FIELD_KIND = contextvars.ContextVar("field_kind", default="recipe field")


@contextlib.contextmanager
def parsing(kind: str):
    """Errors raised while building sections inside this block name their field as
    ``{kind} 'a.b'`` (records other than recipes reuse this machinery: the bundle manifest)."""
    token = _FIELD_KIND.set(kind)
    try:
        yield
    finally:
        _FIELD_KIND.reset(token)


def _require(cond: bool, path: str, msg: str) -> None:
    if not cond:
        raise EdgespecError(f"{_FIELD_KIND.get()} '{path}': {msg}")


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


class _Section:
    """A recipe section. Every construction type-checks the fields (ints become floats, lists
    tuples, mappings sections) and runs ``_check``; errors name ``PATH.field``."""

    PATH: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for name, tp in _field_types(type(self)).items():
            object.__setattr__(self, name, _check_type(getattr(self, name), tp, _join(self.PATH, name)))
        self._check()

    def _check(self) -> None:
        """Value checks beyond the types."""

    def _at(self, name: str) -> str:
        """The dotted path of one of this section's fields."""
        return _join(self.PATH, name)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ModelConfig(_Section):
    """Which model to load and how long its context is.

    source: an embedded model name (``smollm2-135m-instruct``), a ``.gguf`` file, or a
    local Hugging Face-format directory (config.json + *.safetensors + tokenizer.json).
    """

    PATH: ClassVar[str] = "model"
    source: str = "smollm2-135m-instruct"
    max_seq_len: int = 1024
    chat_template: bool = True

    def _check(self) -> None:
        _require(bool(self.source), self._at("source"), "must not be empty")
        _require(16 <= self.max_seq_len <= 32768, self._at("max_seq_len"), f"must be in [16, 32768], got {self.max_seq_len}")


@dataclass(frozen=True)
class QuantConfig(_Section):
    """torchao quantization of the exported program.

    scheme: ``fp32`` (none), ``fp16`` (fp16 weights and activations; KV cache and attention
    in fp32), ``8da4w`` (int8 dynamic activations, int4 grouped weights), ``8da8w`` (int8
    dynamic activations, int8 per-channel weights). ``int8wo`` (int8 weight-only) is refused:
    ExecuTorch's XNNPACK lowering has no kernel for it. ``embedding_bits`` 0 keeps the
    embedding in fp32; 4 or 8 quantizes it weight-only with ``group_size``.

    carry_blocks: a linear stored in the source file as GGUF Q4_0/Q4_1 blocks keeps the
    file's own codes and scales (no second rounding; edgespec.quant); false rounds the
    dequantized weights again. rounding: how weights without carried blocks get their scales,
    ``maxabs`` (torchao's default) or ``mse`` (least squared error per block). head_bits: the
    lm head's weights in 8da4w, 4 (group_size blocks) or 8 (per output channel).

    kernel: what computes the 8da4w/8da8w linears (fp32 and fp16 programs have none).
    ``edgespec`` (the default: edgespec's own op over GGUF-style blocks,
    `edgespec.kernels.block_linear`, int8 activations per block of 32 as llama.cpp computes,
    Q4_0/Q4_1/Q4_K/Q6_K/Q8_0 carried exactly; the glue between linears and the attention are
    edgespec's ops too, so the program needs edgespec's kernel library wherever it runs) or
    ``xnnpack`` (torchao's tensors lowered to XNNPACK's qd8 GEMMs, int8 activations per token:
    a program ExecuTorch's stock runner and the prebuilt Android AAR run as they are). With
    ``edgespec`` the block is 32 (group_size 32) and the lm head's 8 bits are Q8_0 blocks.
    """

    PATH: ClassVar[str] = "quant"
    scheme: QuantScheme = "8da4w"
    group_size: int = 32
    embedding_bits: int = 0
    carry_blocks: bool = True
    rounding: Literal["maxabs", "mse"] = "maxabs"
    head_bits: int = 8
    kernel: Literal["edgespec", "xnnpack"] = "edgespec"

    @property
    def block_kernel(self) -> bool:
        """The program's linears are edgespec's block kernel (8da4w/8da8w with kernel edgespec)."""
        return self.kernel == "edgespec" and self.scheme in ("8da4w", "8da8w")

    def _check(self) -> None:
        _require(
            self.scheme != "int8wo",
            self._at("scheme"),
            "int8wo (int8 weight-only linears) does not lower to XNNPACK in ExecuTorch 1.5 (no kernel for torchao::dequantize_affine); use 8da8w (int8 weights with dynamic int8 activations) or 8da4w",
        )
        _require(self.group_size > 0 and self.group_size % 16 == 0, self._at("group_size"), f"must be a positive multiple of 16, got {self.group_size}")
        _require(self.embedding_bits in (0, 4, 8), self._at("embedding_bits"), f"must be 0 (off), 4 or 8, got {self.embedding_bits}")
        _require(self.head_bits in (4, 8), self._at("head_bits"), f"must be 4 or 8, got {self.head_bits}")
        _require(
            self.kernel != "edgespec" or self.scheme not in ("8da4w", "8da8w") or self.group_size == 32,
            self._at("kernel"),
            f"edgespec's block kernel computes linears in blocks of 32, not group_size {self.group_size}; use group_size 32 or kernel: xnnpack",
        )


@dataclass(frozen=True)
class DrafterConfig(_Section):
    """The drafter of the speculative program and how it drafts (recipe section ``drafter:``;
    recipes before 2026-12-02 call it ``streams:`` with the kind in ``streams.drafter``).

    kind: ``streams`` (Speculative Streaming: gamma streams over the top n_layers,
    multi-stream attention), ``medusa`` (gamma Medusa-1 heads on the final hidden state) or
    ``hydra`` (heads that also see the token before their target) or ``eagle`` (one draft
    decoder layer over fused low/mid/top features of the whole context, drafting chains);
    for heads n_layers is only where training caches its features, eagle ignores it, and
    both are lossless.

    mode: ``lossless`` (main stream = untouched base model) or ``shared`` (adapters shared
    with the main stream, fine-tuned). tree: branching per depth (top-k of stream d).
    weights: trained drafter weights (a file made by ``edgespec train``); empty = no
    speculative methods. draft_vocab: the drafting lm head covers only the N most frequent tokens of the training
    corpus (verification keeps the full vocabulary); 0 = the full vocabulary.
    """

    PATH: ClassVar[str] = "drafter"
    kind: Literal["streams", "medusa", "hydra", "eagle"] = "streams"
    mode: Literal["lossless", "shared"] = "lossless"
    gamma: int = 3
    n_layers: int = 4
    lora_rank: int = 16
    f_rank: int = 0
    tree: tuple[int, ...] = (3, 2, 1)
    weights: str = ""
    draft_vocab: int = 0

    def _check(self) -> None:
        _require(
            self.kind == "streams" or self.mode == "lossless",
            self._at("mode"),
            "draft heads leave the base model untouched (so does the eagle layer): mode must be lossless",
        )
        _require(self.draft_vocab >= 0, self._at("draft_vocab"), f"must be >= 0 (0 = the full vocabulary), got {self.draft_vocab}")
        _require(1 <= self.gamma <= 8, self._at("gamma"), f"must be in [1, 8], got {self.gamma}")
        _require(self.n_layers >= 1, self._at("n_layers"), f"must be >= 1, got {self.n_layers}")
        _require(self.lora_rank >= 0 and self.f_rank >= 0, self._at("lora_rank"), "ranks must be >= 0")
        _require(
            1 <= len(self.tree) <= self.gamma and all(k >= 1 for k in self.tree),
            self._at("tree"),
            f"needs 1..gamma positive branching factors, got {list(self.tree)}",
        )


@dataclass(frozen=True)
class TrainConfig(_Section):
    """Stream training (``edgespec train``; edgespec.speculative.train takes it as is).

    data: a JSONL file, either self-distilled (``prompt_ids``/``response_ids``, written by
    ``edgespec distill``) or text pairs (``prompt``/``response``). stream_weights: a_j, the
    loss weight of stream j (paper: 0.1 each); main_weight: a0, the next-token loss weight
    (shared mode only). soft_weight: b in (1 - b) CE(hard) + b CE(teacher's top-K) for each
    stream, and in shared mode for the main stream too, where the teacher's top-K term stands
    in for the KL to the original model (truncated to its top K: at b = 0.5 it did not keep
    the answers' quality, docs/speculative-streaming.md; needs data with soft labels:
    ``edgespec distill --source``). bf16: the MSA layers
    and the lm head run under bf16 autocast. With ``drafter.draft_vocab`` set, the streams'
    loss is taken over that draft vocabulary, as the program drafts.
    """

    PATH: ClassVar[str] = "train"
    data: str = "data/distill/train.jsonl"
    out_dir: str = "runs/streams"
    steps: int = 1000
    batch_size: int = 8
    seq_len: int = 384
    length_window: int = 32  # batches of similar lengths: sorted within windows of this many batches (1 = random)
    lr: float = 5e-4
    warmup_steps: int = 50
    stream_weights: tuple[float, ...] = (1.0, 0.5, 0.25)
    main_weight: float = 1.0
    soft_weight: float = 0.0  # b: weight of the teacher's top-K (soft labels) in each stream's loss
    checkpoint_every: int = 100
    seed: int = 0
    bf16: bool = True

    def _check(self) -> None:
        _require(self.steps >= 1, self._at("steps"), "must be >= 1")
        _require(self.batch_size >= 1, self._at("batch_size"), "must be >= 1")
        _require(self.seq_len >= 16, self._at("seq_len"), "must be >= 16")
        _require(self.length_window >= 1, self._at("length_window"), "must be >= 1 (1 = random batches)")
        _require(self.lr > 0, self._at("lr"), "must be > 0")
        _require(0.0 <= self.soft_weight <= 1.0, self._at("soft_weight"), "must be in [0, 1]")


@dataclass(frozen=True)
class DistillConfig(_Section):
    """Self-distillation data (``edgespec distill``): the model's own greedy answers to training
    prompts. suites: prompt suites of edgespec.corpus.prompts (empty: all); split: ``train`` or
    ``heldout``. From the eager model (``--source``): `batch` sequences decoded at once in bf16,
    the `top_k` probabilities of each response position kept, `shard_size` prompts per shard
    file, prompts longer than `max_prompt_tokens` skipped, `workers` processes (each with its
    own teacher and cores/workers threads)."""

    PATH: ClassVar[str] = "distill"
    suites: tuple[str, ...] = ()
    split: Literal["train", "heldout"] = "train"
    prompts: int = 3000
    max_new_tokens: int = 192
    batch: int = 64
    top_k: int = 8
    shard_size: int = 1024
    max_prompt_tokens: int = 448
    workers: int = 1

    def _check(self) -> None:
        for name in ("prompts", "max_new_tokens", "batch", "top_k", "shard_size"):
            _require(getattr(self, name) >= 1, self._at(name), f"must be >= 1, got {getattr(self, name)}")
        _require(self.max_prompt_tokens >= 8, self._at("max_prompt_tokens"), f"must be >= 8, got {self.max_prompt_tokens}")
        _require(1 <= self.workers <= 64, self._at("workers"), f"must be in [1, 64], got {self.workers}")


@dataclass(frozen=True)
class TuneConfig(_Section):
    """Choosing the draft tree by measurement (``edgespec tune``): acceptance on the greedy
    continuations (`max_new_tokens`) of `prompts` held-out prompts, call costs measured at
    position `context`, trees of up to `max_size` nodes."""

    PATH: ClassVar[str] = "tune"
    prompts: int = 24
    max_new_tokens: int = 96
    max_size: int = 24
    context: int = 256

    def _check(self) -> None:
        _require(self.prompts >= 1, self._at("prompts"), f"must be >= 1, got {self.prompts}")
        _require(self.max_new_tokens >= 8, self._at("max_new_tokens"), f"must be >= 8, got {self.max_new_tokens}")
        _require(2 <= self.max_size <= 64, self._at("max_size"), f"must be in [2, 64], got {self.max_size}")
        _require(self.context >= 1, self._at("context"), f"must be >= 1, got {self.context}")


@dataclass(frozen=True)
class NumericsConfig(_Section):
    """Normalizer search (``edgespec normsearch``; a stage of ``edgespec export``).

    format: the low-precision format the norm layers are checked (and, for a program in that
    format, stabilized) for. guarantee: only accept pre-normalizers proven safe for every input.
    """

    PATH: ClassVar[str] = "numerics"
    search: bool = True
    format: Literal["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"] = "fp16"
    guarantee: bool = True
    calibration_prompts: int = 8
    heldout_prompts: int = 4

    def _check(self) -> None:
        _require(self.calibration_prompts >= 1, self._at("calibration_prompts"), "must be >= 1")
        _require(self.heldout_prompts >= 1, self._at("heldout_prompts"), "must be >= 1")


@dataclass(frozen=True)
class ExportConfig(_Section):
    """Lowering to ExecuTorch (always XNNPACK-delegated).

    step_attention: how a speculative program attends: ``exact`` (edgespec's attention kernel,
    sdk/edgespec/kernels, in both `forward` and `spec_step`: all rows in one call, each row's
    arithmetic independent of the row count, so speculative greedy output equals
    autoregressive greedy output bitwise by construction; built with the system C++
    compiler on first use), ``rows`` (ExecuTorch's `llama::custom_sdpa`, one call per step
    row) or ``block`` (`custom_sdpa`, one call for all rows). Programs without speculative
    methods always use `custom_sdpa`, which ExecuTorch's stock runner has.
    docs/speculative-program.md."""

    PATH: ClassVar[str] = "export"
    step_attention: Literal["exact", "rows", "block"] = "exact"


@dataclass(frozen=True)
class GatesConfig(_Section):
    """What a bundle must show before `edgespec export` writes it (`edgespec validate` exits 1).

    min_speedup: speculative / autoregressive decode tokens/s on the suites (median of the
    per-prompt ratios); 0 turns it off, > 0 requires speculative methods.
    lossless: speculative greedy output identical to autoregressive greedy output on every prompt.
    min_score_ratio: the mean task score (averaged over suites) over the fp32 base model's on
    the same prompts is at least this; 0 turns it off.
    min_top1_agreement, max_perplexity_ratio: fidelity on held-out text against the fp32 source
    model (edgespec.harness.fidelity): the share of next tokens whose argmax agrees, and the
    program's perplexity over the source's; 0 turns each off. A 4-bit re-rounding of the
    default model fails both (65% agreement, ratio 1.72); the carried-over blocks pass.
    no_overflow: the chosen pre-normalizers had no overflow/underflow on any search row.
    """

    PATH: ClassVar[str] = "validate.gates"
    min_speedup: float = 0.0
    lossless: bool = True
    min_score_ratio: float = 0.90
    min_top1_agreement: float = 0.90
    max_perplexity_ratio: float = 1.05
    no_overflow: bool = True

    def _check(self) -> None:
        _require(0.0 <= self.min_speedup <= 100.0, self._at("min_speedup"), f"must be in [0, 100], got {self.min_speedup}")
        _require(0.0 <= self.min_score_ratio <= 10.0, self._at("min_score_ratio"), f"must be in [0, 10] (0: off), got {self.min_score_ratio}")
        _require(0.0 <= self.min_top1_agreement <= 1.0, self._at("min_top1_agreement"), f"must be in [0, 1] (0: off), got {self.min_top1_agreement}")
        _require(
            self.max_perplexity_ratio == 0.0 or self.max_perplexity_ratio >= 1.0,
            self._at("max_perplexity_ratio"),
            f"must be >= 1 or 0 (off), got {self.max_perplexity_ratio}",
        )


@dataclass(frozen=True)
class ValidateConfig(_Section):
    """Host validation of the program (`edgespec validate`; a stage of `edgespec export`).

    suites: built-in suites (see edgespec.corpus.validation_sets) or JSONL files of your own.
    reference: ``fp32`` also runs the unquantized base model eagerly on the same prompts (cached
    on disk) for the accuracy gate; ``none`` skips it. runs: repetitions per prompt (median).
    lookup > 0: also measure context drafting through `spec_step` (a suffix match of at least
    this many tokens; see edgespec.runtime.generate). fidelity_chunks: chunks of 512 held-out
    tokens on which the program is compared with the fp32 source model (each scores its
    second half; needs reference fp32); 0 skips it.
    """

    PATH: ClassVar[str] = "validate"
    enabled: bool = True
    suites: tuple[str, ...] = SUITE_NAMES
    prompts_per_suite: int = 8
    seed: int = 0
    runs: int = 1
    lookup: int = 0
    reference: Literal["fp32", "none"] = "fp32"
    fidelity_chunks: int = 4
    gates: GatesConfig = field(default_factory=GatesConfig)

    def _check(self) -> None:
        _require(len(self.suites) >= 1, self._at("suites"), "needs at least one suite")
        for i, s in enumerate(self.suites):
            _require(s in SUITE_NAMES or s.endswith(".jsonl"), self._at(f"suites[{i}]"), f"must be one of {list(SUITE_NAMES)} or a .jsonl file, got {s!r}")
        _require(1 <= self.prompts_per_suite <= 10000, self._at("prompts_per_suite"), f"must be in [1, 10000], got {self.prompts_per_suite}")
        _require(1 <= self.runs <= 100, self._at("runs"), f"must be in [1, 100], got {self.runs}")
        _require(0 <= self.lookup <= 8, self._at("lookup"), f"must be in [0, 8], got {self.lookup}")
        _require(0 <= self.fidelity_chunks <= 200, self._at("fidelity_chunks"), f"must be in [0, 200], got {self.fidelity_chunks}")


@dataclass(frozen=True)
class Recipe(_Section):
    """One export, fully described. ``Recipe()`` is the built-in default recipe."""

    name: str = "smollm2-135m"
    model: ModelConfig = field(default_factory=ModelConfig)
    quant: QuantConfig = field(default_factory=QuantConfig)
    drafter: DrafterConfig = field(default_factory=DrafterConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    numerics: NumericsConfig = field(default_factory=NumericsConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    validate: ValidateConfig = field(default_factory=ValidateConfig)

    def _check(self) -> None:
        _require(bool(self.name), "name", "must not be empty")
        _require(len(self.train.stream_weights) >= self.drafter.gamma, "train.stream_weights", f"needs one weight per stream ({self.drafter.gamma})")

    def replace(self, **sections: Any) -> Recipe:
        """A copy with whole sections or fields changed, e.g. ``replace(quant={"scheme": "fp32"})``."""
        data = self.to_dict()
        for key, value in sections.items():
            if isinstance(value, dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return from_dict(Recipe, data)


# --- speech recognition recipes (task: asr) -------------------------------------------------


@dataclass(frozen=True)
class SpeechModelConfig(_Section):
    """source: ``hama-asr`` (the hama package's Conformer, read from the installed package)
    or a path to a ``.hama`` file of the same architecture. frontend: where the log-mel
    features are computed: ``program`` (the program takes the waveform) or ``host``
    (the program takes features [1, n_mels, frames])."""

    PATH: ClassVar[str] = "model"
    source: str = "hama-asr"
    frontend: Literal["program", "host"] = "program"
    max_seconds: float = 30.0

    def _check(self) -> None:
        _require(bool(self.source), self._at("source"), "must not be empty")
        _require(1.0 <= self.max_seconds <= 600.0, self._at("max_seconds"), f"must be in [1, 600], got {self.max_seconds}")


@dataclass(frozen=True)
class StreamingConfig(_Section):
    """Chunked recognition: each call encodes `chunk_frames` output frames (20 ms each) with
    `left_frames` of past and `right_frames` of future (look-ahead) context."""

    PATH: ClassVar[str] = "streaming"
    chunk_frames: int = 32
    left_frames: int = 128
    right_frames: int = 8

    def _check(self) -> None:
        _require(1 <= self.chunk_frames <= 1000, self._at("chunk_frames"), f"must be in [1, 1000], got {self.chunk_frames}")
        _require(0 <= self.left_frames <= 1000, self._at("left_frames"), f"must be in [0, 1000], got {self.left_frames}")
        _require(0 <= self.right_frames <= 100, self._at("right_frames"), f"must be in [0, 100], got {self.right_frames}")


@dataclass(frozen=True)
class CtcConfig(_Section):
    """Greedy CTC decoding: frame argmax of log_probs / temperature with `blank_bias` added
    to the blank (hama's defaults: 0.95 and -0.1)."""

    PATH: ClassVar[str] = "ctc"
    temperature: float = 0.95
    blank_bias: float = -0.1

    def _check(self) -> None:
        _require(0.0 < self.temperature <= 10.0, self._at("temperature"), f"must be in (0, 10], got {self.temperature}")


@dataclass(frozen=True)
class AsrGatesConfig(_Section):
    """What an ASR bundle must show on the `asr` suite. max_per_increase: phoneme error rate
    above the fp32 eager model's (absolute, 0.01 = one point); max_rtf: real-time factor of
    whole-utterance recognition (compute seconds per audio second; 0 turns it off)."""

    PATH: ClassVar[str] = "validate.gates"
    max_per_increase: float = 0.01
    max_chunked_per_increase: float = 0.01
    max_rtf: float = 0.05

    def _check(self) -> None:
        _require(self.max_rtf >= 0.0, self._at("max_rtf"), f"must be >= 0, got {self.max_rtf}")


@dataclass(frozen=True)
class AsrValidateConfig(_Section):
    """The `asr` suite: the LibriVox sentences of pocketsphinx-testdata; runs per utterance
    for timing (median); threads of the program."""

    PATH: ClassVar[str] = "validate"
    enabled: bool = True
    runs: int = 3
    threads: int = 1
    gates: AsrGatesConfig = field(default_factory=AsrGatesConfig)

    def _check(self) -> None:
        _require(1 <= self.runs <= 100, self._at("runs"), f"must be in [1, 100], got {self.runs}")
        _require(1 <= self.threads <= 64, self._at("threads"), f"must be in [1, 64], got {self.threads}")


def _asr_quant() -> QuantConfig:
    return QuantConfig(scheme="8da8w", kernel="xnnpack")


def _asr_numerics() -> NumericsConfig:
    # "prompts" are utterances here: 3 LibriVox sentences calibrate, the other 2 are held out
    return NumericsConfig(calibration_prompts=3, heldout_prompts=2)


@dataclass(frozen=True)
class AsrRecipe(_Section):
    """A speech recognition export (``task: asr``): Conformer CTC -> ExecuTorch program."""

    name: str = "conformer-hama"
    task: Literal["asr"] = "asr"
    model: SpeechModelConfig = field(default_factory=SpeechModelConfig)
    quant: QuantConfig = field(default_factory=_asr_quant)
    numerics: NumericsConfig = field(default_factory=_asr_numerics)
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    ctc: CtcConfig = field(default_factory=CtcConfig)
    validate: AsrValidateConfig = field(default_factory=AsrValidateConfig)

    def _check(self) -> None:
        _require(bool(self.name), "name", "must not be empty")
        _require(
            self.quant.scheme in ("fp32", "fp16", "8da8w", "8da4w"), "quant.scheme", f"an asr recipe takes fp32, fp16, 8da8w or 8da4w, got {self.quant.scheme}"
        )
        _require(self.quant.embedding_bits == 0, "quant.embedding_bits", "a Conformer has no embedding table; leave it 0")
        _require(self.quant.kernel == "xnnpack", "quant.kernel", "a speech program's linears (with biases) run on XNNPACK: set quant.kernel: xnnpack")


RECIPE_KINDS: dict[str, type] = {"generate": Recipe, "asr": AsrRecipe}
"""A recipe's ``task`` field picks its class (absent: a language-model recipe)."""


def _recipe_class(data: dict) -> type:
    task = data.get("task", "generate")
    _require(task in RECIPE_KINDS, "task", f"must be one of {list(RECIPE_KINDS)}, got {task!r}")
    return RECIPE_KINDS[task]


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _check_type(value: Any, tp: Any, path: str) -> Any:
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return from_dict(tp, value, path)
    if origin is Literal:
        _require(value in get_args(tp), path, f"must be one of {list(get_args(tp))}, got {value!r}")
        return value
    if origin is tuple:
        _require(isinstance(value, (list, tuple)), path, f"must be a list, got {value!r}")
        (elem, *_rest) = get_args(tp)
        return tuple(_check_type(v, elem, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        _require(isinstance(value, dict), path, f"must be an object, got {value!r}")
        key_tp, value_tp = get_args(tp)
        return {_check_type(k, key_tp, f"{path}.<key>"): _check_type(v, value_tp, _join(path, str(k))) for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in get_args(tp):
            return None
        arms = [a for a in get_args(tp) if a is not type(None)]
        for arm in arms[:-1]:  # the first arm the value fits; the last one's error otherwise
            with contextlib.suppress(EdgespecError):
                return _check_type(value, arm, path)
        return _check_type(value, arms[-1], path)
    if tp is Any:
        return value
    if tp is bool:
        _require(isinstance(value, bool), path, f"must be true or false, got {value!r}")
    elif tp is int:
        _require(isinstance(value, int) and not isinstance(value, bool), path, f"must be an integer, got {value!r}")
    elif tp is float:
        _require(isinstance(value, (int, float)) and not isinstance(value, bool), path, f"must be a number, got {value!r}")
        value = float(value)
    elif tp is str:
        _require(isinstance(value, str), path, f"must be a string, got {value!r}")
    return value


def from_dict(cls: type, data: Any, path: str | None = None) -> Any:
    """Build the section ``cls`` from plain data, rejecting unknown fields by dotted path."""
    path = getattr(cls, "PATH", "") if path is None else path
    _require(isinstance(data, dict), path or "<recipe>", f"must be a mapping, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise EdgespecError(f"{_FIELD_KIND.get()} '{_join(path, str(key))}': unknown field (known: {', '.join(sorted(names))})")
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        _require(not required or f.name in data, _join(path, f.name), "is missing")
    return cls(**data)


# --- YAML and FIELD=VALUE overrides ---------------------------------------------------------


def _one_line(e: object) -> str:
    """A parser's message (YAML's span several lines) as one line for an `error:` line."""
    return " ".join(str(e).split())


@functools.cache
def _yaml_loader() -> type:
    """yaml.SafeLoader that also reads ``1e-3`` as a number (YAML 1.1 wants ``1.0e-3``)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))
    return Loader


def _yaml(text: str) -> Any:
    import yaml

    return yaml.load(text, Loader=_yaml_loader())


def _field_type(path: Sequence[str], root: type = Recipe) -> Any:
    """The annotated type of a dotted field of a `root` recipe, or None where there is no such field."""
    tp: Any = root
    for name in path:
        if not dataclasses.is_dataclass(tp):
            return None
        tp = _field_types(tp).get(name)
    return tp


def _override_value(text: str, raw: str, tp: Any) -> Any:
    """VALUE of FIELD=VALUE as YAML; a string field takes the text as is where YAML reads a
    scalar of another type (``name=2024``, ``drafter.weights=`` for empty)."""
    import yaml

    try:
        value = _yaml(raw)
    except yaml.YAMLError as e:
        if tp is str:
            return raw
        raise EdgespecError(f"override {text!r}: the value is not valid YAML ({_one_line(getattr(e, 'problem', None) or e)})") from None
    if tp is str and (value is None or isinstance(value, (bool, int, float))):
        return raw
    return value


def _merge(into: dict, key: str, value: Any) -> None:
    if isinstance(value, dict) and isinstance(into.get(key), dict):
        for k, v in value.items():
            _merge(into[key], k, v)
    else:
        into[key] = value


def _merge_overrides(data: dict, overrides: Sequence[str], root: type = Recipe) -> dict:
    """``data`` (recipe as plain data, changed in place) with every ``a.b=value`` set; a later
    override of the same field wins. Checking is left to `from_dict`."""
    for text in overrides:
        key, eq, raw = text.partition("=")
        path = _renamed_path(key.strip().split("."))
        if not eq or not all(path):
            raise EdgespecError(f"override '{text}': expected FIELD=VALUE with a dotted recipe field, e.g. quant.scheme=fp32")
        for i in range(1, len(path)):
            tp, head = _field_type(path[:i], root), ".".join(path[:i])
            if tp is not None and not dataclasses.is_dataclass(tp):
                raise EdgespecError(f"recipe field '{key.strip()}': unknown field ('{head}' is a value, not a section)")
        node = data
        for i, name in enumerate(path[:-1]):
            node = node.setdefault(name, {})
            _require(isinstance(node, dict), ".".join(path[: i + 1]), f"must be a mapping, got {type(node).__name__}")
        _merge(node, path[-1], _override_value(text, raw, _field_type(path, root)))
    return data


def apply_overrides(recipe: Recipe, overrides: Sequence[str]) -> Recipe:
    """``recipe`` with ``FIELD=VALUE`` overrides (e.g. ``quant.scheme=fp32``), checked as a file is."""
    cls = type(recipe)
    return from_dict(cls, _merge_overrides(recipe.to_dict(), overrides, cls)) if overrides else recipe


class RecipeDeprecation(UserWarning):
    """A recipe written in an older form was read; the message says what to write instead."""


_RENAMED_SECTIONS: dict[str, tuple[str, dict[str, str]]] = {"streams": ("drafter", {"drafter": "kind"})}
"""old section -> (new section, {old field: new field}) for recipes of earlier versions."""
_REMOVED_FIELDS = {("export", "backend"): "export.backend was never read (programs are always XNNPACK-delegated); remove it"}


def _renamed_path(path: list[str]) -> list[str]:
    """A dotted field path of an earlier recipe version in today's names (one RecipeDeprecation note)."""
    import warnings

    if path and path[0] in _RENAMED_SECTIONS:
        new, fields = _RENAMED_SECTIONS[path[0]]
        renamed = [new, *path[1:]]
        if len(path) > 1:
            renamed[1] = fields.get(path[1], path[1])
        warnings.warn(f"recipe field '{'.'.join(path)}' is now '{'.'.join(renamed)}'", RecipeDeprecation, stacklevel=4)
        return renamed
    return path


def upgrade_recipe_data(data: dict, note: bool = True) -> dict:
    """Recipe data of an earlier version in today's shape (a copy): renamed sections and fields
    are moved, removed fields dropped; with `note`, one `RecipeDeprecation` warning says what
    to change in the file."""
    import warnings

    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    notes = []
    for old, (new, fields) in _RENAMED_SECTIONS.items():
        if isinstance(data.get(old), dict) and new not in data:
            section = data.pop(old)
            data[new] = {fields.get(k, k): v for k, v in section.items()}
            renamed = ", ".join(f"{old}.{k} -> {new}.{v}" for k, v in fields.items() if k in section)
            notes.append(f"the '{old}:' section is now '{new}:'" + (f" ({renamed})" if renamed else ""))
    for (section, name), why in _REMOVED_FIELDS.items():
        if isinstance(data.get(section), dict) and name in data[section]:
            del data[section][name]
            notes.append(why)
    if notes and note:
        warnings.warn("recipe in an older form: " + "; ".join(notes), RecipeDeprecation, stacklevel=3)
    return data


def load_recipe(path: str | Path | None, overrides: Sequence[str] = ()) -> Recipe:
    """Read a YAML recipe (``None``: the built-in default recipe) and apply ``FIELD=VALUE`` overrides."""
    data: Any = {}
    if path is not None:
        import yaml

        p = Path(path)
        if not p.is_file():
            raise EdgespecError(f"recipe '{p}' not found")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise EdgespecError(f"recipe '{p}' is not UTF-8 text (byte {e.start}: {e.object[e.start : e.start + 1]!r})") from None
        try:
            data = _yaml(text) or {}
        except yaml.YAMLError as e:
            raise EdgespecError(f"recipe '{p}' is not valid YAML: {_one_line(e)}") from None
        _require(isinstance(data, dict), "<recipe>", f"must be a mapping, got {type(data).__name__}")
    data = upgrade_recipe_data(data)
    cls = _recipe_class(data)
    return from_dict(cls, _merge_overrides(data, overrides, cls))


def recipe_from_args(args: Sequence[str]) -> Recipe:
    """The CLI's ``[RECIPE] [FIELD=VALUE]...``: the first argument is the recipe file unless it
    holds a ``=`` (and is no file); without one, the built-in default recipe."""
    if args and ("=" not in args[0] or Path(args[0]).is_file()):
        if not Path(args[0]).exists() and Path(args[0]).suffix not in (".yaml", ".yml"):
            raise EdgespecError(f"recipe '{args[0]}' not found (an override is FIELD=VALUE, e.g. quant.scheme=fp32)")
        return load_recipe(args[0], args[1:])
    return load_recipe(None, args)


def recipe_to_yaml(recipe: Recipe) -> str:
    import yaml

    def plain(x):  # tuples -> lists, so the YAML is plain data
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x

    return yaml.safe_dump(plain(recipe.to_dict()), sort_keys=False)
