"""Load a GGUF file of a family edgespec's decoder computes (`general.architecture` llama,
qwen2, qwen3 or gemma3): metadata, dequantized weights, the file's own blocks, tokenizer.

Whatever in the file would change the numerics and is not implemented (a rope scaling type,
partial rotary dimensions, tensors the decoder has no place for) is an error naming it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from edgespec.errors import EdgespecError
from edgespec.kernels.block_formats import GGUF_TYPES
from edgespec.models.blocks import BlockWeights, read_blocks
from edgespec.models.llama import ROPE_ROWS, LlamaArgs, interleave_rope_rows
from edgespec.models.source import ModelSource
from edgespec.models.tokenizer import build_bpe_tokenizer_json, build_spm_tokenizer_json


@dataclass(frozen=True)
class GgufArch:
    """What a `general.architecture` means for edgespec's decoder (Gemma 3's options as
    llama.cpp computes the architecture; its converter already added 1 to every norm weight)."""

    interleaved_rope: bool  # llama.cpp stored q/k rows as interleaved pairs (its LLAMA rope); else rotate-half (NEOX): permuted here
    sandwich_norms: bool = False
    activation: str = "silu"
    embed_scale: bool = False
    window_pattern: int = 0  # with `{arch}.attention.sliding_window`: every layer but each n-th is windowed
    local_rope_theta: float = 0.0  # the windowed layers' rope base


GGUF_ARCHS = {
    "llama": GgufArch(interleaved_rope=True),
    "qwen2": GgufArch(interleaved_rope=False),
    "qwen3": GgufArch(interleaved_rope=False),
    "gemma3": GgufArch(interleaved_rope=False, sandwich_norms=True, activation="gelu_tanh", embed_scale=True, window_pattern=6, local_rope_theta=10000.0),
}

# GGUF tensor name -> Meta name ({} is the layer index)
_NAMES = {
    "token_embd.weight": "tok_embeddings.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "output.weight",
    "blk.{}.attn_norm.weight": "layers.{}.attention_norm.weight",
    "blk.{}.attn_q.weight": "layers.{}.attention.wq.weight",
    "blk.{}.attn_k.weight": "layers.{}.attention.wk.weight",
    "blk.{}.attn_v.weight": "layers.{}.attention.wv.weight",
    "blk.{}.attn_q.bias": "layers.{}.attention.wq.bias",
    "blk.{}.attn_k.bias": "layers.{}.attention.wk.bias",
    "blk.{}.attn_v.bias": "layers.{}.attention.wv.bias",
    "blk.{}.attn_q_norm.weight": "layers.{}.attention.q_norm.weight",
    "blk.{}.attn_k_norm.weight": "layers.{}.attention.k_norm.weight",
    "blk.{}.attn_output.weight": "layers.{}.attention.wo.weight",
    "blk.{}.ffn_norm.weight": "layers.{}.ffn_norm.weight",
    "blk.{}.ffn_gate.weight": "layers.{}.feed_forward.w1.weight",
    "blk.{}.ffn_up.weight": "layers.{}.feed_forward.w3.weight",
    "blk.{}.ffn_down.weight": "layers.{}.feed_forward.w2.weight",
}
_SANDWICH_NAMES = {  # the sublayers' output norms, where the architecture has them
    "blk.{}.post_attention_norm.weight": "layers.{}.attention_post_norm.weight",
    "blk.{}.post_ffw_norm.weight": "layers.{}.ffn_post_norm.weight",
}
ROPE_FREQS = "rope_freqs.weight"  # Llama 3.1's scaling: the divisor of each rotary frequency


def _meta_name(gguf_name: str, arch: GgufArch = GGUF_ARCHS["llama"]) -> str | None:
    names = {**_NAMES, **_SANDWICH_NAMES} if arch.sandwich_norms else _NAMES
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) > 2:
        key = ".".join(["blk", "{}", *parts[2:]])
        target = names.get(key)
        return target.format(parts[1]) if target else None
    return names.get(gguf_name)


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def _byte_level_bpe(reader) -> str:
    return build_bpe_tokenizer_json(
        list(_field(reader, "tokenizer.ggml.tokens")),
        list(_field(reader, "tokenizer.ggml.merges", [])),  # a byte-level vocabulary may have none
        list(_field(reader, "tokenizer.ggml.token_type")),
        pre=str(_field(reader, "tokenizer.ggml.pre", "default")),
    )


def _sentencepiece_bpe(reader) -> str:
    return build_spm_tokenizer_json(
        list(_field(reader, "tokenizer.ggml.tokens")),
        list(_field(reader, "tokenizer.ggml.scores")),
        list(_field(reader, "tokenizer.ggml.token_type")),
        add_space_prefix=bool(_field(reader, "tokenizer.ggml.add_space_prefix", True)),  # llama.cpp's default
    )


# GGUF `tokenizer.ggml.model` -> the tokenizer.json it makes
TOKENIZERS = {"gpt2": _byte_level_bpe, "llama": _sentencepiece_bpe}


def tokenizer_json(reader, path: str | Path = "") -> str:
    """The `tokenizer.json` text of a GGUF file's tokenizer (`reader`: its GGUFReader)."""
    kind = _field(reader, "tokenizer.ggml.model")
    if kind not in TOKENIZERS:
        raise EdgespecError(f"'{path}': unsupported tokenizer '{kind}' (supported: {', '.join(TOKENIZERS)})")
    return TOKENIZERS[kind](reader)


def load_gguf(path: str | Path, max_seq_len: int) -> ModelSource:
    """Read a GGUF file. Every weight is dequantized to fp32 (`state_dict`); matrices of the
    block formats edgespec computes with (`edgespec.kernels.block_formats.GGUF_TYPES`) are also kept as the file's blocks
    (`blocks`, see `edgespec.models.blocks`), so quantization can carry them over instead of
    rounding them a second time.

    llama.cpp stores a Llama's q/k rows already in the interleaved RoPE layout our model uses;
    Qwen2/Qwen3 rows (and their biases and q/k norms) are permuted here, blocks included.
    """
    import gguf

    p = Path(path)
    if not p.is_file():
        raise EdgespecError(f"model file '{p}' not found")
    try:
        reader = gguf.GGUFReader(p)
    except Exception as e:  # the gguf package raises several types on bad files
        raise EdgespecError(f"'{p}' is not a readable GGUF file ({type(e).__name__}: {e})") from None

    arch = _field(reader, "general.architecture")
    if arch not in GGUF_ARCHS:
        raise EdgespecError(f"'{p}': unsupported architecture '{arch}' (supported: {', '.join(GGUF_ARCHS)})")

    def hp(key, default=None):
        v = _field(reader, f"{arch}.{key}", default)
        if v is None:
            raise EdgespecError(f"'{p}': missing metadata '{arch}.{key}'")
        return v

    kind = GGUF_ARCHS[arch]
    tensors = {t.name: t for t in reader.tensors}
    unknown = [n for n in tensors if n != ROPE_FREQS and _meta_name(n, kind) is None]
    if unknown:
        raise EdgespecError(
            f"'{p}': tensors edgespec's decoder has no place for ({len(unknown)}, e.g. {', '.join(unknown[:3])}): not a {arch} model it computes"
        )
    scaling = _field(reader, f"{arch}.rope.scaling.type", "none")
    if scaling != "none":
        raise EdgespecError(f"'{p}': rope scaling '{scaling}' is not supported (llama3-style `rope_freqs` only)")
    n_heads = int(hp("attention.head_count"))
    dim = int(hp("embedding_length"))
    head_dim = int(hp("attention.key_length", dim // n_heads))
    if int(hp("attention.value_length", head_dim)) != head_dim:
        raise EdgespecError(f"'{p}': value heads of another size than key heads are not supported")
    if int(hp("rope.dimension_count", head_dim)) != head_dim:
        raise EdgespecError(f"'{p}': partial rotary embeddings ({hp('rope.dimension_count')} of {head_dim} dimensions) are not supported")
    window = int(_field(reader, f"{arch}.attention.sliding_window", 0) or 0) if kind.window_pattern else 0
    local = tuple(i for i in range(int(hp("block_count"))) if (i + 1) % kind.window_pattern) if window else ()
    freq_factors = tuple(gguf.quants.dequantize(tensors[ROPE_FREQS].data, tensors[ROPE_FREQS].tensor_type).ravel().tolist()) if ROPE_FREQS in tensors else ()
    try:
        args = LlamaArgs(
            dim=dim,
            n_layers=int(hp("block_count")),
            n_heads=n_heads,
            n_kv_heads=int(hp("attention.head_count_kv", n_heads)),
            hidden_dim=int(hp("feed_forward_length")),
            vocab_size=len(_field(reader, "tokenizer.ggml.tokens", [])) or int(hp("vocab_size")),
            norm_eps=float(hp("attention.layer_norm_rms_epsilon")),
            rope_theta=float(hp("rope.freq_base", 10000.0)),
            tie_embeddings="output.weight" not in tensors,
            max_seq_len=max_seq_len,
            head_dim=head_dim,
            qkv_bias="blk.0.attn_q.bias" in tensors,
            qk_norm="blk.0.attn_q_norm.weight" in tensors,
            rope_freq_factors=freq_factors,
            sandwich_norms=kind.sandwich_norms,
            activation=kind.activation,
            embed_scale=kind.embed_scale,
            sliding_window=window if local else 0,
            local_layers=local,
            local_rope_theta=kind.local_rope_theta if local else 0.0,
        )
    except ValueError as e:
        raise EdgespecError(f"'{p}': {e}") from None
    ctx = int(hp("context_length", max_seq_len))
    if max_seq_len > ctx:
        raise EdgespecError(f"max_seq_len {max_seq_len} exceeds the model's context length {ctx}")

    permute = not kind.interleaved_rope
    state: dict[str, torch.Tensor] = {}
    blocks: dict[str, BlockWeights] = {}
    file_types: dict[str, str] = {}
    for t in reader.tensors:
        name = _meta_name(t.name, kind)
        if name is None:
            continue
        shape = tuple(int(s) for s in reversed(t.shape))  # GGUF lists dims innermost-first
        file_types[name] = t.tensor_type.name
        rope_rows = permute and name.endswith(ROPE_ROWS)
        if t.tensor_type.name in GGUF_TYPES and len(shape) == 2:
            b = read_blocks(t.tensor_type.name, t.data, shape)
            blocks[name] = b.reorder_rows(interleave_rope_rows(torch.arange(shape[0]), head_dim)) if rope_rows else b
            state[name] = blocks[name].dequantize()
        else:
            w = np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)  # owned, writable copy
            w = torch.from_numpy(np.ascontiguousarray(w.reshape(shape)))
            state[name] = interleave_rope_rows(w, head_dim) if rope_rows else w
    if args.tie_embeddings:
        state["output.weight"] = state["tok_embeddings.weight"]
        file_types["output.weight"] = file_types["tok_embeddings.weight"]
        if "tok_embeddings.weight" in blocks:
            blocks["output.weight"] = blocks["tok_embeddings.weight"]

    tok_json = tokenizer_json(reader, p)
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    bos = _field(reader, "tokenizer.ggml.bos_token_id")
    # instruct models stop at the end-of-turn token as well
    eos_ids = tuple(sorted({int(eos)} | {i for i, tok in enumerate(tokens) if tok in ("<|im_end|>", "<|eot_id|>")}))
    return ModelSource(
        name=str(_field(reader, "general.name", p.stem)),
        args=args,
        state_dict=state,
        tokenizer_json=tok_json,
        chat_template=_field(reader, "tokenizer.chat_template"),
        bos_id=None if bos is None else int(bos),
        eos_ids=eos_ids,
        add_bos=bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        blocks=blocks,
        file_types=file_types,
    )
