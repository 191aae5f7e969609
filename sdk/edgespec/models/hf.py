"""Load a local Hugging Face model directory (config.json, *.safetensors, tokenizer.json) of
a family edgespec's decoder computes: Llama (3.x `llama3` rope scaling included), Mistral,
Qwen2/2.5 (q/k/v biases), Qwen3 (q/k norms per head), Gemma 3's text model (sandwich norms,
(1 + w) RMSNorm, GeGLU, scaled embeddings, local sliding-window layers with their own rope base).

Whatever in the config or the weights would change the numerics and is not implemented
(another rope type, sliding-window layers outside Gemma 3, biases where the family has none,
another activation, logit soft-capping) is an error naming it, never ignored."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from edgespec.errors import EdgespecError
from edgespec.models.llama import ROPE_ROWS, LlamaArgs, interleave_rope_rows
from edgespec.models.source import ModelSource


@dataclass(frozen=True)
class HfFamily:
    """What a `model_type` adds to Llama's decoder."""

    qkv_bias: bool = False  # q/k/v projections always carry a bias (Qwen2)
    qk_norm: bool = False  # RMSNorm per head of q and k before RoPE (Qwen3)
    window_when_set: bool = False  # a `sliding_window` in the config applies to every layer (Mistral)
    layer_windows: bool = False  # `layer_types` says which layers are sliding-window ones, each type its rope base (Gemma 3)
    norm_offset: float = 0.0  # added to every norm weight: Gemma's RMSNorm scales by (1 + w)
    sandwich_norms: bool = False  # norms on the sublayers' outputs too (Gemma 2/3)
    embed_scale: bool = False  # embeddings times sqrt(hidden) (Gemma)
    names: tuple[tuple[str, str], ...] = ()  # transformers' names that differ from Llama's, and their Meta names


_GEMMA3_NAMES = (
    ("model.layers.{}.post_attention_layernorm.weight", "layers.{}.attention_post_norm.weight"),
    ("model.layers.{}.pre_feedforward_layernorm.weight", "layers.{}.ffn_norm.weight"),
    ("model.layers.{}.post_feedforward_layernorm.weight", "layers.{}.ffn_post_norm.weight"),
)
HF_FAMILIES = {
    "llama": HfFamily(),
    "mistral": HfFamily(window_when_set=True),
    "qwen2": HfFamily(qkv_bias=True),
    "qwen3": HfFamily(qk_norm=True),
    "gemma3_text": HfFamily(qk_norm=True, layer_windows=True, norm_offset=1.0, sandwich_norms=True, embed_scale=True, names=_GEMMA3_NAMES),
}
HF_ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}  # transformers' name -> LlamaArgs.activation

# families people ask for that the decoder does not compute, and what it lacks for them
NOT_COMPUTED = {
    "gemma3": "the multimodal model's vision tower (its text model, model_type gemma3_text, is computed)",
    "gemma2": "attention and final logit soft-capping",
    "gemma": "wiring to the options it needs and a test against transformers (its GeGLU, (1 + w) norms and scaled embeddings are computed for Gemma 3)",
}

ROPE_TYPES = ("default", "llama3")

_NAMES = {
    "model.embed_tokens.weight": "tok_embeddings.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{}.input_layernorm.weight": "layers.{}.attention_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight": "layers.{}.ffn_norm.weight",
    "model.layers.{}.self_attn.q_proj.weight": "layers.{}.attention.wq.weight",
    "model.layers.{}.self_attn.k_proj.weight": "layers.{}.attention.wk.weight",
    "model.layers.{}.self_attn.v_proj.weight": "layers.{}.attention.wv.weight",
    "model.layers.{}.self_attn.q_proj.bias": "layers.{}.attention.wq.bias",
    "model.layers.{}.self_attn.k_proj.bias": "layers.{}.attention.wk.bias",
    "model.layers.{}.self_attn.v_proj.bias": "layers.{}.attention.wv.bias",
    "model.layers.{}.self_attn.o_proj.weight": "layers.{}.attention.wo.weight",
    "model.layers.{}.self_attn.q_norm.weight": "layers.{}.attention.q_norm.weight",
    "model.layers.{}.self_attn.k_norm.weight": "layers.{}.attention.k_norm.weight",
    "model.layers.{}.mlp.gate_proj.weight": "layers.{}.feed_forward.w1.weight",
    "model.layers.{}.mlp.up_proj.weight": "layers.{}.feed_forward.w3.weight",
    "model.layers.{}.mlp.down_proj.weight": "layers.{}.feed_forward.w2.weight",
}
_IGNORED = ("rotary_emb.inv_freq",)  # a cache of the rope table some checkpoints save


def _meta_name(hf_name: str, family: HfFamily = HfFamily()) -> str | None:
    names = {**_NAMES, **dict(family.names)}
    parts = hf_name.split(".")
    if hf_name.startswith("model.layers.") and len(parts) > 3:
        target = names.get(".".join([*parts[:2], "{}", *parts[3:]]))
        return target.format(parts[2]) if target else None
    return names.get(hf_name)


def llama3_freq_factors(
    head_dim: int, theta: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_context: int
) -> tuple[float, ...]:
    """Llama 3.1's rope scaling as a divisor per frequency (GGUF's `rope_freqs`): 1 for
    wavelengths under original_context / high_freq_factor, `factor` over
    original_context / low_freq_factor, and in between 1 / ((1 - s) / factor + s) with
    s = (original_context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)."""
    out = []
    for i in range(0, head_dim, 2):
        wavelength = 2 * math.pi * theta ** (i / head_dim)
        if wavelength < original_context / high_freq_factor:
            out.append(1.0)
        elif wavelength > original_context / low_freq_factor:
            out.append(factor)
        else:
            s = (original_context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1.0 / ((1 - s) / factor + s))
    return tuple(out)


def _rope(cfg: dict, head_dim: int, where: Path, layer_type: str = "full_attention") -> tuple[float, tuple[float, ...]]:
    """(theta, frequency divisors) from transformers 5's `rope_parameters` (one per layer type
    where layer types differ, as Gemma 3's) or 4's `rope_theta` + `rope_scaling` (+
    `rope_local_base_freq` for Gemma 3's sliding-window layers)."""
    params = {**(cfg.get("rope_scaling") or {}), **(cfg.get("rope_parameters") or {})}
    if layer_type in params:  # per layer type
        params = dict(params[layer_type])
    elif layer_type == "sliding_attention" and "rope_local_base_freq" in cfg:
        params = {"rope_theta": cfg["rope_local_base_freq"]}
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    partial = float(params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))
    if partial != 1.0:
        raise EdgespecError(f"'{where}': partial rotary embeddings (partial_rotary_factor {partial}) are not supported")
    if kind not in ROPE_TYPES:
        raise EdgespecError(f"'{where}': rope type '{kind}' is not supported (supported: {', '.join(ROPE_TYPES)})")
    if kind == "default":
        return theta, ()
    try:
        args = (float(params["factor"]), float(params["low_freq_factor"]), float(params["high_freq_factor"]), int(params["original_max_position_embeddings"]))
    except KeyError as e:
        raise EdgespecError(f"'{where}': llama3 rope scaling without '{e.args[0]}'") from None
    return theta, llama3_freq_factors(head_dim, theta, *args)


def _activation_name(cfg: dict) -> str:
    """transformers' name of the feed-forward's activation (Gemma's `hidden_activation`, else `hidden_act`)."""
    return cfg.get("hidden_activation", cfg.get("hidden_act", "silu"))


def _refuse_unsupported(cfg: dict, family: HfFamily, where: Path, max_seq_len: int) -> None:
    """Config fields that change what the model computes and that edgespec does not implement.

    Sliding-window layers are accepted where the window covers the program's whole context
    (window >= max_seq_len): no query ever has a key outside it, so they compute full attention."""
    act = _activation_name(cfg)
    if act not in HF_ACTIVATIONS:
        raise EdgespecError(f"'{where}': activation '{act}' is not supported (supported: {', '.join(HF_ACTIVATIONS)})")
    for cap in ("attn_logit_softcapping", "final_logit_softcapping"):
        if cfg.get(cap):
            raise EdgespecError(f"'{where}': {cap} ({cfg[cap]}) is not supported")
    if cfg.get("attention_bias"):
        raise EdgespecError(f"'{where}': attention_bias (a bias on every attention projection, o_proj included) is not supported")
    if cfg.get("mlp_bias"):
        raise EdgespecError(f"'{where}': mlp_bias (biases on the feed-forward projections) is not supported")
    window = cfg.get("sliding_window")
    if family.layer_windows:  # computed: the windowed layers attend within their window
        return
    sliding = cfg.get("use_sliding_window") or any(t != "full_attention" for t in cfg.get("layer_types") or ()) or (family.window_when_set and window)
    if sliding and (not window or window < max_seq_len):
        raise EdgespecError(
            f"'{where}': sliding-window attention layers (window {window}) are not supported beyond their window; "
            f"export with model.max_seq_len <= {window} (within it they compute full attention)"
            if window
            else f"'{where}': sliding-window attention layers are not supported"
        )


def _args(cfg: dict, where: Path, max_seq_len: int) -> LlamaArgs:
    mtype = cfg.get("model_type")
    if mtype not in HF_FAMILIES:
        lacks = f"; edgespec's decoder lacks its {NOT_COMPUTED[mtype]}" if mtype in NOT_COMPUTED else ""
        raise EdgespecError(f"'{where}': unsupported architecture '{mtype}' (supported: {', '.join(HF_FAMILIES)}){lacks}")
    family = HF_FAMILIES[mtype]
    _refuse_unsupported(cfg, family, where, max_seq_len)
    n_heads = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // n_heads)
    theta, factors = _rope(cfg, head_dim, where)
    local: tuple[int, ...] = ()
    if family.layer_windows:
        local = tuple(i for i, t in enumerate(cfg.get("layer_types") or ()) if t == "sliding_attention")
    local_theta = _rope(cfg, head_dim, where, "sliding_attention")[0] if local else 0.0
    scalar = cfg.get("query_pre_attn_scalar")
    context = int(cfg.get("max_position_embeddings", max_seq_len))
    if max_seq_len > context:
        raise EdgespecError(f"max_seq_len {max_seq_len} exceeds the model's context length {context}")
    try:
        return LlamaArgs(
            dim=int(cfg["hidden_size"]),
            n_layers=int(cfg["num_hidden_layers"]),
            n_heads=n_heads,
            n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
            hidden_dim=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            rope_theta=theta,
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_seq_len=max_seq_len,
            head_dim=head_dim,
            qkv_bias=family.qkv_bias,
            qk_norm=family.qk_norm,
            rope_freq_factors=factors,
            sandwich_norms=family.sandwich_norms,
            activation=HF_ACTIVATIONS[_activation_name(cfg)],
            embed_scale=family.embed_scale,
            attn_scale=float(scalar) ** -0.5 if scalar else 0.0,
            sliding_window=int(cfg["sliding_window"]) if local else 0,
            local_layers=local,
            local_rope_theta=local_theta,
        )
    except ValueError as e:
        raise EdgespecError(f"'{where}': {e}") from None


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
    try:
        args = _args(cfg, d, max_seq_len)
        family = HF_FAMILIES[cfg["model_type"]]
    except KeyError as e:
        raise EdgespecError(f"'{cfg_path}': missing field '{e.args[0]}'") from None
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise EdgespecError(f"'{d}': no *.safetensors weight files")
    state: dict[str, torch.Tensor] = {}
    unknown: list[str] = []
    for f in files:
        try:
            tensors = load_file(f)
        except Exception as e:
            raise EdgespecError(f"'{f}' is not a readable safetensors file ({e})") from None
        for k, v in tensors.items():
            name = _meta_name(k, family)
            if name is None:
                if not k.endswith(_IGNORED):
                    unknown.append(k)
                continue
            v = v.float() + family.norm_offset if name.endswith("norm.weight") else v.float()
            state[name] = interleave_rope_rows(v, args.head_dim) if name.endswith(ROPE_ROWS) else v
    if unknown:
        raise EdgespecError(
            f"'{d}': weights edgespec's decoder has no place for ({len(unknown)}, e.g. {', '.join(unknown[:3])}): not a {cfg['model_type']} model it computes"
        )
    if args.tie_embeddings or "output.weight" not in state:
        state["output.weight"] = state["tok_embeddings.weight"]
    tok_path = d / "tokenizer.json"
    if not tok_path.is_file():
        raise EdgespecError(f"'{d}': no tokenizer.json")
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text()) if (d / "tokenizer_config.json").is_file() else {}
    eos = cfg.get("eos_token_id")
    eos_ids = tuple(sorted({int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None}))
    if not eos_ids:
        raise EdgespecError(f"'{cfg_path}': no eos_token_id (generation needs to know where to stop)")
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
