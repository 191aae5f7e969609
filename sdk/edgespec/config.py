"""Typed, frozen, validated configuration: the single source of truth for a recipe.

YAML files and CLI flags only ever *produce* these objects. Every field is checked on
construction; an unknown or invalid field raises `EdgespecError` naming its dotted path.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from edgespec.errors import EdgespecError

QuantScheme = Literal["fp32", "fp16", "8da4w", "8da8w", "int8wo"]
EMBEDDED_MODELS = ("smollm2-135m-instruct",)


def _require(cond: bool, path: str, msg: str) -> None:
    if not cond:
        raise EdgespecError(f"recipe field '{path}': {msg}")


@dataclass(frozen=True)
class ModelConfig:
    """Which model to load and how long its context is.

    source: an embedded model name (``smollm2-135m-instruct``), a ``.gguf`` file, or a
    local Hugging Face-format directory (config.json + *.safetensors + tokenizer.json).
    """

    source: str = "smollm2-135m-instruct"
    max_seq_len: int = 1024
    chat_template: bool = True

    def validate(self, path: str = "model") -> None:
        _require(bool(self.source), f"{path}.source", "must not be empty")
        _require(16 <= self.max_seq_len <= 32768, f"{path}.max_seq_len", f"must be in [16, 32768], got {self.max_seq_len}")


@dataclass(frozen=True)
class QuantConfig:
    """torchao quantization of the exported program.

    scheme: ``fp32`` (none), ``fp16`` (fp16 weights and activations; KV cache and attention
    in fp32), ``8da4w`` (int8 dynamic activations, int4 grouped weights), ``8da8w`` (int8
    dynamic activations, int8 per-channel weights). ``int8wo`` (int8 weight-only) is refused:
    ExecuTorch's XNNPACK lowering has no kernel for it. ``embedding_bits`` 0 keeps the
    embedding in fp32; 4 or 8 quantizes it weight-only with ``group_size``.
    """

    scheme: QuantScheme = "8da4w"
    group_size: int = 32
    embedding_bits: int = 0

    def validate(self, path: str = "quant") -> None:
        _require(
            self.scheme != "int8wo",
            f"{path}.scheme",
            "int8wo (int8 weight-only linears) does not lower to XNNPACK in ExecuTorch 1.5 (no kernel for torchao::dequantize_affine); use 8da8w (int8 weights with dynamic int8 activations) or 8da4w",
        )
        _require(self.group_size > 0 and self.group_size % 16 == 0, f"{path}.group_size", f"must be a positive multiple of 16, got {self.group_size}")
        _require(self.embedding_bits in (0, 4, 8), f"{path}.embedding_bits", f"must be 0 (off), 4 or 8, got {self.embedding_bits}")


@dataclass(frozen=True)
class StreamsConfig:
    """Speculative Streaming: gamma streams over the top n_layers (multi-stream attention).

    mode: ``lossless`` (main stream = untouched base model) or ``shared`` (adapters shared
    with the main stream, fine-tuned). tree: branching per depth (top-k of stream d).
    weights: trained stream weights (a file made by ``edgespec train``); empty = untrained.
    """

    mode: Literal["lossless", "shared"] = "lossless"
    gamma: int = 3
    n_layers: int = 4
    lora_rank: int = 16
    f_rank: int = 0
    tree: tuple[int, ...] = (3, 2, 1)
    weights: str = ""

    def validate(self, path: str = "streams") -> None:
        _require(1 <= self.gamma <= 8, f"{path}.gamma", f"must be in [1, 8], got {self.gamma}")
        _require(self.n_layers >= 1, f"{path}.n_layers", f"must be >= 1, got {self.n_layers}")
        _require(self.lora_rank >= 0 and self.f_rank >= 0, f"{path}.lora_rank", "ranks must be >= 0")
        _require(1 <= len(self.tree) <= self.gamma and all(k >= 1 for k in self.tree), f"{path}.tree", f"needs 1..gamma positive branching factors, got {list(self.tree)}")


@dataclass(frozen=True)
class TrainConfig:
    """Stream training (``edgespec train``).

    data: a JSONL file, either self-distilled (``prompt_ids``/``response_ids``, written by
    ``edgespec distill``) or text pairs (``prompt``/``response``).
    """

    data: str = "data/distill/train.jsonl"
    out_dir: str = "runs/streams"
    drafter: Literal["streams", "medusa"] = "streams"  # medusa: the Medusa-1 baseline heads
    steps: int = 1000
    batch_size: int = 8
    seq_len: int = 384
    lr: float = 5e-4
    warmup_steps: int = 50
    stream_weights: tuple[float, ...] = (1.0, 0.5, 0.25)
    checkpoint_every: int = 100
    seed: int = 0

    def validate(self, path: str = "train") -> None:
        _require(self.steps >= 1, f"{path}.steps", "must be >= 1")
        _require(self.batch_size >= 1, f"{path}.batch_size", "must be >= 1")
        _require(self.seq_len >= 16, f"{path}.seq_len", "must be >= 16")
        _require(self.lr > 0, f"{path}.lr", "must be > 0")


@dataclass(frozen=True)
class NumericsConfig:
    """Normalizer search (``edgespec normsearch``; a stage of ``edgespec export``).

    format: the low-precision format the norm layers are checked (and, for a program in that
    format, stabilized) for. guarantee: only accept pre-normalizers proven safe for every input.
    """

    search: bool = True
    format: Literal["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"] = "fp16"
    guarantee: bool = True
    calibration_prompts: int = 8
    heldout_prompts: int = 4

    def validate(self, path: str = "numerics") -> None:
        _require(self.calibration_prompts >= 1, f"{path}.calibration_prompts", "must be >= 1")
        _require(self.heldout_prompts >= 1, f"{path}.heldout_prompts", "must be >= 1")


@dataclass(frozen=True)
class ExportConfig:
    """Lowering to ExecuTorch."""

    backend: Literal["xnnpack"] = "xnnpack"

    def validate(self, path: str = "export") -> None:
        pass


SUITE_NAMES = ("summarization", "translation", "qa", "math", "sql", "rag")


@dataclass(frozen=True)
class GatesConfig:
    """What a bundle must show before `edgespec export` writes it (`edgespec validate` exits 1).

    min_speedup: speculative / autoregressive decode tokens/s on the suites (median of the
    per-prompt ratios); 0 turns it off, > 0 requires speculative methods.
    lossless: speculative greedy output identical to autoregressive greedy output on every prompt.
    max_accuracy_drop: largest allowed drop of the mean task score (0..1, averaged over suites)
    below the fp32 base model's on the same prompts; negative turns it off.
    no_overflow: the chosen pre-normalizers had no overflow/underflow on any search row.
    """

    min_speedup: float = 0.0
    lossless: bool = True
    max_accuracy_drop: float = 0.10
    no_overflow: bool = True

    def validate(self, path: str = "validate.gates") -> None:
        _require(0.0 <= self.min_speedup <= 100.0, f"{path}.min_speedup", f"must be in [0, 100], got {self.min_speedup}")
        _require(self.max_accuracy_drop <= 1.0, f"{path}.max_accuracy_drop", f"must be <= 1 (scores are in [0, 1]), got {self.max_accuracy_drop}")


@dataclass(frozen=True)
class ValidateConfig:
    """Host validation of the program (`edgespec validate`; a stage of `edgespec export`).

    suites: built-in suites (see edgespec.harness.suites) or JSONL files of your own.
    reference: ``fp32`` also runs the unquantized base model eagerly on the same prompts (cached
    on disk) for the accuracy gate; ``none`` skips it. runs: repetitions per prompt (median).
    """

    enabled: bool = True
    suites: tuple[str, ...] = SUITE_NAMES
    prompts_per_suite: int = 8
    seed: int = 0
    runs: int = 1
    lookup: int = 0
    reference: Literal["fp32", "none"] = "fp32"
    gates: GatesConfig = field(default_factory=GatesConfig)

    def validate(self, path: str = "validate") -> None:
        _require(len(self.suites) >= 1, f"{path}.suites", "needs at least one suite")
        for i, s in enumerate(self.suites):
            _require(s in SUITE_NAMES or s.endswith(".jsonl"), f"{path}.suites[{i}]", f"must be one of {list(SUITE_NAMES)} or a .jsonl file, got {s!r}")
        _require(1 <= self.prompts_per_suite <= 10000, f"{path}.prompts_per_suite", f"must be in [1, 10000], got {self.prompts_per_suite}")
        _require(1 <= self.runs <= 100, f"{path}.runs", f"must be in [1, 100], got {self.runs}")
        _require(0 <= self.lookup <= 8, f"{path}.lookup", f"must be in [0, 8], got {self.lookup}")
        self.gates.validate(f"{path}.gates")


@dataclass(frozen=True)
class Recipe:
    """One export, fully described. ``Recipe()`` is the built-in default recipe."""

    name: str = "smollm2-135m"
    model: ModelConfig = field(default_factory=ModelConfig)
    quant: QuantConfig = field(default_factory=QuantConfig)
    streams: StreamsConfig = field(default_factory=StreamsConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    numerics: NumericsConfig = field(default_factory=NumericsConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    validate: ValidateConfig = field(default_factory=ValidateConfig)

    def __post_init__(self) -> None:
        _require(bool(self.name), "name", "must not be empty")
        self.model.validate("model")
        self.quant.validate("quant")
        self.streams.validate("streams")
        _require(len(self.train.stream_weights) >= self.streams.gamma, "train.stream_weights", f"needs one weight per stream ({self.streams.gamma})")
        self.train.validate("train")
        self.numerics.validate("numerics")
        self.export.validate("export")
        self.validate.validate("validate")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **sections: Any) -> "Recipe":
        """A copy with whole sections or fields changed, e.g. ``replace(quant={"scheme": "fp32"})``."""
        data = self.to_dict()
        for key, value in sections.items():
            if isinstance(value, dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return from_dict(Recipe, data)


def _check_type(value: Any, tp: Any, path: str) -> Any:
    origin = get_origin(tp)
    if origin is Literal:
        _require(value in get_args(tp), path, f"must be one of {list(get_args(tp))}, got {value!r}")
        return value
    if origin is tuple:
        _require(isinstance(value, (list, tuple)), path, f"must be a list, got {value!r}")
        (elem, *_rest) = get_args(tp)
        return tuple(_check_type(v, elem, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        for arm in get_args(tp):
            if arm is type(None) and value is None:
                return None
        arms = [a for a in get_args(tp) if a is not type(None)]
        return _check_type(value, arms[0], path)
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


def from_dict(cls: type, data: Any, path: str = "") -> Any:
    """Build the dataclass ``cls`` from plain data, rejecting unknown fields by dotted path."""
    where = path or "<recipe>"
    _require(isinstance(data, dict), where, f"must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            full = f"{path}.{key}" if path else str(key)
            raise EdgespecError(f"recipe field '{full}': unknown field (known: {', '.join(sorted(names))})")
    kwargs = {}
    for key, value in data.items():
        full = f"{path}.{key}" if path else key
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = from_dict(tp, value, full)
        else:
            kwargs[key] = _check_type(value, tp, full)
    return cls(**kwargs)


def load_recipe(path: str | Path | None) -> Recipe:
    """Read a YAML recipe; ``None`` gives the built-in default recipe."""
    if path is None:
        return Recipe()
    import yaml

    p = Path(path)
    if not p.is_file():
        raise EdgespecError(f"recipe '{p}' not found")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise EdgespecError(f"recipe '{p}' is not valid YAML: {e}") from None
    return from_dict(Recipe, data or {})


def recipe_to_yaml(recipe: Recipe) -> str:
    import yaml

    def plain(x):  # tuples -> lists, so the YAML is plain data
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x

    return yaml.safe_dump(plain(recipe.to_dict()), sort_keys=False)
