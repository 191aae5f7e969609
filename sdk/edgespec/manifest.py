"""The bundle's records: its file layout, `manifest.json` and the validation summary it holds,
as frozen, validated dataclasses (the typed records of edgespec.config.records).

`parse_manifest` is the one reader of a manifest: every field is type-checked, an error
names the field (``manifest field 'tokenizer.eos_ids': ...``); `Manifest.to_dict` is what
`edgespec.bundle.write_manifest` writes. Bundles of schema 1 written before these records
(``"k/n"`` losslessness, a ``streams`` recipe section, the speculative record's ``n_streams``
and ``msa_layers``) are read through `_upgrade`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from edgespec.config import AsrRecipe, Recipe, Record, check_task_kinds, from_dict, parsing, require, upgrade_recipe_data
from edgespec.config.migrations import RENAMED_VALUES
from edgespec.errors import EdgespecError
from edgespec.models.args import LlamaArgs
from edgespec.numerics import SEARCH_REPORT_JSON

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class BundleLayout:
    """The names of a bundle's files, in one place (the Java core reads `program` and the
    manifest's `tokenizer.file`)."""

    manifest: str = "manifest.json"
    program: str = "model.pte"
    program_data: str = "base.ptd"  # the base model's weights outside the program (export.separate_base): one file for every task program of a base
    tokenizer: str = "tokenizer.json"
    recipe: str = "recipe.yaml"
    drafter: str = "drafter.pt"  # a speculative bundle's drafter weights (edgespec tune reads them)
    legacy_drafter: str = "streams.pt"  # the same, in bundles written before 2026-12-02
    phoneme_tokens: str = "tokens.json"  # a speech bundle's output tokens
    frontend: str = "frontend.pt"  # a speech bundle's host-side log-mel buffers
    report_md: str = "report.md"
    report_json: str = "report.json"
    normsearch_json: str = SEARCH_REPORT_JSON  # the normalizer search's report (numerics.search: true)
    asr_report_json: str = "asr_report.json"

    def is_report(self, name: str) -> bool:
        """Whether `name` is one of the files a validation report writes (its JSON, its
        markdown, its plots): what a report directory may hold to be written over."""
        return name in (self.report_md, self.report_json, self.asr_report_json) or name.endswith(".png")

    @staticmethod
    def rejected(outdir: str | Path) -> Path:
        """Where an export whose gates failed leaves its report: `<outdir>.rejected/`."""
        out = Path(outdir).resolve()
        return out.parent / f"{out.name}.rejected"


LAYOUT = BundleLayout()


def inside_bundle(name: str) -> bool:
    """Whether a file name in a manifest stays inside the bundle: relative, no `..`, no NUL."""
    return bool(name) and not name.startswith(("/", "\\")) and ".." not in Path(name).parts and "\x00" not in name


@dataclass(frozen=True)
class FileEntry(Record):
    sha256: str
    bytes: int = 0


@dataclass(frozen=True)
class GateResult(Record):
    """One gate's verdict: what was measured against which bar."""

    name: str
    passed: bool
    measured: float | str | None
    threshold: float | str
    message: str


@dataclass(frozen=True)
class Lossless(Record):
    """Speculative greedy output identical to autoregressive on `identical` of `prompts`."""

    identical: int
    prompts: int

    def __str__(self) -> str:
        return f"{self.identical}/{self.prompts}"


@dataclass(frozen=True)
class Fidelity(Record):
    """A program against its source model on `tokens` scored held-out tokens (edgespec.harness.fidelity)."""

    tokens: int
    perplexity: float
    reference_perplexity: float
    perplexity_ratio: float
    kl_mean: float
    kl_p99: float
    top1_agreement: float
    text: str = ""


@dataclass(frozen=True, kw_only=True)
class LmValidation(Record):
    """What a language-model bundle showed in its validate stage (the full report: report.json)."""

    PATH: ClassVar[str] = "validation"
    passed: bool
    gates: tuple[GateResult, ...]
    prompts: int
    score: float
    reference_score: float | None = None
    ar_tokens_per_s: float
    spec: dict[str, Any] | None = None  # speculative decoding: tokens_per_s, speedup, tokens_per_call, histogram
    lossless: Lossless | None = None
    fidelity: Fidelity | None = None
    peak_rss_mb: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AsrValidation(Record):
    """What a speech bundle showed on the asr suite (the full report: asr_report.json)."""

    PATH: ClassVar[str] = "validation"
    passed: bool
    gates: tuple[GateResult, ...]
    utterances: int
    per: float
    per_chunked: float
    per_eager_fp32: float
    wer: float
    rtf: float
    chunk_ms_median: float
    agree_engine: float | None = None


@dataclass(frozen=True, kw_only=True)
class LmModelInfo(Record, LlamaArgs):
    """The model a language-model bundle was made from: its name and source, and its
    architecture, the decoder's `LlamaArgs` (edgespec.models.args), whose fields it inherits:
    on disk they stand flat beside `name` and `source`. Read as a record (every field
    type-checked), then checked as the decoder checks its arguments."""

    PATH: ClassVar[str] = "model"
    name: str
    source: str

    def _check(self) -> None:
        try:
            LlamaArgs.__post_init__(self)
        except ValueError as e:
            require(False, self.PATH, str(e))


@dataclass(frozen=True)
class AsrModelInfo(Record):
    PATH: ClassVar[str] = "model"
    name: str
    source: str
    args: dict[str, int | float]  # edgespec.models.conformer.ConformerArgs


@dataclass(frozen=True)
class TokenizerInfo(Record):
    PATH: ClassVar[str] = "tokenizer"
    file: str
    eos_ids: tuple[int, ...]
    chat_template: str | None = None  # Jinja text; None: prompts are fed as raw text
    bos_id: int | None = None
    add_bos: bool = False


@dataclass(frozen=True)
class QuantizationInfo(Record):
    """How the linears got their weights (edgespec.quant.QuantSummary). Bundles written before
    2026-12-06 list at most 8 rounded layers and leave formats, head and embedding empty."""

    PATH: ClassVar[str] = "quantization"
    carried: int = 0
    rounded: int = 0
    unquantized: int = 0
    rounded_layers: tuple[str, ...] = ()  # every rounded linear
    unquantized_layers: tuple[str, ...] = ()  # every linear left in float (the others: carried)
    rounded_from: dict[str, int] = field(default_factory=dict)  # rounded layers by the source file's storage type
    rounding_error: dict[str, float] = field(default_factory=dict)  # by storage type: ||W' - W|| / ||W|| of those layers
    formats: dict[str, int] = field(default_factory=dict)  # linears by the weight format the program computes with
    head: str = ""  # the lm head's format ("" in older bundles)
    embedding: str = ""  # the embedding table's
    screened_head: bool = False

    def weights_line(self) -> str | None:
        """The program's weight formats in words (`edgespec info`); None for older bundles."""
        if not self.formats:
            return None
        linears = ", ".join(f"{n} x {f}" for f, n in self.formats.items())
        screen = ", with its 5-bit screen" if self.screened_head else ""
        return f"linears {linears}; lm head {self.head}{screen}; embedding {self.embedding}"


def rerounded(rounded_from: Mapping[str, int], rounding_error: Mapping[str, float]) -> list[tuple[int, str]]:
    """The file's quantized types that were rounded again (float sources are not: rounding them
    is the quantization itself), as (layers, "re-rounded from T (weight error E% rms)")."""
    return [
        (n, f"re-rounded from {t}" + (f" (weight error {rounding_error[t]:.1%} rms)" if t in rounding_error else ""))
        for t, n in rounded_from.items()
        if t not in ("F32", "F16", "BF16")
    ]


def ineffective_quant_fields(quant, info: QuantizationInfo | None) -> list[str]:
    """Recipe `quant` fields set away from their default that changed nothing in this export,
    each with why (the export's summary line names them): today `head_bits` on the block
    kernel when the lm head kept the file's blocks (a carried head is computed as the file
    stores it, whatever bits the field asks)."""
    from edgespec.quant import CARRIED_LABEL, program_kernels

    out = []
    default_head_bits = type(quant)().head_bits
    if info is None or not info.head:  # an older bundle: its list of rounded layers was cut to 8, so only where it is whole
        head_carried = info is not None and info.carried > 0 and info.rounded <= len(info.rounded_layers) and "output" not in info.rounded_layers
    else:
        head_carried = info.head.endswith(CARRIED_LABEL)
    kernels = program_kernels(quant)
    if kernels.linears == "edgespec" and kernels.carried and quant.head_bits != default_head_bits and head_carried:
        out.append(f"quant.head_bits={quant.head_bits} had no effect: the lm head kept the file's blocks (quant.carry_blocks: true; false re-rounds it)")
    return out


@dataclass(frozen=True)
class SpeculativeInfo(Record):
    """The speculative methods of a program: its drafter and draft tree."""

    PATH: ClassVar[str] = "speculative"
    tree_branching: tuple[int, ...]
    tree_parents: tuple[int, ...]
    drafter: str = "streams"  # the drafter kind (bundles before heads: streams)
    mode: str = "lossless"
    draft_depth: int = 0  # the depths the drafter was trained to draft (recipe drafter.draft_depth; 0: none, the host drafts)
    top_layers: int = 0  # the top base layers the drafter works over (recipe drafter.n_layers: the streams' MSA layers)
    weights: str = LAYOUT.drafter  # the bundle's file holding the drafter
    draft_vocab: int = 0
    step_attention: str = "rows"
    lookup: int = 0  # the hybrid draft the bundle decodes with: suffix matches of >= lookup tokens first (0: the drafter only)


# operator namespaces ExecuTorch's own runtimes provide: aten (portable and optimized kernels),
# its prim ops, dim order ops, quantized_decomposed (quantized kernels), llama (the LLM extension's
# custom ops, e.g. update_cache); the prebuilt Android AAR and ExecuTorch's runners carry them
STOCK_NAMESPACES = ("aten", "executorch_prim", "dim_order_ops", "quantized_decomposed", "llama")


@dataclass(frozen=True)
class RuntimeNeeds(Record):
    """What a program asks of the runtime that loads it, read from the lowered program itself:
    every operator its methods call and every backend it delegates to."""

    PATH: ClassVar[str] = "runtime"
    operators: tuple[str, ...] = ()  # "namespace::name.overload"
    delegates: tuple[str, ...] = ()  # backend ids, e.g. XnnpackBackend

    def extra_operators(self) -> tuple[str, ...]:
        """The operators beyond ExecuTorch's own kernels (`STOCK_NAMESPACES`): edgespec's ops."""
        return tuple(op for op in self.operators if op.split("::", 1)[0] not in STOCK_NAMESPACES)

    def runtimes_line(self) -> str:
        """Which runtimes run the program, in words (`edgespec info`, `verify`)."""
        extra = self.extra_operators()
        backends = f" and {', '.join(self.delegates)}" if self.delegates else ""
        if not extra:
            return f"ExecuTorch's own kernels{backends}: edgespec's host runtime, ExecuTorch's runners and the prebuilt Android AAR run it"
        return (
            f"needs {', '.join(extra)} beyond ExecuTorch's own kernels{backends}: edgespec's host runtime or an Android AAR built "
            "with android/kernels run it, the prebuilt org.pytorch:executorch-android AAR does not (android/README.md)"
        )


@dataclass(frozen=True, kw_only=True)
class Manifest(Record):
    """What every bundle's manifest holds; `task` says which of the subclasses it is."""

    TASK: ClassVar[str] = ""
    KIND: ClassVar[str] = ""  # what the bundle holds, in words
    USE: ClassVar[str] = ""  # the command that runs it
    schema_version: int = SCHEMA_VERSION
    task: str
    precision: str
    methods: tuple[str, ...] = ()
    reports: tuple[str, ...] = ()
    files: dict[str, FileEntry] = field(default_factory=dict)
    runtime: RuntimeNeeds | None = None  # None: a bundle from before 2026-12-07 (`edgespec info` reads its program)

    def _check(self) -> None:
        for name in self.files:
            require(inside_bundle(name), f"files.{name}", "must be a plain relative file name")

    def file_bytes(self, name: str) -> int:
        return self.files[name].bytes

    def needed_files(self) -> tuple[str, ...]:
        """The files a runtime reads from the bundle: each must be listed, so checked."""
        return (LAYOUT.program,)


@dataclass(frozen=True, kw_only=True)
class LmManifest(Manifest):
    """A language-model bundle: tokenizer, program with `forward` (+ `spec_step`)."""

    TASK: ClassVar[str] = Recipe.TASK
    KIND: ClassVar[str] = "language model"
    USE: ClassVar[str] = "edgespec generate --bundle {bundle} --prompt TEXT"
    task: str = Recipe.TASK
    model: LmModelInfo
    recipe: Recipe
    tokenizer: TokenizerInfo
    quantization: QuantizationInfo | None = None
    speculative: SpeculativeInfo | None = None
    validation: LmValidation | None = None
    program_data: str | None = None  # the data file the program reads its base weights from (None: all inside it)

    def _check(self) -> None:
        super()._check()
        require(inside_bundle(self.tokenizer.file), "tokenizer.file", "must be a plain relative file name inside the bundle")
        require(self.program_data in (None, LAYOUT.program_data), "program_data", f"must be {LAYOUT.program_data!r} or absent")

    def needed_files(self) -> tuple[str, ...]:
        return (LAYOUT.program, self.tokenizer.file, *((self.program_data,) if self.program_data else ()))


@dataclass(frozen=True, kw_only=True)
class AsrManifest(Manifest):
    """A speech recognition bundle: program over audio (or features), phoneme tokens."""

    TASK: ClassVar[str] = AsrRecipe.TASK
    KIND: ClassVar[str] = "speech recognition"
    USE: ClassVar[str] = "edgespec transcribe --bundle {bundle} AUDIO.wav"
    task: str = AsrRecipe.TASK
    model: AsrModelInfo
    recipe: AsrRecipe
    ctc: dict[str, float]
    streaming: dict[str, int]
    validation: AsrValidation | None = None

    def needed_files(self) -> tuple[str, ...]:
        host_frontend = self.recipe.model.frontend != "program"  # log-mel buffers read on the host
        return (LAYOUT.program, LAYOUT.phoneme_tokens, *((LAYOUT.frontend,) if host_frontend else ()))


MANIFEST_KINDS: dict[str, type[Manifest]] = {m.TASK: m for m in (LmManifest, AsrManifest)}
"""The manifest record of each task kind (edgespec.config.RECIPE_KINDS)."""
check_task_kinds(MANIFEST_KINDS, "edgespec.manifest.MANIFEST_KINDS")


def parse_manifest(data: Any, where: str) -> LmManifest | AsrManifest:
    """The typed manifest of plain data read from `where` (for messages); EdgespecError naming
    the first field that is off, or the schema version when it is not this reader's."""
    if not isinstance(data, dict):
        raise EdgespecError(f"{where} must hold a JSON object, not {type(data).__name__}")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise EdgespecError(f"{where}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION}; re-export the bundle with this edgespec)")
    task = data.get("task", LmManifest.TASK)  # manifests before speech bundles carry no task
    if not isinstance(task, str) or task not in MANIFEST_KINDS:
        raise EdgespecError(f"{where}: task {task!r} is not one of {list(MANIFEST_KINDS)}")
    try:
        with parsing("manifest field"):
            return from_dict(MANIFEST_KINDS[task], _upgrade(data), "")
    except EdgespecError as e:
        raise EdgespecError(f"{where}: {e}") from None
    except RecursionError:
        raise EdgespecError(f"{where}: nested too deeply to be a manifest") from None


_RENAMED_SPECULATIVE = {"n_streams": "draft_depth", "msa_layers": "top_layers"}  # SpeculativeInfo's fields: old -> new


def _upgrade(data: dict) -> dict:
    """Schema-1 manifests written before these records, in today's shape."""
    data = dict(data)
    if isinstance(data.get("recipe"), dict):
        data["recipe"] = upgrade_recipe_data(data["recipe"], note=False)
    s = data.get("speculative")
    renamed = RENAMED_VALUES[("export", "step_attention")]
    if isinstance(s, dict) and s.get("step_attention") in renamed:  # the recipe's value, as it was written
        s = data["speculative"] = {**s, "step_attention": renamed[s["step_attention"]]}
    if isinstance(s, dict) and _RENAMED_SPECULATIVE.keys() & s.keys():  # the streams drafter's names, before 2026-12-06
        data["speculative"] = {_RENAMED_SPECULATIVE.get(k, k): v for k, v in s.items()}
    v = data.get("validation")
    if isinstance(v, dict) and isinstance(v.get("lossless"), str) and v["lossless"].count("/") == 1:
        ok, n = v["lossless"].split("/")
        if ok.isdigit() and n.isdigit():
            data["validation"] = {**v, "lossless": {"identical": int(ok), "prompts": int(n)}}
    return data
