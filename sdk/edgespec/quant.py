"""Quantization recipes over torchao's `quantize_` (no kernels of our own).

Each scheme is a function `nn.Module -> nn.Module` (in place) selected from a table.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from edgespec.config import QuantConfig


def _linear_filter(group_size: int) -> Callable[[nn.Module, str], bool]:
    # a group must tile the input dimension exactly (576 = 18 * 32; 128 does not divide it)
    return lambda m, fqn: isinstance(m, nn.Linear) and m.in_features % group_size == 0


def _untie_output_(model: nn.Module) -> None:
    """Give the lm head its own weight, so it and the embedding can be quantized differently."""
    out, emb = getattr(model, "output", None), getattr(model, "tok_embeddings", None)
    if out is not None and emb is not None and out.weight is emb.weight:
        out.weight = nn.Parameter(emb.weight.detach().clone(), requires_grad=False)


def _fp32(model: nn.Module, cfg: QuantConfig) -> nn.Module:
    return model


def _8da4w(model: nn.Module, cfg: QuantConfig) -> nn.Module:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    _untie_output_(model)
    quantize_(
        model,
        Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(cfg.group_size)),
        filter_fn=_linear_filter(cfg.group_size),
    )
    return model


def _8da8w(model: nn.Module, cfg: QuantConfig) -> nn.Module:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis

    _untie_output_(model)
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)), filter_fn=_linear_filter(1))
    return model


def _quantize_embedding_(model: nn.Module, cfg: QuantConfig) -> None:
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    _untie_output_(model)
    quantize_(
        model,
        IntxWeightOnlyConfig(weight_dtype=getattr(torch, f"int{cfg.embedding_bits}"), granularity=PerGroup(cfg.group_size)),
        filter_fn=lambda m, fqn: isinstance(m, nn.Embedding),
    )


def _fp16(model: nn.Module, cfg: QuantConfig) -> nn.Module:
    return model.to_half_()


SCHEMES: dict[str, Callable[[nn.Module, QuantConfig], nn.Module]] = {
    "fp32": _fp32,
    "fp16": _fp16,
    "8da4w": _8da4w,
    "8da8w": _8da8w,
}


def quantize_model_(model: nn.Module, cfg: QuantConfig) -> nn.Module:
    """Quantize `model` in place according to `cfg`; returns it."""
    if cfg.embedding_bits:
        _quantize_embedding_(model, cfg)
    return SCHEMES[cfg.scheme](model, cfg)
