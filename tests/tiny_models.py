"""Tiny models and files for tests: a random Llama, and a 1-layer Llama GGUF of given tensors."""

from __future__ import annotations

import numpy as np
import torch


def random_transformer(args, seed: int = 0, std: float = 0.2):
    """An `edgespec.models.llama.Transformer` of `args` with N(0, std) weights, in eval mode."""
    from edgespec.models.llama import Transformer

    torch.manual_seed(seed)
    model = Transformer(args)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, std)
    return model.eval()


def write_llama_gguf(path, dim: int, hidden: int, heads: int, kv_heads: int, tensors: dict[str, tuple[np.ndarray, str]]) -> None:
    """A 1-layer Llama GGUF with a byte-level vocabulary: `tensors` by GGUF name as (raw data,
    GGUF type name) (F32 norms of size `dim` are added)."""
    import gguf

    tokens = vocabulary()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(hidden)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_context_length(256)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges([])
    w.add_eos_token_id(2)
    for name, (raw, qtype) in tensors.items():
        t = getattr(gguf.GGMLQuantizationType, qtype)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=t)
    for name in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
        w.add_tensor(name, np.ones(dim, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def vocabulary() -> list[str]:
    """The byte-level vocabulary of `write_llama_gguf`'s files."""
    from tokenizers.pre_tokenizers import ByteLevel

    return ["<unk>", "<s>", "</s>", *sorted(ByteLevel.alphabet())]
