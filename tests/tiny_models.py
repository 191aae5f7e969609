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

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(hidden)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_context_length(256)
    w.add_layer_norm_rms_eps(1e-5)
    _add_byte_vocabulary(w)
    for name, (raw, qtype) in tensors.items():
        t = getattr(gguf.GGMLQuantizationType, qtype)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=t)
    for name in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
        w.add_tensor(name, np.ones(dim, dtype=np.float32))
    _write(w)


def _add_byte_vocabulary(w) -> None:
    """`vocabulary()` as a byte-level BPE tokenizer with no merges; eos id 2."""
    tokens = vocabulary()
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges([])
    w.add_eos_token_id(2)


def _write(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def vocabulary() -> list[str]:
    """The byte-level vocabulary of `write_llama_gguf`'s files."""
    from tokenizers.pre_tokenizers import ByteLevel

    return ["<unk>", "<s>", "</s>", *sorted(ByteLevel.alphabet())]


# tiny models written by transformers itself (a test-only dependency), one per family edgespec
# computes; odd sizes: 6 heads of 8 over 2 kv heads, a feed-forward of 80, 259 byte tokens
HF_FAMILIES = {
    "llama-tied": ("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": True}),
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    # Llama 3.1's scaling with a short original context, so most frequencies are scaled
    "llama3-rope": (
        "LlamaConfig",
        "LlamaForCausalLM",
        {
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            }
        },
    ),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 12}),  # q width 72 != hidden 48
}


# Gemma 3's text model, tested on its own (its windows and rope bases need prompts and
# contexts of their own): 6 layers as llama.cpp lays gemma3 out (every sixth global), a window
# of 5, a query scale of its own (query_pre_attn_scalar 24, not head_dim 16)
GEMMA3_LAYERS = ["sliding_attention"] * 5 + ["full_attention"]
GEMMA3 = {
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {"head_dim": 16, "num_attention_heads": 4, "num_hidden_layers": 6, "layer_types": GEMMA3_LAYERS, "sliding_window": 5, "query_pre_attn_scalar": 24},
    ),
}


def write_hf_dir(path, family: str, seed: int = 0, **config):
    """A random model of `family` (`HF_FAMILIES` or `GEMMA3`) saved by transformers'
    `save_pretrained`, with a byte-level tokenizer.json; weights N(0, 0.15), norms 1 + N(0, 0.1)
    (Gemma's, which scale by 1 + w: N(0, 0.1)), so logits are O(1)."""
    import transformers

    from edgespec.models.tokenizer import build_bpe_tokenizer_json

    cfg_name, model_name, extra = {**HF_FAMILIES, **GEMMA3}[family]
    norm_one = 0.0 if family in GEMMA3 else 1.0
    tokens = vocabulary()
    shape = dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256)
    cfg = getattr(transformers, cfg_name)(vocab_size=len(tokens), rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, **{**shape, **extra, **config})
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(norm_one + 0.1 * torch.randn_like(p) if name.endswith("norm.weight") else 0.15 * torch.randn_like(p))
    model.save_pretrained(path)
    (path / "tokenizer.json").write_text(build_bpe_tokenizer_json(tokens, [], [1] * len(tokens), pre="gpt2"))
    return model.eval()


# llama.cpp's tensor names by transformers' (the {} is the layer)
_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{}.input_layernorm.weight": "blk.{}.attn_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight": "blk.{}.ffn_norm.weight",
    "model.layers.{}.self_attn.q_proj.weight": "blk.{}.attn_q.weight",
    "model.layers.{}.self_attn.k_proj.weight": "blk.{}.attn_k.weight",
    "model.layers.{}.self_attn.v_proj.weight": "blk.{}.attn_v.weight",
    "model.layers.{}.self_attn.q_proj.bias": "blk.{}.attn_q.bias",
    "model.layers.{}.self_attn.k_proj.bias": "blk.{}.attn_k.bias",
    "model.layers.{}.self_attn.v_proj.bias": "blk.{}.attn_v.bias",
    "model.layers.{}.self_attn.o_proj.weight": "blk.{}.attn_output.weight",
    "model.layers.{}.self_attn.q_norm.weight": "blk.{}.attn_q_norm.weight",
    "model.layers.{}.self_attn.k_norm.weight": "blk.{}.attn_k_norm.weight",
    "model.layers.{}.mlp.gate_proj.weight": "blk.{}.ffn_gate.weight",
    "model.layers.{}.mlp.up_proj.weight": "blk.{}.ffn_up.weight",
    "model.layers.{}.mlp.down_proj.weight": "blk.{}.ffn_down.weight",
}
_GGUF_GEMMA3_NAMES = {
    **_GGUF_NAMES,
    "model.layers.{}.post_attention_layernorm.weight": "blk.{}.post_attention_norm.weight",
    "model.layers.{}.pre_feedforward_layernorm.weight": "blk.{}.ffn_norm.weight",
    "model.layers.{}.post_feedforward_layernorm.weight": "blk.{}.post_ffw_norm.weight",
}


def write_gguf_of_hf(path, model, quantize: dict[str, str] | None = None) -> None:
    """The GGUF file llama.cpp's converter makes of a transformers model (Llama, Mistral, Qwen2, Qwen3, Gemma 3):
    its metadata and tensor names; for `llama` q/k rows permuted to interleaved RoPE pairs and
    Llama 3 scaling as `rope_freqs.weight`, for `qwen2`/`qwen3` rows as they are (llama.cpp
    rotates them NEOX-style). quantize: GGUF type by GGUF tensor name (`gguf.quants`), F32 else."""
    import gguf

    from edgespec.models.hf import interleave_rope_rows, llama3_freq_factors

    cfg = model.config
    arch = {"mistral": "llama", "gemma3_text": "gemma3"}.get(cfg.model_type, cfg.model_type)  # llama.cpp writes a Mistral as a llama
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rope = dict(cfg.rope_parameters)
    rope = dict(rope.get("full_attention", rope))  # Gemma 3: one per layer type (llama.cpp fixes the local base at 1e4)
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_rope_dimension_count(head_dim)
    if arch == "gemma3":
        w.add_sliding_window(cfg.sliding_window)
    if arch in ("qwen3", "gemma3"):
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    _add_byte_vocabulary(w)
    w.add_bos_token_id(1)
    if rope.get("rope_type") == "llama3":
        keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        factors = llama3_freq_factors(head_dim, rope["rope_theta"], *(rope[k] for k in keys))
        w.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))
    for hf_name, t in model.state_dict().items():
        parts = hf_name.split(".")
        key = ".".join([*parts[:2], "{}", *parts[3:]]) if hf_name.startswith("model.layers.") else hf_name
        if key == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        name = (_GGUF_GEMMA3_NAMES if arch == "gemma3" else _GGUF_NAMES)[key].format(parts[2] if "{}" in key else "")
        t = t.detach().float()
        if arch == "gemma3" and name.endswith("norm.weight"):
            t = t + 1  # llama.cpp's converter stores Gemma's norms as the scale (1 + w)
        if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
            t = interleave_rope_rows(t, head_dim)
        a = np.ascontiguousarray(t.numpy())
        qtype = (quantize or {}).get(name)
        if qtype:
            q = gguf.quants.quantize(a, getattr(gguf.GGMLQuantizationType, qtype))
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=getattr(gguf.GGMLQuantizationType, qtype))
        else:
            w.add_tensor(name, a)
    _write(w)


# byte ranges of each GGUF block type's fp16 scale fields (d, and dmin or m where it has one)
_FP16_FIELDS = {
    "Q4_0": (0, 2),
    "Q4_1": (0, 4),
    "Q8_0": (0, 2),
    "Q5_0": (0, 2),
    "Q5_1": (0, 4),
    "Q4_K": (0, 4),
    "Q5_K": (0, 4),
    "Q6_K": (208, 210),
    "Q3_K": (108, 110),
}


def random_gguf_blocks(qtype: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Raw GGUF blocks of `qtype` for a [rows, cols] matrix (types `gguf` cannot quantize to
    included): random codes, sub-block scales and mins, fp16 block scales of a realistic size
    (Q6_K's are multiplied by int8 sub-block scales: 10x smaller)."""
    import gguf

    scale = 2e-4 if qtype == "Q6_K" else 2e-3

    per_block, nbytes = gguf.GGML_QUANT_SIZES[getattr(gguf.GGMLQuantizationType, qtype)]
    raw = rng.integers(0, 256, (rows * cols // per_block, nbytes), dtype=np.uint8)
    lo, hi = _FP16_FIELDS[qtype]
    raw[:, lo:hi] = rng.uniform(scale / 2, scale * 2, (len(raw), (hi - lo) // 2)).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)
