import os
import warnings

import pytest

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_args():
    from edgespec.models.llama import LlamaArgs

    return LlamaArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128, vocab_size=97, norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=True, max_seq_len=64)


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
        "name: t-fp32\nmodel: {max_seq_len: 256}\nquant: {scheme: fp32}\nstreams: {weights: smollm2-135m-streams-cpu120.pt, tree: [2, 1]}\nvalidate: {enabled: false}\n",
    )


@pytest.fixture(scope="session")
def q_bundle(tmp_path_factory):
    # the export's validate stage runs for real: two suites, the fp32 base model as reference
    return export_bundle_for_tests(
        tmp_path_factory,
        "8da4w",
        "name: t-8da4w\nmodel: {max_seq_len: 256}\nquant: {scheme: 8da4w, group_size: 32}\nnumerics: {search: false}\nvalidate: {suites: [rag, qa], prompts_per_suite: 2}\n",
    )
