"""The export-time swaps: what a `Transformer` (or a program holding one) computes with inside
`torch.export`, swapped in for the export only and undone after (ExecuTorch's Llama example:
`replace_kv_cache_with_custom_kv_cache`, `replace_sdpa_with_custom_op`). The model's files hold
the model only; eager code and training never run custom ops.

- `executorch_ops(model, attention, glue)`: every `KVCache` is an `ExecuTorchKVCache`
  (ExecuTorch's `llama::update_cache`, and `update_cache_with_indices` for `decode_rows`), every attention's op the module
  `EXPORT_ATTENTION[attention]` makes (ExecuTorch's `llama::custom_sdpa`, or edgespec's exact
  kernel), block linears run their op, and with `glue` the norms, attentions and feed-forwards
  are edgespec's kernel modules (`edgespec.export.kernel_modules`: q/k/v and gate/up as one op
  call each).
- `program_ops(quant, ...)`: what a program's attention, glue and XNNPACK delegation are,
  from `edgespec.quant.program_kernels` (what ``quant.kernel`` makes of the linears).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from edgespec.config import QuantConfig
from edgespec.errors import EdgespecError
from edgespec.export.kernel_modules import kernel_modules
from edgespec.models.llama import SDPA, Attention, KeyRanges, KVCache, additive_mask
from edgespec.quant import program_kernels


def load_executorch_llm_ops() -> None:
    """Register ExecuTorch's LLM custom ops (`llama::custom_sdpa`, `llama::update_cache`)."""
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401


class ExecuTorchKVCache(KVCache):
    """The same cache written by ExecuTorch's `llama::update_cache` (export only)."""

    def write_(self, buf: torch.Tensor, start_pos, rows: torch.Tensor) -> None:
        torch.ops.llama.update_cache(rows.to(buf.dtype), buf, start_pos)  # rounded to an fp16 cache's dtype

    def write_rows_(self, buf: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> None:
        torch.ops.llama.update_cache_with_indices(rows.to(buf.dtype), buf, 0, index[None])  # row t to cache row index[t]


class ExecuTorchSDPA(SDPA):
    """ExecuTorch's `llama::custom_sdpa` (GQA-aware), same contract as `SDPA` (export only).

    rows_per_call: a call with a static row count (a speculative step, not the
    dynamic-length prefill) attends one query row per op call, the kernel path one-token
    decoding takes; otherwise all rows go in one call: with 1 thread ~2.3x one row for 4 rows
    instead of ~7x, with 2 threads inside a full program far slower (bench/step_cost.py,
    docs/speculative-program.md). With a mask the op reads every key it is given, so only
    [0, S') is passed."""

    def __init__(self, rows_per_call: bool = False):
        super().__init__()
        self.rows_per_call = rows_per_call

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is not None:
            n = mask.shape[1]
            k, v, mask = k.narrow(1, 0, n), v.narrow(1, 0, n), mask.to(k.dtype)
        T = q.shape[1]
        if self.rows_per_call and isinstance(T, int):
            return torch.cat([self._op(q[:, i : i + 1], k, v, start_pos + i, None if mask is None else mask[i : i + 1]) for i in range(T)], 1)
        return self._op(q, k, v, start_pos, mask)

    @staticmethod
    def _op(q, k, v, start_pos, mask):
        if mask is None:
            return torch.ops.llama.custom_sdpa(q, k, v, start_pos, None, 0.0, True)
        return torch.ops.llama.custom_sdpa(q, k, v, 0, mask, 0.0, False)


class ExactSDPA(SDPA):
    """edgespec's attention kernel (`edgespec::attention`, sdk/edgespec/kernels), same contract
    as `SDPA` (export only): one call for all rows, each row's arithmetic independent of the
    number of rows in the call, so R rows verified together give the bits R one-row calls give.
    Programs using it need `edgespec.kernels.library.load()` in the process that runs them."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos, mask: torch.Tensor | None) -> torch.Tensor:
        from edgespec.errors import EdgespecError
        from edgespec.kernels.ops import HEAD_SIZES

        if q.shape[-1] not in HEAD_SIZES:
            raise EdgespecError(f"edgespec's exact attention supports head sizes {HEAD_SIZES}, not {q.shape[-1]}; export with export.step_attention=rows")
        if isinstance(mask, KeyRanges):  # a batched call's rows: the ranges themselves
            return torch.ops.edgespec.attention_ranges(q, k, v, mask.first, mask.count)
        if mask is not None and mask.dtype == torch.bool:
            mask = additive_mask(mask)
        return torch.ops.edgespec.attention(q, k, v, start_pos, mask)


# how an exported program attends (`export.step_attention`): the module executorch_ops swaps in
EXPORT_ATTENTION: dict[str, Callable[[], SDPA]] = {
    "custom_sdpa": lambda: ExecuTorchSDPA(rows_per_call=False),
    "rows": lambda: ExecuTorchSDPA(rows_per_call=True),
    "exact": lambda: ExactSDPA(),
}


Delegation = Literal["all", "compute", "none"]
"""What XNNPACK takes of a program: ``all`` every op it can (a program of XNNPACK's linears);
``compute`` its linears, softmax and elementwise ops but no reshapes, concatenations or slices
(a program of edgespec's block kernel with a few float parts, e.g. a drafter's: a reshape
between edgespec's ops costs a delegate call, and a thread pool wake-up at two threads, where
the portable runtime makes it a view); ``none`` nothing (a program whose every linear and glue
op is edgespec's own)."""


@dataclass(frozen=True)
class ProgramOps:
    """What a language-model program computes with besides its linears (`program_ops`).

    attention: a key of `EXPORT_ATTENTION`, for every method of the program; xnnpack: what of
    the program XNNPACK takes (`Delegation`); glue: its norms, rotations and gates are
    edgespec's ops (`edgespec.export.kernel_modules`), as where its linears are edgespec's
    block kernel."""

    attention: str
    xnnpack: Delegation
    glue: bool = False


def program_ops(quant: QuantConfig, step_attention: str, head_dim: int, speculative: bool, windowed: bool = False) -> ProgramOps:
    """What `quant.kernel` implies for a program of a decoder with heads of `head_dim`, with
    speculative methods (attending by `export.step_attention`) or without; `windowed`: some
    layers attend within a sliding window shorter than the context (Gemma 3)."""
    kernels = program_kernels(quant)
    block_kernel = kernels.linears == "edgespec"
    if speculative:  # the drafter's float parts and the acceptance's softmax are XNNPACK's; on the
        # block kernel nothing else is (a delegated reshape between edgespec's ops is a delegate call)
        return ProgramOps(step_attention, xnnpack="compute" if block_kernel else "all", glue=kernels.glue)
    # a program of edgespec's block kernel needs edgespec's library anyway: its attention
    # is edgespec's too (one row: ~4x faster than llama::custom_sdpa here, bench/attention_paths.py),
    # where the kernel is compiled for the model's head size; windows are the exact kernel's
    # only (its mask: llama::custom_sdpa's mask path gave wrong logits)
    from edgespec.kernels.ops import HEAD_SIZES

    attention = "exact" if (block_kernel or windowed) and head_dim in HEAD_SIZES else "custom_sdpa"
    # an autoregressive block-kernel program is edgespec's ops end to end: nothing to delegate
    return ProgramOps(attention, xnnpack="none" if block_kernel else "all", glue=kernels.glue)


@contextmanager
def executorch_ops(model: nn.Module, attention: str = "custom_sdpa", glue: bool = False):
    """Within the block, every attention of `model` uses custom ops (`EXPORT_ATTENTION[attention]`:
    ExecuTorch's `llama::custom_sdpa` or edgespec's exact kernel), every `KVCache` (an
    attention's, or a drafter's per-position store) is an `ExecuTorchKVCache` over the same
    buffers, and the block linears and, with `glue` (`ProgramOps.glue`), the glue between
    them are edgespec's kernel modules (`kernel_modules`), as `torch.export` of a program
    needs; on exit the plain PyTorch modules are back. Eager code never runs custom ops
    (ExecuTorch's `replace_sdpa_with_custom_op` idea, undone after export)."""
    load_executorch_llm_ops()
    from edgespec.kernels.ops import HEAD_SIZES  # and the edgespec ops' schemas

    windowed = [m.window for m in model.modules() if isinstance(m, Attention) and m.window]
    if windowed and attention != "exact":
        raise EdgespecError(
            f"{len(windowed)} sliding-window attention layers (window {min(windowed)}) need edgespec's exact attention "
            f"(a head size of {HEAD_SIZES}); ExecuTorch's llama::custom_sdpa has no window: export with model.max_seq_len <= {min(windowed)} "
            "(within their window they attend to every key)"
        )
    make_sdpa = EXPORT_ATTENTION[attention]
    caches = [(m, name, c) for m in model.modules() for name, c in m.named_children() if type(c) is KVCache]  # attention's and any other
    attentions = [(m, m.sdpa) for m in model.modules() if isinstance(m, Attention)]
    for m, name, c in caches:
        setattr(m, name, ExecuTorchKVCache(c.k_cache, c.v_cache))
    for m, _ in attentions:
        m.sdpa = make_sdpa()
    try:
        with kernel_modules(model, glue):  # (copies of the attentions above: their caches and ops swapped first)
            yield model
    finally:
        for m, name, c in caches:
            swapped = getattr(m, name)
            c.k_cache, c.v_cache = swapped.k_cache, swapped.v_cache  # (to_half_ may have replaced them)
            setattr(m, name, c)
        for m, sdpa in attentions:
            m.sdpa = sdpa
