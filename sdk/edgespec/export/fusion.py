"""Fold a block-kernel program's glue into its linears: one graph pass at lowering.

A decoded token of SmolLM2 ran ~480 op calls, of which the linears and attention were 150; the
rest (norms, splits, gates, residual adds) each cost an interpreter dispatch and ran on one
thread while the other waited. `edgespec::block_linear` can make its own input and add its own
residual (`prologue`, `residual`: kernels/ops.py), computed with the same arithmetic as the ops
they replace (kernels/glue.h), so this pass changes no bit of any output:

    block_linear(rms_norm(x, w, eps), W)                  -> block_linear(x, W, prologue=rms_norm, w, eps)
    block_linear(silu_mul(*split(gu, [F, F], -1)), W)     -> block_linear(gu, W, prologue=swiglu)
    r + block_linear(x, W)   (same shapes)                -> block_linear(x, W, residual=r)

A norm is folded only when every reader is a plain block linear (each recomputes it: a few
hundred flops), a gate likewise; a residual add only into a linear it alone reads, whose other
operand is computed before that linear, and never one that is a program output.

The same pass gives the program's argmaxes over the last dimension of 2-D fp32 tensors (a
speculative step's acceptance and drafting heads) to edgespec's scan (`argmax_rows`, the same
index: the first largest value):

    argmax(x, -1, keepdim)                                 -> argmax_rows(x) (unsqueezed when keepdim)
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Graph, Node


def fuse_block_linear_glue(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """`ep` with its norms, SwiGLU gates and residual adds folded into the block linears that
    read them (in place; returned for chaining). A program without block linears is unchanged."""
    from edgespec.kernels import ops

    linear = torch.ops.edgespec.block_linear.default
    graph = ep.graph_module.graph
    if not any(n.target is linear for n in graph.nodes):
        return ep
    folded = _fold_norms(graph, linear, ops.PROLOGUES["rms_norm"]) + _fold_gates(graph, linear, ops.PROLOGUES["swiglu"]) + _fold_residuals(graph, linear)
    folded += _scan_argmaxes(graph)
    if folded:
        graph.lint()
        ep.graph_module.recompile()
    return ep


def _plain(node: Node, linear) -> bool:
    """A block linear call with no prologue and no residual (as a model writes it)."""
    return node.op == "call_function" and node.target is linear and len(node.args) == 4 and not node.kwargs


def _set_args(node: Node, x, prologue: int, norm_weight=None, eps: float = 0.0) -> None:
    _, weight, fmt, n = node.args
    node.args = (x, weight, fmt, n, prologue, norm_weight, eps)


def _fold_norms(graph: Graph, linear, prologue: int) -> int:
    done = 0
    for norm in [n for n in graph.nodes if n.target is torch.ops.edgespec.rms_norm.default]:
        readers = list(norm.users)
        if not readers or not all(_plain(u, linear) and u.args[0] is norm and norm not in u.args[1:] for u in readers):
            continue
        x, weight, eps = norm.args
        for u in readers:
            _set_args(u, x, prologue, weight, eps)
        graph.erase_node(norm)
        done += 1
    return done


def _fold_gates(graph: Graph, linear, prologue: int) -> int:
    done = 0
    for gate in [n for n in graph.nodes if n.target is torch.ops.edgespec.silu_mul.default]:
        halves = _halves(gate)
        readers = list(gate.users)
        if halves is None or not readers or not all(_plain(u, linear) and u.args[0] is gate for u in readers):
            continue
        split, stacked = halves
        for u in readers:
            _set_args(u, stacked, prologue)
        graph.erase_node(gate)
        for item in list(split.users):
            graph.erase_node(item)
        graph.erase_node(split)
        done += 1
    return done


def _halves(gate: Node) -> tuple[Node, Node] | None:
    """(the split, the stacked tensor) when gate = silu_mul(a, b) with a, b the two equal halves
    of one tensor's last dimension and read by nothing else; else None."""
    a, b = gate.args
    if not all(isinstance(h, Node) and h.target is operator.getitem and len(h.users) == 1 for h in (a, b)):
        return None
    split = a.args[0]
    if split is not b.args[0] or (a.args[1], b.args[1]) != (0, 1) or split.target is not torch.ops.aten.split_with_sizes.default:
        return None
    stacked, sizes, *dim = split.args
    rank = stacked.meta["val"].dim()
    if len(split.users) != 2 or len(sizes) != 2 or sizes[0] != sizes[1] or (dim[0] if dim else 0) not in (-1, rank - 1):
        return None
    return split, stacked


def _fold_residuals(graph: Graph, linear) -> int:
    order = {n: i for i, n in enumerate(graph.nodes)}
    done = 0
    for add in [n for n in graph.nodes if n.target is torch.ops.aten.add.Tensor]:
        if len(add.args) != 2 or add.kwargs or any(u.op == "output" for u in add.users):
            continue
        for lin, other in (add.args, add.args[::-1]):
            if not (isinstance(lin, Node) and isinstance(other, Node) and lin.target is linear and len(lin.users) == 1):
                continue
            if len(lin.args) > 7 or order[other] > order[lin]:  # (a linear's args grow to 8 only with a residual)
                continue
            vals = [n.meta["val"] for n in (lin, other, add)]
            if len({str(list(v.shape)) for v in vals}) != 1 or {v.dtype for v in vals} != {torch.float32}:  # (sizes may be symbols)
                continue
            lin.args = (*(*lin.args, 0, None, 0.0)[:7], other)
            add.replace_all_uses_with(lin)
            graph.erase_node(add)
            done += 1
            break
    return done


def _scan_argmaxes(graph: Graph) -> int:
    done = 0
    for node in [n for n in graph.nodes if n.target is torch.ops.aten.argmax.default]:
        x = node.args[0]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        x_val = x.meta.get("val")
        if x_val is None or x_val.dim() != 2 or x_val.dtype != torch.float32 or dim not in (-1, 1):
            continue
        with graph.inserting_before(node):
            scan = graph.call_function(torch.ops.edgespec.argmax_rows.default, (x,))
            scan.meta["val"] = node.meta["val"].squeeze(-1) if keepdim else node.meta["val"]
            result = scan
            if keepdim:
                result = graph.call_function(torch.ops.aten.unsqueeze.default, (scan, -1))
                result.meta["val"] = node.meta["val"]
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        done += 1
    return done
