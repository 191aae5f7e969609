"""Load a local Hugging Face-format Llama directory: config.json, *.safetensors, tokenizer.json."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from edgespec.errors import EdgespecError
from edgespec.models.llama import LlamaArgs
from edgespec.models.source import ModelSource

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")

_NAMES = {
    "model.embed_tokens.weight": "tok_embeddings.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{}.input_layernorm.weight": "layers.{}.attention_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight": "layers.{}.ffn_norm.weight",
    "model.layers.{}.self_attn.q_proj.weight": "layers.{}.attention.wq.weight",
    "model.layers.{}.self_attn.k_proj.weight": "layers.{}.attention.wk.weight",
    "model.layers.{}.self_attn.v_proj.weight": "layers.{}.attention.wv.weight",
    "model.layers.{}.self_attn.o_proj.weight": "layers.{}.attention.wo.weight",
    "model.layers.{}.mlp.gate_proj.weight": "layers.{}.feed_forward.w1.weight",
    "model.layers.{}.mlp.up_proj.weight": "layers.{}.feed_forward.w3.weight",
    "model.layers.{}.mlp.down_proj.weight": "layers.{}.feed_forward.w2.weight",
}


def _meta_name(hf_name: str) -> str | None:
    parts = hf_name.split(".")
    if hf_name.startswith("model.layers.") and len(parts) > 3:
        target = _NAMES.get(".".join([*parts[:2], "{}", *parts[3:]]))
        return target.format(parts[2]) if target else None
    return _NAMES.get(hf_name)


def interleave_rope_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """HF rotate-half row order -> interleaved pairs (the permutation llama.cpp applies)."""
    out, dim = w.shape
    return w.view(n_heads, 2, out // n_heads // 2, dim).transpose(1, 2).reshape(out, dim)


def load_hf_dir(path: str | Path, max_seq_len: int) -> ModelSource:
    from safetensors.torch import load_file

    d = Path(path)
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise EdgespecError(f"'{d}' is not a Hugging Face model directory (no config.json)")
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise EdgespecError(f"'{cfg_path}' is not valid JSON ({e})") from None
    mtype = cfg.get("model_type")
    if mtype not in SUPPORTED_MODEL_TYPES:
        raise EdgespecError(f"'{d}': unsupported architecture '{mtype}' (supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    n_heads = int(cfg["num_attention_heads"])
    n_kv = int(cfg.get("num_key_value_heads", n_heads))
    tie = bool(cfg.get("tie_word_embeddings", False))
    args = LlamaArgs(
        dim=int(cfg["hidden_size"]),
        n_layers=int(cfg["num_hidden_layers"]),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        hidden_dim=int(cfg["intermediate_size"]),
        vocab_size=int(cfg["vocab_size"]),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        tie_embeddings=tie,
        max_seq_len=max_seq_len,
    )
    if max_seq_len > int(cfg.get("max_position_embeddings", max_seq_len)):
        raise EdgespecError(f"max_seq_len {max_seq_len} exceeds the model's context length {cfg['max_position_embeddings']}")
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise EdgespecError(f"'{d}': no *.safetensors weight files")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            tensors = load_file(f)
        except Exception as e:
            raise EdgespecError(f"'{f}' is not a readable safetensors file ({e})") from None
        for k, v in tensors.items():
            name = _meta_name(k)
            if name is None:
                continue
            v = v.float()
            if name.endswith("attention.wq.weight"):
                v = interleave_rope_rows(v, n_heads)
            elif name.endswith("attention.wk.weight"):
                v = interleave_rope_rows(v, n_kv)
            state[name] = v
    if tie or "output.weight" not in state:
        state["output.weight"] = state["tok_embeddings.weight"]
    tok_path = d / "tokenizer.json"
    if not tok_path.is_file():
        raise EdgespecError(f"'{d}': no tokenizer.json")
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text()) if (d / "tokenizer_config.json").is_file() else {}
    eos = cfg.get("eos_token_id", 2)
    eos_ids = tuple(sorted(set(eos if isinstance(eos, list) else [eos])))
    return ModelSource(
        name=cfg.get("_name_or_path", d.name) or d.name,
        args=args,
        state_dict=state,
        tokenizer_json=tok_path.read_text(),
        chat_template=tok_cfg.get("chat_template"),
        bos_id=cfg.get("bos_token_id"),
        eos_ids=eos_ids,
        add_bos=bool(tok_cfg.get("add_bos_token", False)),
    )
