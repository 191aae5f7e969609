"""What a loader returns, independent of the file format it read."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from edgespec.models.blocks import BlockWeights
from edgespec.models.llama import LlamaArgs


@dataclass
class ModelSource:
    """Weights and metadata of a model, ready to build a `Transformer`.

    state_dict uses Meta names (`layers.N.attention.wq.weight`) with q/k in the
    interleaved-pair RoPE layout. tokenizer_json is a complete `tokenizer.json` text.
    blocks: the weights a block-quantized file stores, by the same names, as the file's own
    codes and scales (empty for fp32/bf16 sources); `state_dict` holds them dequantized.
    file_types: the storage type of every weight of a GGUF file by the same names ("Q6_K",
    "F32", ...), so what quantization rounds again can be reported by its source type.
    """

    name: str
    args: LlamaArgs
    state_dict: dict[str, torch.Tensor]
    tokenizer_json: str
    chat_template: str | None
    bos_id: int | None
    eos_ids: tuple[int, ...]
    add_bos: bool = False
    blocks: dict[str, BlockWeights] = field(default_factory=dict)
    file_types: dict[str, str] = field(default_factory=dict)
