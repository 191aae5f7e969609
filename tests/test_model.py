"""The decoder on tiny random configs: KV cache, one-call prefill, RoPE layout, loaders."""

import json

import pytest
import torch
import torch.nn.functional as F

from edgespec.models.llama import apply_rope, rope_tables


def reference_logits(model, tokens):
    """All-positions logits of `model` computed without any cache, in plain torch."""
    a = model.args
    T = tokens.shape[1]
    cos, sin = model.rope_cos[:T], model.rope_sin[:T]
    x = model.tok_embeddings(tokens)
    for layer in model.layers:
        h = layer.attention_norm(x)
        att = layer.attention
        q = apply_rope(att.wq(h).view(1, T, a.n_heads, a.head_dim), cos, sin).transpose(1, 2)
        k = apply_rope(att.wk(h).view(1, T, a.n_kv_heads, a.head_dim), cos, sin).transpose(1, 2)
        v = att.wv(h).view(1, T, a.n_kv_heads, a.head_dim).transpose(1, 2)
        rep = a.n_heads // a.n_kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, T, -1)
        x = x + att.wo(y)
        x = x + layer.feed_forward(layer.ffn_norm(x))
    return model.output(model.norm(x))[0]


@torch.no_grad()
def test_prefill_matches_reference_and_token_by_token(tiny_model):
    tokens = torch.randint(0, tiny_model.args.vocab_size, (1, 12))
    ref = reference_logits(tiny_model, tokens)
    one_call = tiny_model(tokens, torch.tensor([0]))[0]
    torch.testing.assert_close(one_call, ref[-1], atol=1e-4, rtol=1e-4)
    tiny_model.reset_cache()
    for t in range(12):
        step = tiny_model(tokens[:, t : t + 1], torch.tensor([t]))[0]
        torch.testing.assert_close(step, ref[t], atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_chunked_prefill_continues_the_cache(tiny_model):
    tokens = torch.randint(0, tiny_model.args.vocab_size, (1, 10))
    ref = reference_logits(tiny_model, tokens)
    tiny_model(tokens[:, :6], torch.tensor([0]))
    out = tiny_model(tokens[:, 6:], torch.tensor([6]))[0]
    torch.testing.assert_close(out, ref[-1], atol=1e-4, rtol=1e-4)


def test_tied_embeddings_share_storage(tiny_model):
    assert tiny_model.output.weight is tiny_model.tok_embeddings.weight


def test_partial_forward_pieces_make_the_forward(tiny_model):
    """embed, rope and run_layers in two spans (teacher-forced K/V) give `hidden`; linear_shapes
    are the block's linears."""
    from edgespec.models.llama import linear_shapes

    tokens = torch.tensor([[3, 1, 4, 1, 5, 9]])
    cos, sin = tiny_model.rope(torch.arange(6))
    kvs = tiny_model.new_kvs(1, cos.dtype)
    x = tiny_model.run_layers(tiny_model.embed(tokens), 0, 1, 0, cos, sin, kvs=kvs)
    x = tiny_model.run_layers(x, 1, tiny_model.args.n_layers, 0, cos, sin, kvs=kvs)
    torch.testing.assert_close(tiny_model.norm(x), tiny_model.hidden(tokens, torch.tensor([0])))
    block = tiny_model.layers[0]
    a, f = block.attention, block.feed_forward
    linears = {"wq": a.wq, "wk": a.wk, "wv": a.wv, "wo": a.wo, "w1": f.w1, "w2": f.w2, "w3": f.w3}
    assert linear_shapes(tiny_model.args) == {n: (m.in_features, m.out_features) for n, m in linears.items()}


def test_rope_rotates_pairs_by_position():
    cos, sin = rope_tables(4, 8, 10000.0)
    x = torch.tensor([1.0, 0.0, 1.0, 0.0]).view(1, 1, 1, 4).expand(1, 8, 1, 4)
    y = apply_rope(x, cos, sin)
    # pair 0 rotates by angle = position (inv_freq 1): (cos p, sin p)
    torch.testing.assert_close(y[0, :, 0, 0], torch.cos(torch.arange(8.0)))
    torch.testing.assert_close(y[0, :, 0, 1], torch.sin(torch.arange(8.0)))
    # norms are preserved
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))


def _hf_permute(w, n_heads):
    """Interleaved-pair rows -> HF rotate-half rows (inverse of the loader's permutation)."""
    out, dim = w.shape
    return w.view(n_heads, out // n_heads // 2, 2, dim).transpose(1, 2).reshape(out, dim)


@torch.no_grad()
def test_hf_directory_loader_round_trip(tiny_model, tmp_path):
    from safetensors.torch import save_file

    from edgespec.models.load import build_model, read_source

    a = tiny_model.args
    sd = tiny_model.state_dict()
    hf = {"model.embed_tokens.weight": sd["tok_embeddings.weight"], "model.norm.weight": sd["norm.weight"]}
    for i in range(a.n_layers):
        p = f"layers.{i}."
        hf[f"model.layers.{i}.self_attn.q_proj.weight"] = _hf_permute(sd[p + "attention.wq.weight"], a.n_heads)
        hf[f"model.layers.{i}.self_attn.k_proj.weight"] = _hf_permute(sd[p + "attention.wk.weight"], a.n_kv_heads)
        hf[f"model.layers.{i}.self_attn.v_proj.weight"] = sd[p + "attention.wv.weight"]
        hf[f"model.layers.{i}.self_attn.o_proj.weight"] = sd[p + "attention.wo.weight"]
        hf[f"model.layers.{i}.mlp.gate_proj.weight"] = sd[p + "feed_forward.w1.weight"]
        hf[f"model.layers.{i}.mlp.up_proj.weight"] = sd[p + "feed_forward.w3.weight"]
        hf[f"model.layers.{i}.mlp.down_proj.weight"] = sd[p + "feed_forward.w2.weight"]
        hf[f"model.layers.{i}.input_layernorm.weight"] = sd[p + "attention_norm.weight"]
        hf[f"model.layers.{i}.post_attention_layernorm.weight"] = sd[p + "ffn_norm.weight"]
    save_file({k: v.contiguous().clone() for k, v in hf.items()}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": a.dim,
                "num_hidden_layers": a.n_layers,
                "num_attention_heads": a.n_heads,
                "num_key_value_heads": a.n_kv_heads,
                "intermediate_size": a.hidden_dim,
                "vocab_size": a.vocab_size,
                "rms_norm_eps": a.norm_eps,
                "rope_theta": a.rope_theta,
                "tie_word_embeddings": True,
                "max_position_embeddings": 128,
                "bos_token_id": 1,
                "eos_token_id": 2,
            }
        )
    )
    (tmp_path / "tokenizer.json").write_text(_tiny_tokenizer_json(a.vocab_size))
    src = read_source(str(tmp_path), a.max_seq_len)
    loaded = build_model(src)
    tokens = torch.randint(0, a.vocab_size, (1, 9))
    torch.testing.assert_close(loaded(tokens, torch.tensor([0])), tiny_model(tokens, torch.tensor([0])), atol=1e-5, rtol=1e-5)
    assert src.eos_ids == (2,)


def _tiny_tokenizer_json(vocab_size):
    from tokenizers.pre_tokenizers import ByteLevel

    from edgespec.models.tokenizer import build_bpe_tokenizer_json

    alphabet = sorted(ByteLevel.alphabet())
    tokens = ["<unk>", "<s>", "</s>"] + alphabet[: vocab_size - 3]
    return build_bpe_tokenizer_json(tokens, [], [3, 3, 3] + [1] * (len(tokens) - 3), pre="gpt2")


def test_hf_loader_rejects_unsupported_architecture(tmp_path):
    from edgespec.errors import EdgespecError
    from edgespec.models.load import read_source

    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["MambaForCausalLM"], "model_type": "mamba"}))
    with pytest.raises(EdgespecError, match="unsupported architecture 'mamba'"):
        read_source(str(tmp_path), 64)
