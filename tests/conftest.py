import os
import warnings

import pytest

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # test modules import torch before edgespec (edgespec.host.passive_openmp)


@pytest.fixture(scope="session")
def tiny_args():
    from edgespec.models.llama import LlamaArgs

    return LlamaArgs(
        dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128, vocab_size=97, norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=True, max_seq_len=64
    )


@pytest.fixture
def tiny_model(tiny_args):
    import torch

    from edgespec.models.llama import Transformer

    torch.manual_seed(0)
    m = Transformer(tiny_args)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    return m.eval()


def export_bundle_for_tests(tmp_path_factory, name, recipe_yaml):
    """`edgespec export` of a recipe through the CLI into a fresh directory; the bundle path."""
    from click.testing import CliRunner

    from edgespec.cli import main

    d = tmp_path_factory.mktemp(name)
    (d / "recipe.yaml").write_text(recipe_yaml)
    res = CliRunner().invoke(main, ["export", str(d / "recipe.yaml"), "-o", str(d / "bundle")])
    assert res.exit_code == 0, res.output
    return d / "bundle"


@pytest.fixture(scope="session")
def fp32_bundle(tmp_path_factory):
    # with the shipped stream weights: forward + spec_step in one program; a
    # branching tree, so tree masks and KV compaction run on the real model
    return export_bundle_for_tests(
        tmp_path_factory,
        "fp32",
        # the normalizer search runs (its report is a bundle file and the no_overflow gate's
        # input) on 2 + 1 prompts: on the real model each prompt costs seconds of every export
        "name: t-fp32\nmodel: {max_seq_len: 256}\nquant: {scheme: fp32}\nnumerics: {calibration_prompts: 2, heldout_prompts: 1}\n"
        "drafter: {weights: smollm2-135m-streams-cpu120.pt, tree: [2, 1]}\nvalidate: {enabled: false}\n",
    )


@pytest.fixture(scope="session")
def q_bundle(tmp_path_factory):
    # the export's validate stage runs for real: two suites, the fp32 base model as reference
    return export_bundle_for_tests(
        tmp_path_factory,
        "8da4w",
        "name: t-8da4w\nmodel: {max_seq_len: 256}\nquant: {scheme: 8da4w, group_size: 32}\nnumerics: {search: false}\nvalidate: {suites: [rag, qa], prompts_per_suite: 2}\n",
    )


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory):
    """A 2-layer Llama with a byte-level tokenizer (every text encodes), saved as an HF directory."""
    import json

    import torch
    from safetensors.torch import save_file
    from tokenizers.pre_tokenizers import ByteLevel

    from edgespec.models.tokenizer import build_bpe_tokenizer_json

    d = tmp_path_factory.mktemp("tiny_hf")
    dim, layers, heads, kv, hidden = 64, 2, 4, 2, 128
    tokens = ["<unk>", "<s>", "</s>"] + sorted(ByteLevel.alphabet())
    vocab = len(tokens)
    g = torch.Generator().manual_seed(0)
    w = lambda *s: (0.2 * torch.randn(*s, generator=g)).contiguous()  # noqa: E731
    sd = {"model.embed_tokens.weight": w(vocab, dim), "model.norm.weight": torch.ones(dim)}
    for i in range(layers):
        p = f"model.layers.{i}."
        sd |= {
            p + "self_attn.q_proj.weight": w(dim, dim),
            p + "self_attn.k_proj.weight": w(kv * dim // heads, dim),
            p + "self_attn.v_proj.weight": w(kv * dim // heads, dim),
            p + "self_attn.o_proj.weight": w(dim, dim),
            p + "mlp.gate_proj.weight": w(hidden, dim),
            p + "mlp.up_proj.weight": w(hidden, dim),
            p + "mlp.down_proj.weight": w(dim, hidden),
            p + "input_layernorm.weight": torch.ones(dim),
            p + "post_attention_layernorm.weight": torch.ones(dim),
        }
    save_file(sd, d / "model.safetensors")
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": dim,
                "num_hidden_layers": layers,
                "num_attention_heads": heads,
                "num_key_value_heads": kv,
                "intermediate_size": hidden,
                "vocab_size": vocab,
                "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0,
                "tie_word_embeddings": True,
                "max_position_embeddings": 512,
                "bos_token_id": 1,
                "eos_token_id": 2,
            }
        )
    )
    (d / "tokenizer.json").write_text(build_bpe_tokenizer_json(tokens, [], [3, 3, 3] + [1] * (vocab - 3), pre="gpt2"))
    return d


@pytest.fixture(scope="session")
def tiny_bundle(tiny_hf_dir, tmp_path_factory):
    """A real fp32 .pte bundle of the tiny byte-level model (no validation)."""
    return export_bundle_for_tests(
        tmp_path_factory,
        "tiny",
        f"name: tiny\nmodel: {{source: {tiny_hf_dir}, max_seq_len: 512}}\nquant: {{scheme: fp32}}\nnumerics: {{search: false}}\nvalidate: {{enabled: false}}\n",
    )
