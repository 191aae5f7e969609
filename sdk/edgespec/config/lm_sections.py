"""The sections of a language-model recipe (``task: generate``, the default): one frozen,
validated dataclass per stage, and `Recipe`, which holds them all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from edgespec.config.records import Record, from_dict, require
from edgespec.errors import EdgespecError

QuantScheme = Literal["fp32", "fp16", "8da4w", "8da8w", "int8wo"]
SUITE_NAMES = ("summarization", "translation", "qa", "math", "sql", "rag")
TASK_SUITE_PREFIX = "task:"  # validate.suites entry naming a fine-tune task's held-out split
TASK_HELDOUT_SPLITS = ("heldout", "heldout_fillings")  # what task:NAME:SPLIT may name (edgespec.corpus.task_data)


def parse_task_suite(name: str) -> tuple[str, str]:
    """(task, split) of a suite name ``task:NAME`` (its held-out split: units never trained
    on) or ``task:NAME:SPLIT`` (``heldout_fillings``: new fillings of the training templates,
    the same distribution as training)."""
    task, _, split = name[len(TASK_SUITE_PREFIX) :].partition(":")
    split = split or "heldout"
    if split not in TASK_HELDOUT_SPLITS:
        raise EdgespecError(f"suite '{name}': unknown held-out split '{split}' (known: {', '.join(TASK_HELDOUT_SPLITS)})")
    return task, split


"""The built-in validation suites, in report order (edgespec.corpus.validation_sets builds them)."""


@dataclass(frozen=True)
class ModelConfig(Record):
    """Which model to load and how long its context is.

    source: an embedded model name (``smollm2-135m-instruct``), a ``.gguf`` file, or a
    local Hugging Face-format directory (config.json + *.safetensors + tokenizer.json).
    """

    PATH: ClassVar[str] = "model"
    source: str = "smollm2-135m-instruct"
    max_seq_len: int = 1024
    chat_template: bool = True

    def _check(self) -> None:
        require(bool(self.source), self._at("source"), "must not be empty")
        require(16 <= self.max_seq_len <= 32768, self._at("max_seq_len"), f"must be in [16, 32768], got {self.max_seq_len}")


@dataclass(frozen=True)
class QuantConfig(Record):
    """Quantization of the exported program: edgespec's block kernel over the file's own blocks
    (the default), or torchao's tensors for XNNPACK.

    scheme: ``fp32`` (none), ``fp16`` (fp16 weights and activations; KV cache and attention
    in fp32), ``8da4w`` (int8 dynamic activations, int4 grouped weights), ``8da8w`` (int8
    dynamic activations, int8 per-channel weights). ``int8wo`` (int8 weight-only) is refused:
    ExecuTorch's XNNPACK lowering has no kernel for it. ``embedding_bits`` 0 keeps the
    embedding as the file stores it: on edgespec's block kernel with ``carry_blocks``, its
    blocks (rows dequantized as they are looked up, the file's values; a tied lm head carries
    the same bytes and the program stores them once), else fp32; 4 or 8 rounds it weight-only
    with ``group_size``.

    carry_blocks: a weight stored in the source file as GGUF blocks keeps the file's own codes
    and scales (no second rounding; edgespec.quant): every type of `KERNEL_CARRIED` on
    edgespec's kernel (Q4_0/Q4_1/Q4_K/Q5_0/Q5_1/Q5_K/Q6_K/Q3_K/Q8_0), Q4_0/Q4_1 on XNNPACK;
    false rounds the dequantized weights again. rounding: how weights without carried blocks get their scales,
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

    head_screen: the program also gets `next_token` (edgespec.export.constants.NEXT_TOKEN), the
    greedy token without every logit: an exact argmax that reads a 5-bit screen of the Q8_0
    head (176 of its 272 bytes per tile) and re-scores from the head's own blocks only the rows
    whose proven interval reaches the best one (kernels/block_linear/screen.h). Same tokens as
    forward's argmax; the program grows by the screen (~65% of the head). Worth it where the
    head is a large share of a token's bytes (Gemma 3: 178 of ~245 MB); autoregressive
    programs of the block kernel with an 8-bit head only.

    kv_cache: how the base model's attention keeps keys and values: ``fp32``, or ``fp16`` (half
    the cache's bytes: 47 -> 24 MB for SmolLM2 at 1024 positions; rounded to fp16 as written,
    read back widened, attention computing in fp32, as llama.cpp's default f16 cache). Needs
    edgespec's exact attention: the block kernel, and ``export.step_attention: exact`` for a
    speculative program.
    """

    PATH: ClassVar[str] = "quant"
    scheme: QuantScheme = "8da4w"
    group_size: int = 32
    embedding_bits: int = 0
    carry_blocks: bool = True
    rounding: Literal["maxabs", "mse"] = "maxabs"
    head_bits: int = 8
    kernel: Literal["edgespec", "xnnpack"] = "edgespec"
    head_screen: bool = False
    kv_cache: Literal["fp32", "fp16"] = "fp32"

    @property
    def int8_activations(self) -> bool:
        """The linears take dynamically quantized int8 activations (8da4w, 8da8w)."""
        return self.scheme in ("8da4w", "8da8w")

    @property
    def block_kernel(self) -> bool:
        """The program's linears are edgespec's block kernel (8da4w/8da8w with kernel edgespec)."""
        return self.kernel == "edgespec" and self.int8_activations

    def _check(self) -> None:
        require(
            self.scheme != "int8wo",
            self._at("scheme"),
            "int8wo (int8 weight-only linears) does not lower to XNNPACK in ExecuTorch 1.5 (no kernel for torchao::dequantize_affine); use 8da8w (int8 weights with dynamic int8 activations) or 8da4w",
        )
        require(self.group_size > 0 and self.group_size % 16 == 0, self._at("group_size"), f"must be a positive multiple of 16, got {self.group_size}")
        require(self.embedding_bits in (0, 4, 8), self._at("embedding_bits"), f"must be 0 (off), 4 or 8, got {self.embedding_bits}")
        require(self.head_bits in (4, 8), self._at("head_bits"), f"must be 4 or 8, got {self.head_bits}")
        require(
            not self.block_kernel or self.group_size == 32,
            self._at("kernel"),
            f"edgespec's block kernel computes linears in blocks of 32, not group_size {self.group_size}; use group_size 32 or kernel: xnnpack",
        )
        require(
            self.kv_cache == "fp32" or self.block_kernel,
            self._at("kv_cache"),
            "an fp16 cache is read by edgespec's exact attention, which programs of the block kernel use: needs scheme 8da4w or 8da8w and kernel edgespec",
        )
        require(
            not self.head_screen or (self.block_kernel and self.head_bits == 8),
            self._at("head_screen"),
            "screens an 8-bit (Q8_0) head of edgespec's block kernel: needs scheme 8da4w or 8da8w, kernel edgespec and head_bits 8",
        )


@dataclass(frozen=True)
class DrafterConfig(Record):
    """The drafter of the speculative program and how it drafts (recipe section ``drafter:``;
    recipes before 2026-12-02 call it ``streams:`` with the kind in ``streams.drafter``).

    kind: ``streams`` (Speculative Streaming: draft_depth streams over the top n_layers,
    multi-stream attention), ``medusa`` (draft_depth Medusa-1 heads on the final hidden state) or
    ``hydra`` (heads that also see the token before their target) or ``eagle`` (one draft
    decoder layer over fused low/mid/top features of the whole context, drafting chains);
    for heads n_layers is only where training caches its features, eagle ignores it, and
    both are lossless.

    draft_depth: how many tokens ahead the drafter is trained to draft (the paper's gamma for
    streams, the number of heads for Medusa/Hydra, eagle's passes; ``gamma`` before
    2026-12-06); the tree drafts at most this deep. mode: ``lossless`` (main stream =
    untouched base model) or ``shared`` (streams only: adapters shared with the main stream,
    fine-tuned). tree: branching per depth (top-k of draft depth d). weights: trained
    drafter weights (a file made by ``edgespec train``); empty = no speculative methods.
    draft_vocab: the drafting lm head covers only the N most frequent tokens of the training
    corpus (verification keeps the full vocabulary); 0 = the full vocabulary.
    """

    PATH: ClassVar[str] = "drafter"
    kind: Literal["streams", "medusa", "hydra", "eagle"] = "streams"
    mode: Literal["lossless", "shared"] = "lossless"
    draft_depth: int = 3
    n_layers: int = 4
    lora_rank: int = 16
    f_rank: int = 0
    tree: tuple[int, ...] = (3, 2, 1)
    weights: str = ""
    draft_vocab: int = 0

    def _check(self) -> None:
        require(
            self.kind == "streams" or self.mode == "lossless",
            self._at("mode"),
            "draft heads leave the base model untouched (so does the eagle layer): mode must be lossless",
        )
        require(self.draft_vocab >= 0, self._at("draft_vocab"), f"must be >= 0 (0 = the full vocabulary), got {self.draft_vocab}")
        require(1 <= self.draft_depth <= 8, self._at("draft_depth"), f"must be in [1, 8], got {self.draft_depth}")
        require(self.n_layers >= 1, self._at("n_layers"), f"must be >= 1, got {self.n_layers}")
        require(self.lora_rank >= 0 and self.f_rank >= 0, self._at("lora_rank"), "ranks must be >= 0")
        require(
            1 <= len(self.tree) <= self.draft_depth and all(k >= 1 for k in self.tree),
            self._at("tree"),
            f"needs 1..draft_depth positive branching factors, got {list(self.tree)}",
        )


@dataclass(frozen=True)
class TrainConfig(Record):
    """Drafter training (``edgespec train``; edgespec.speculative.train takes it as is).

    data: a JSONL file, either self-distilled (``prompt_ids``/``response_ids``, written by
    ``edgespec distill``) or text pairs (``prompt``/``response``), or ``task:NAME``: the train
    split of a task's gold pairs (edgespec.corpus.task_data: translation_de, sql_chinook).
    depth_weights: a_j, the loss weight of draft depth j, one per depth of
    ``drafter.draft_depth`` (streams paper: 0.1 each; ``stream_weights`` before 2026-12-06);
    main_weight: a0, the next-token loss weight (shared mode only). soft_weight: b in
    (1 - b) CE(hard) + b CE(teacher's top-K) for each draft depth, and in shared mode for the
    main stream too, where the teacher's top-K term stands in for the KL to the original
    model (truncated to its top K: at b = 0.5 it did not keep the answers' quality,
    docs/speculative-streaming.md; needs data with soft labels: ``edgespec distill
    --source``). bf16: the drafter's layers and the lm head run under bf16 autocast. With
    ``drafter.draft_vocab`` set, the drafting rows' loss is taken over that draft vocabulary,
    as the program drafts. dev_items: the first N items of the dev split are scored at each
    checkpoint: `dev_data` (a JSONL file of prompt/response pairs kept out of training: a
    user's own task) or, with ``task:NAME`` data, the task's dev split (units kept out of
    training). The run's drafter is the checkpoint that scored best there (0, or no dev
    split: the last step's): in shared mode by the main stream's next-token loss (ties: the
    draft depths' mean top-1), in lossless mode by the training loss.

    The schedule: `warmup_steps` of linear warm-up, then a linear decay to ``lr_floor * lr``
    at the last step. entry_lr: the learning rate of the streams' entry (the stream
    embeddings P_j and the rank-eta map of ``drafter.f_rank``: what only drafting rows use),
    None: lr. depth_ramp_steps: the depth weights grow linearly from 0 to their value over
    this many steps (0: from the first step), so the streams start after the main loss has
    moved. init: drafter weights to start from (a file ``edgespec train`` wrote, e.g. a plain
    fine-tune's: a Shared run warm-started from its adapters); each parameter of the same
    name and shape is copied, the rest start fresh.
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
    depth_weights: tuple[float, ...] = (1.0, 0.5, 0.25)
    main_weight: float = 1.0
    soft_weight: float = 0.0  # b: weight of the teacher's top-K (soft labels) in each depth's loss
    checkpoint_every: int = 100
    seed: int = 0
    bf16: bool = True
    dev_items: int = 128
    lr_floor: float = 0.0
    entry_lr: float | None = None
    depth_ramp_steps: int = 0
    init: str = ""
    dev_data: str = ""

    def _check(self) -> None:
        require(self.steps >= 1, self._at("steps"), "must be >= 1")
        require(self.batch_size >= 1, self._at("batch_size"), "must be >= 1")
        require(self.seq_len >= 16, self._at("seq_len"), "must be >= 16")
        require(self.length_window >= 1, self._at("length_window"), "must be >= 1 (1 = random batches)")
        require(self.lr > 0, self._at("lr"), "must be > 0")
        require(0.0 <= self.soft_weight <= 1.0, self._at("soft_weight"), "must be in [0, 1]")
        require(self.dev_items >= 0, self._at("dev_items"), "must be >= 0 (0 = no dev scoring)")
        require(0.0 <= self.lr_floor <= 1.0, self._at("lr_floor"), f"must be in [0, 1] (a fraction of lr), got {self.lr_floor}")
        require(self.entry_lr is None or self.entry_lr > 0, self._at("entry_lr"), f"must be > 0 (or null: lr), got {self.entry_lr}")
        require(
            not self.dev_data or self.dev_data.endswith(".jsonl"),
            self._at("dev_data"),
            f"must be a JSONL file of prompt/response pairs kept out of training, got {self.dev_data!r}",
        )
        require(self.depth_ramp_steps >= 0, self._at("depth_ramp_steps"), f"must be >= 0 (0 = no ramp), got {self.depth_ramp_steps}")


@dataclass(frozen=True)
class DistillConfig(Record):
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
            require(getattr(self, name) >= 1, self._at(name), f"must be >= 1, got {getattr(self, name)}")
        require(self.max_prompt_tokens >= 8, self._at("max_prompt_tokens"), f"must be >= 8, got {self.max_prompt_tokens}")
        require(1 <= self.workers <= 64, self._at("workers"), f"must be in [1, 64], got {self.workers}")


@dataclass(frozen=True)
class TuneConfig(Record):
    """Choosing the draft tree by measurement (``edgespec tune``): acceptance on the greedy
    continuations (`max_new_tokens`) of `prompts` held-out prompts (a task fine-tune's bundle:
    items of its task's dev split), call costs measured at
    position `context`, trees of up to `max_size` nodes."""

    PATH: ClassVar[str] = "tune"
    prompts: int = 24
    max_new_tokens: int = 96
    max_size: int = 24
    context: int = 256

    def _check(self) -> None:
        require(self.prompts >= 1, self._at("prompts"), f"must be >= 1, got {self.prompts}")
        require(self.max_new_tokens >= 8, self._at("max_new_tokens"), f"must be >= 8, got {self.max_new_tokens}")
        require(2 <= self.max_size <= 64, self._at("max_size"), f"must be in [2, 64], got {self.max_size}")
        require(self.context >= 1, self._at("context"), f"must be >= 1, got {self.context}")


@dataclass(frozen=True)
class NumericsConfig(Record):
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
        require(self.calibration_prompts >= 1, self._at("calibration_prompts"), "must be >= 1")
        require(self.heldout_prompts >= 1, self._at("heldout_prompts"), "must be >= 1")


@dataclass(frozen=True)
class ExportConfig(Record):
    """Lowering to ExecuTorch (what XNNPACK's delegate takes follows `quant.kernel`:
    `edgespec.export.swaps.program_ops`).

    step_attention: how a speculative program attends: ``exact`` (edgespec's attention kernel,
    sdk/edgespec/kernels, in both `forward` and `spec_step`: all rows in one call, each row's
    arithmetic independent of the row count, so speculative greedy output equals
    autoregressive greedy output bitwise by construction; built with the system C++
    compiler on first use), ``rows`` (ExecuTorch's `llama::custom_sdpa`, one call per step
    row) or ``custom_sdpa`` (`llama::custom_sdpa`, one call for all rows). Programs without
    speculative methods always use `custom_sdpa`, which ExecuTorch's stock runner has.
    docs/speculative-program.md. separate_base: a speculative program's base-model weights go
    to ``base.ptd`` beside ``model.pte`` (ExecuTorch's program-data separation), the same
    bytes for every task program over the same base, so several task programs share one copy;
    the program then holds only what its task trained (adapters, streams) and the delegates.

    prefill_chunk: the most tokens one `forward` call takes (the program's `get_max_seq_len`,
    the prefill chunk of ExecuTorch's LLM runner; `get_max_context_len` is the context);
    runtimes feed a longer prompt in chunks, which on edgespec's kernels gives the same bits
    as one call. ExecuTorch plans activation memory for the largest call: 128 instead of the
    whole context cut SmolLM2's planned bytes by 15 MB and Gemma 3's by 2 x 55 MB. 0: the
    whole context in one call.

    batch_slots: > 1 adds `decode_rows` (edgespec.export.constants.DECODE_ROWS): the cache holds
    this many sequences of the context side by side, and one call carries rows of all of them
    (`edgespec generate --input ... --batch N`), each sequence's tokens bitwise its own
    decoding's. The cache's bytes grow by the same factor. Needs edgespec's block kernel (its
    exact attention) and an autoregressive program; 1 (the default): no batched method."""

    PATH: ClassVar[str] = "export"
    step_attention: Literal["exact", "rows", "custom_sdpa"] = "exact"
    separate_base: bool = False
    prefill_chunk: int = 128
    batch_slots: int = 1

    def _check(self) -> None:
        require(self.prefill_chunk >= 0, self._at("prefill_chunk"), f"must be 0 (the whole context) or a positive token count, got {self.prefill_chunk}")
        require(1 <= self.batch_slots <= 64, self._at("batch_slots"), f"must be 1 (no batched method) to 64 sequences, got {self.batch_slots}")


@dataclass(frozen=True)
class GatesConfig(Record):
    """What a bundle must show before `edgespec export` writes it (`edgespec validate` exits 1).

    min_speedup: speculative / autoregressive decode tokens/s on the suites (median of the
    per-prompt ratios); 0 turns it off, > 0 requires speculative methods.
    lossless: speculative greedy output identical to autoregressive greedy output on every
    prompt; with `next_token` (quant.head_screen), its greedy output identical to forward's.
    min_score_ratio: the mean task score (averaged over suites) over the fp32 base model's on
    the same prompts is at least this, unless within the noise of the prompts; 0 turns it off.
    max_answer_nll_increase: the suite prompts' reference answers, teacher-forced: their mean
    NLL per token under the program minus under the fp32 source model, at most this (nats),
    unless within the prompts' noise (edgespec.harness.answer_likelihood); 0 turns it off.
    min_top1_agreement, max_perplexity_ratio: fidelity on held-out text against the fp32 source
    model (edgespec.harness.fidelity): the share of next tokens whose argmax agrees, and the
    program's perplexity over the source's; 0 turns each off. A 4-bit re-rounding of the
    default model fails both (65% agreement, ratio 1.72); the carried-over blocks pass.
    max_kl_mean: the mean KL divergence (nats per held-out token) of the program's next-token
    distribution from the fp32 source's, at most this; 0 turns it off. The carried-over
    blocks measure 0.003, XNNPACK's faithful 8da4w 0.02, the 4-bit re-rounding 0.5.
    no_overflow: the chosen pre-normalizers had no overflow/underflow on any search row.
    """

    PATH: ClassVar[str] = "validate.gates"
    min_speedup: float = 0.0
    lossless: bool = True
    min_score_ratio: float = 0.90
    max_answer_nll_increase: float = 0.05
    min_top1_agreement: float = 0.90
    max_perplexity_ratio: float = 1.05
    max_kl_mean: float = 0.05
    no_overflow: bool = True

    def _check(self) -> None:
        require(0.0 <= self.min_speedup <= 100.0, self._at("min_speedup"), f"must be in [0, 100], got {self.min_speedup}")
        require(0.0 <= self.min_score_ratio <= 10.0, self._at("min_score_ratio"), f"must be in [0, 10] (0: off), got {self.min_score_ratio}")
        require(0.0 <= self.min_top1_agreement <= 1.0, self._at("min_top1_agreement"), f"must be in [0, 1] (0: off), got {self.min_top1_agreement}")
        require(
            self.max_perplexity_ratio == 0.0 or self.max_perplexity_ratio >= 1.0,
            self._at("max_perplexity_ratio"),
            f"must be >= 1 or 0 (off), got {self.max_perplexity_ratio}",
        )
        require(self.max_kl_mean >= 0.0, self._at("max_kl_mean"), f"must be >= 0 (0: off), got {self.max_kl_mean}")
        require(self.max_answer_nll_increase >= 0.0, self._at("max_answer_nll_increase"), f"must be >= 0 (0: off), got {self.max_answer_nll_increase}")


@dataclass(frozen=True)
class ValidateConfig(Record):
    """Host validation of the program (`edgespec validate`; a stage of `edgespec export`).

    suites: built-in suites (see edgespec.corpus.validation_sets), ``task:NAME`` (the held-out
    split of a fine-tune task of edgespec.corpus.task_data, scored with its metrics' 95%
    intervals: what a task program is validated on) or JSONL files of your own.
    reference: ``fp32`` also runs the unquantized base model eagerly on the same prompts (cached
    on disk) for the accuracy gate; ``none`` skips it. runs: repetitions per prompt (median).
    lookup > 0: also measure context drafting through `spec_step` (a suffix match of at least
    this many tokens; see edgespec.runtime.generate). fidelity_chunks: chunks of 512 held-out
    tokens (edgespec.harness.fidelity: prose and chat-formatted text, taken in turn; at most 8)
    on which the program is compared with the fp32 source model (each scores its second half;
    needs reference fp32); 0 skips it.
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
        require(len(self.suites) >= 1, self._at("suites"), "needs at least one suite")
        for i, s in enumerate(self.suites):
            require(
                s in SUITE_NAMES or s.endswith(".jsonl") or s.startswith(TASK_SUITE_PREFIX),
                self._at(f"suites[{i}]"),
                f"must be one of {list(SUITE_NAMES)}, task:NAME[:SPLIT] (a fine-tune task's held-out split) or a .jsonl file, got {s!r}",
            )
            if s.startswith(TASK_SUITE_PREFIX):
                try:
                    parse_task_suite(s)
                except EdgespecError as e:
                    require(False, self._at(f"suites[{i}]"), f"task:NAME:SPLIT needs SPLIT in {list(TASK_HELDOUT_SPLITS)}: {e}")
        require(1 <= self.prompts_per_suite <= 10000, self._at("prompts_per_suite"), f"must be in [1, 10000], got {self.prompts_per_suite}")
        require(1 <= self.runs <= 100, self._at("runs"), f"must be in [1, 100], got {self.runs}")
        require(0 <= self.lookup <= 8, self._at("lookup"), f"must be in [0, 8], got {self.lookup}")
        require(
            0 <= self.fidelity_chunks <= 8,
            self._at("fidelity_chunks"),
            f"must be in [0, 8] (the held-out text holds 8 chunks of 512 tokens), got {self.fidelity_chunks}",
        )


@dataclass(frozen=True)
class Recipe(Record):
    """One export, fully described. ``Recipe()`` is the built-in default recipe."""

    TASK: ClassVar[str] = "generate"  # its task kind (edgespec.config.RECIPE_KINDS): a recipe without ``task`` is one
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
        require(bool(self.name), "name", "must not be empty")
        require(
            len(self.train.depth_weights) >= self.drafter.draft_depth,
            "train.depth_weights",
            f"needs one weight per draft depth (drafter.draft_depth: {self.drafter.draft_depth})",
        )
        require(
            self.quant.kv_cache == "fp32" or not self.drafter.weights or self.export.step_attention == "exact",
            "quant.kv_cache",
            f"an fp16 cache is read by edgespec's exact attention; this speculative program attends with export.step_attention={self.export.step_attention}: set it to exact",
        )
        require(
            not (self.quant.head_screen and self.drafter.weights),
            "quant.head_screen",
            "makes an autoregressive program's next_token; a recipe with a drafter (drafter.weights) has spec_step instead: set it false",
        )
        require(
            self.export.batch_slots == 1 or (self.quant.block_kernel and not self.drafter.weights),
            "export.batch_slots",
            "batches an autoregressive program of edgespec's block kernel (its exact attention gives each row its own sequence): "
            "needs quant.kernel: edgespec with 8da4w or 8da8w, and no drafter.weights",
        )
        require(
            not self.export.separate_base or bool(self.drafter.weights),
            "export.separate_base",
            "separates a speculative program's base weights (the ones task programs share): needs drafter.weights",
        )

    def replace(self, **sections: Any) -> Recipe:
        """A copy with whole sections or fields changed, e.g. ``replace(quant={"scheme": "fp32"})``."""
        data = self.to_dict()
        for key, value in sections.items():
            if isinstance(value, dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return from_dict(Recipe, data)
