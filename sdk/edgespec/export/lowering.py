"""Lower a `Transformer` to one ExecuTorch program: edgespec's ops end to end for a program of
the block kernel (nothing delegated), XNNPACK's delegate for the rest (`Delegation`).

The program follows ExecuTorch's LLM runner conventions: `forward(tokens [1, T],
input_pos [1])` with a dynamic T up to `get_max_seq_len` (`export.prefill_chunk`; a longer
prompt goes in chunks), the KV cache as mutable buffers inside the program, and the metadata
methods of `edgespec.export.constants`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from edgespec.export import constants as C

if TYPE_CHECKING:
    from edgespec.export.swaps import Delegation


@dataclass(frozen=True)
class SpecMeta:
    """The speculative configuration a runtime reads from the program."""

    branching: tuple[int, ...]
    parents: tuple[int, ...]
    n_streams: int
    lossless: bool

    def constant_methods(self) -> dict[str, object]:
        return {
            C.GET_SPEC_DEPTH: len(self.branching),
            C.GET_SPEC_TOPK: max(self.branching),
            C.GET_SPEC_TREE_SIZE: len(self.parents),
            C.GET_SPEC_BRANCHING: list(self.branching),
            C.GET_SPEC_PARENTS: list(self.parents),
            C.GET_SPEC_N_STREAMS: self.n_streams,
            C.GET_SPEC_LOSSLESS: self.lossless,
        }


@dataclass(frozen=True)
class ProgramMeta:
    """What the program's metadata methods answer."""

    max_seq_len: int  # the context (cache positions)
    vocab_size: int
    n_layers: int
    bos_id: int
    eos_ids: tuple[int, ...]
    spec: SpecMeta | None = None
    call_tokens: int = 0  # the most tokens one forward call takes (`tokens_per_call`); 0: the context
    batch_slots: int = 1  # sequences the cache holds side by side (> 1: the program has decode_rows)

    def constant_methods(self) -> dict[str, object]:
        # ExecuTorch's LLM runner: get_max_seq_len the tokens of one call (its prefill chunk),
        # get_max_context_len the context
        batch = {C.GET_BATCH_SLOTS: self.batch_slots} if self.batch_slots > 1 else {}
        return (
            (self.spec.constant_methods() if self.spec else {})
            | batch
            | {
                C.GET_MAX_SEQ_LEN: self.call_tokens or self.max_seq_len,
                C.GET_MAX_CONTEXT_LEN: self.max_seq_len,
                C.GET_VOCAB_SIZE: self.vocab_size,
                C.GET_N_LAYERS: self.n_layers,
                C.GET_BOS_ID: self.bos_id,
                C.GET_EOS_IDS: list(self.eos_ids),
                C.USE_KV_CACHE: True,
                C.USE_SDPA_WITH_KV_CACHE: False,
                C.ENABLE_DYNAMIC_SHAPE: True,
            }
        )


# XNNPACK's partitioner configs of ops that only move data
_SHAPE_CONFIGS = (
    "ViewCopyConfig",
    "UnsqueezeCopyConfig",
    "SliceCopyConfig",
    "PermuteConfig",
    "CloneConfig",
    "CloneDimOrderConfig",
    "CatConfig",
    "ToDimOrderCopyConfig",
)


def xnnpack_partitioners(delegation: Delegation) -> list:
    """The partitioners `to_edge_transform_and_lower` gets for a `Delegation`."""
    from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    if delegation == "none":
        return []
    if delegation == "all":
        return [XnnpackPartitioner()]
    return [XnnpackPartitioner(configs=[c for c in ALL_PARTITIONER_CONFIGS if c.__name__ not in _SHAPE_CONFIGS])]


def tokens_per_call(max_seq_len: int, prefill_chunk: int) -> int:
    """The most tokens one forward call of a program with a context of `max_seq_len` takes:
    `export.prefill_chunk`, at most max_seq_len - 1 (0: max_seq_len - 1)."""
    return min(prefill_chunk, max_seq_len - 1) if prefill_chunk else max_seq_len - 1


def export_forward(
    model: torch.nn.Module, max_seq_len: int, attention: str = "custom_sdpa", call_tokens: int = 0, glue: bool = False
) -> torch.export.ExportedProgram:
    """`torch.export` of forward with a dynamic token count in [1, call_tokens] (0:
    max_seq_len - 1), with
    custom attention and cache ops swapped in for the export only (`attention`: a key of
    `edgespec.export.swaps.EXPORT_ATTENTION`; "custom_sdpa", ExecuTorch's `llama::custom_sdpa`,
    keeps the program runnable by ExecuTorch's stock LLM runner; `glue`: edgespec's norms,
    rotations and gates, `edgespec.export.swaps.ProgramOps.glue`)."""
    from edgespec.export.swaps import executorch_ops

    with torch.no_grad(), executorch_ops(model, attention, glue):
        return export_dynamic_length(model, call_tokens or max_seq_len - 1)


def export_dynamic_length(module: torch.nn.Module, max_tokens: int) -> torch.export.ExportedProgram:
    """`torch.export` of a module called as (tokens [1, T], input_pos [1]) with T in
    [1, max_tokens] (a forward or next_token; the caller holds `executorch_ops`)."""
    tokens, input_pos = torch.zeros((1, min(4, max_tokens)), dtype=torch.long), torch.zeros((1,), dtype=torch.long)
    seq = torch.export.Dim("seq_len", min=1, max=max_tokens)
    shapes = ({1: seq}, None)
    if isinstance(module, MethodAsForward):  # its forward takes *args: one entry holding them all
        shapes = (shapes,)
    return torch.export.export(module, (tokens, input_pos), dynamic_shapes=shapes, strict=False)


def export_decode_rows(model: torch.nn.Module, attention: str, max_rows: int, glue: bool = False) -> torch.export.ExportedProgram:
    """`torch.export` of `Transformer.decode_rows` (batched decoding over the model's
    `batch_slots` cache slots): T in [1, max_rows] rows, up to one emitted row per slot. Only
    edgespec's exact attention gives each row its own slot's keys in one call (its mask path):
    `attention` must be "exact"."""
    from edgespec.errors import EdgespecError
    from edgespec.export.swaps import executorch_ops

    if attention != "exact":
        raise EdgespecError(
            f"batched decoding (export.batch_slots > 1) needs edgespec's exact attention, and this program attends with {attention}: "
            "export with quant.kernel=edgespec (the default), or export.batch_slots=1"
        )
    slots = model.batch_slots
    rows, emitted = torch.export.Dim("rows", min=1, max=max_rows), torch.export.Dim("emitted", min=1, max=slots)
    n = min(3, max_rows)  # examples of more than one row and emitted row: sizes 0 and 1 specialize
    example = (torch.zeros((1, n), dtype=torch.long), torch.zeros(n, dtype=torch.long), torch.arange(n), torch.arange(min(2, n)))
    shapes = (({1: rows}, {0: rows}, {0: rows}, {0: emitted}),)
    with torch.no_grad(), executorch_ops(model, attention, glue):
        return torch.export.export(MethodAsForward(model, "decode_rows"), example, dynamic_shapes=shapes, strict=False)


class MethodAsForward(torch.nn.Module):
    """One method of `owner` exposed as `forward` for `torch.export`: methods exported through
    it keep the same buffer names, so lowered together they share their KV cache."""

    def __init__(self, owner: torch.nn.Module, name: str):
        super().__init__()
        self.owner, self.name = owner, name

    def forward(self, *args):
        return getattr(self.owner, self.name)(*args)


def export_with_next_token(
    model: torch.nn.Module, max_seq_len: int, attention: str = "custom_sdpa", call_tokens: int = 0, glue: bool = False
) -> dict[str, torch.export.ExportedProgram]:
    """`export_forward`'s forward plus `next_token` (`Transformer.next_token`: the greedy token,
    edgespec.export.constants.NEXT_TOKEN), both with a dynamic token count, sharing one KV cache."""
    from edgespec.export.swaps import executorch_ops

    with torch.no_grad(), executorch_ops(model, attention, glue):
        return {name: export_dynamic_length(MethodAsForward(model, name), call_tokens or max_seq_len - 1) for name in (C.FORWARD, C.NEXT_TOKEN)}


BASE_DATA = "base"  # the tag (and .ptd file stem) of a program's base-model constants kept outside it


def is_base_constant(name: str) -> bool:
    """A speculative program's constant that belongs to its base model (the weights of
    `SpecProgram.base`, named ``p_owner_base_*`` / ``b_owner_base_*`` by `MethodAsForward`):
    the same bytes in every task program over the same base and export settings."""
    return re.match(r"^[pbc]_owner_base_", name) is not None


@dataclass(frozen=True)
class LoweredProgram:
    """A serialized program and the data files it reads (file name -> bytes; empty when every
    constant is inside the program)."""

    program: bytes
    data: dict[str, bytes]


def lower_to_executorch(
    programs: dict[str, torch.export.ExportedProgram], meta: ProgramMeta, xnnpack: Delegation = "all", separate_base: bool = False
) -> LoweredProgram:
    """XNNPACK-delegate every method as `xnnpack` says (`Delegation`) and serialize to `.pte`
    bytes; with `separate_base`, the base model's constants that stay outside the delegates
    (`is_base_constant`: edgespec's block-kernel weights, norms, embeddings) go to one data
    file, ``base.ptd`` (ExecuTorch's program-data separation), which every task program of
    the same base shares byte for byte."""
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.sym_shape_eval_pass import ConstraintBasedSymShapeEvalPass

    from edgespec.export.fusion import fuse_block_linear_glue

    programs = {name: fuse_block_linear_glue(ep) for name, ep in programs.items()}  # no-op without block linears
    shared = len(programs) > 1  # methods share the KV cache (same buffer names)
    # without grad: ExecuTorch's passes re-run a torch.cond (the step's acceptance) as an
    # autograd op otherwise, and its re-trace trips over the step's data-dependent positions
    with torch.no_grad():
        edge = to_edge_transform_and_lower(
            programs,
            # one partitioner for every precision: a layer's quantized linears and the fp32 ops
            # between them share delegate subgraphs. (Dynamically quantized linears first, in a
            # partitioner of their own, made every linear its own subgraph: SmolLM2's one-token
            # forward made 303 delegate calls, now 184; bench/step_cost.py --profile counts them.)
            partitioner=xnnpack_partitioners(xnnpack),
            compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True),
            constant_methods=meta.constant_methods(),
        )
        et = edge.to_executorch(
            ExecutorchBackendConfig(
                extract_delegate_segments=True,
                do_quant_fusion_and_const_prop=True,
                memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False, share_mutable_buffers=shared),
                emit_mutable_buffer_names=shared,
                sym_shape_eval_pass=ConstraintBasedSymShapeEvalPass(),
                external_constants=(lambda node: BASE_DATA if is_base_constant(node.name) else None) if separate_base else False,
            )
        )
    data: dict[str, bytes] = {}
    if separate_base:  # the manager writes its data files (named by tag) to a directory
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as d:
            et.write_tensor_data_to_file(d)
            data = {f.name: f.read_bytes() for f in Path(d).iterdir()}
    return LoweredProgram(et.buffer, data)
