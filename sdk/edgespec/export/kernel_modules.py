"""edgespec's kernel modules, swapped in for the export of a block-kernel program only (as
ExecuTorch's Llama source transforms replace a model's modules; models/llama.py holds the
model, in plain PyTorch, and never calls a custom op).

Each replaces one class of models/llama.py by a subclass computing the same values with
edgespec's ops (kernels/ops.py; each op's arithmetic is the eager code's, rounded as written):

- `KernelRMSNorm`: ``edgespec::rms_norm``.
- `KernelAttention`: RoPE as ``edgespec::rope``; q, k, v as one block linear (`Stacked`)
  where they are block linears of one format: their input is quantized once, in one op call.
- `KernelFeedForward`: the SiLU gate as ``edgespec::silu_mul``; gate and up as one block
  linear likewise.
- `BlockLinear`s and `BlockEmbedding`s are their op modules (`BlockLinear.op`), in every
  program that has them.

`kernel_modules(model, glue)` swaps them in and, on exit, puts the model's own modules back;
whether a program's glue is edgespec's is `edgespec.export.swaps.program_ops`' decision.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from edgespec.kernels.block_linear import BlockEmbedding, BlockLinear, recast, stacked
from edgespec.models.llama import Attention, FeedForward, RMSNorm, with_adapter


class Stacked(nn.Module):
    """Linears that read one input as one block linear (`stacked`: their rows side by side),
    split back: each output is bitwise the linear's own (the kernel is per output row), plus
    its adapter where one is given by the linear's name."""

    def __init__(self, linear: BlockLinear, names: Sequence[str], sizes: Sequence[int]):
        super().__init__()
        self.linear, self.names, self.sizes = linear, tuple(names), tuple(sizes)

    def forward(self, x: torch.Tensor, adapters=None) -> tuple[torch.Tensor, ...]:
        ys = self.linear(x).split(self.sizes, -1)
        return tuple(with_adapter(y, adapters, n, x) for y, n in zip(ys, self.names))


class KernelRMSNorm(RMSNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.edgespec.rms_norm(x, self.weight, self.eps)


class KernelAttention(Attention):
    stacked: Stacked | None

    def project(self, x: torch.Tensor, adapters=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return super().project(x, adapters) if self.stacked is None else self.stacked(x, adapters)

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return torch.ops.edgespec.rope(x, cos, sin)


class KernelFeedForward(FeedForward):
    stacked: Stacked | None

    def project(self, x: torch.Tensor, adapters=None) -> tuple[torch.Tensor, torch.Tensor]:
        return super().project(x, adapters) if self.stacked is None else self.stacked(x, adapters)

    def activate(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return torch.ops.edgespec.silu_mul(gate, up) if self.activation == "silu" else super().activate(gate, up)


def _with_stacked(module: nn.Module, cls: type[nn.Module], names: Sequence[str]) -> nn.Module:
    """`cls` over the module, the linears `names` as one `Stacked` where they stack (the
    separate ones then left out: the program holds only the stacked weights)."""
    linears = [getattr(module, n) for n in names]
    fused = stacked(linears)
    if fused is None:
        new = recast(module, cls)
        new.stacked = None
        return new
    new = recast(module, cls, drop=tuple(names))
    new.stacked = Stacked(fused.op(), names, [lin.out_features for lin in linears])
    return new


_OPS = {BlockLinear: BlockLinear.op, BlockEmbedding: BlockEmbedding.op}
"""The block modules -> their op modules, in every program that has them."""
_GLUE = {
    RMSNorm: lambda m: recast(m, KernelRMSNorm),
    Attention: lambda m: _with_stacked(m, KernelAttention, ("wq", "wk", "wv")),
    FeedForward: lambda m: _with_stacked(m, KernelFeedForward, ("w1", "w3")),
}
"""A model class -> its kernel module, made from an instance (programs whose glue is edgespec's)."""


@contextmanager
def kernel_modules(model: nn.Module, glue: bool) -> Iterator[nn.Module]:
    """Within the block, every block linear and block embedding of `model` is its op module
    (`BlockLinear.op`) and, with `glue` (`edgespec.export.swaps.ProgramOps.glue`), every
    RMSNorm, attention and feed-forward (exactly those classes) its kernel module; on exit the
    model's own modules are back, unchanged."""
    swaps = {**_OPS, **(_GLUE if glue else {})}
    # every place a module is held (a drafter may hold the base model's head or norm too)
    targets = [(name, m) for name, m in model.named_modules(remove_duplicate=False) if type(m) in swaps]
    undo = []
    try:
        for name, m in reversed(targets):  # innermost first: a copy holds its children's swaps
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name)
            setattr(parent, child, swaps[type(m)](m))
            undo.append((parent, child, m))
        yield model
    finally:
        for parent, child, m in reversed(undo):
            setattr(parent, child, m)
