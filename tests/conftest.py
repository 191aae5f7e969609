import functools
import hashlib
import json
import os
import shutil
import warnings
from collections import defaultdict
from pathlib import Path

import pytest

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # test modules import torch before edgespec (edgespec.host.passive_openmp)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    """An empty ``$EDGESPEC_CACHE`` for one test (fp32 references, verified files, kernel
    plans and speculation policies start from nothing), with the run's kernel library linked
    in: every process the test starts (the harness's memory workers) would otherwise compile
    it again, a minute of a 2-core machine that no such test is about."""
    from edgespec.kernels import library

    built = library.build()  # in the run's own cache, once for all tests
    cache = tmp_path / "cache"
    monkeypatch.setenv("EDGESPEC_CACHE", str(cache))
    linked = library.library_path()
    linked.parent.mkdir(parents=True)
    linked.symlink_to(built)
    return cache


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


_SDK = Path(__file__).resolve().parent.parent / "sdk" / "edgespec"


@functools.cache
def _source_digest() -> str:
    """sha256 of edgespec's sources and shipped files: what a bundle's bytes depend on besides its recipe."""
    h = hashlib.sha256()
    for f in sorted(p for p in _SDK.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(f.relative_to(_SDK)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def shared_dir(root: Path, name: str, make) -> Path:
    """`root/name`, made once by `make(directory)` for every process that asks: the first
    caller makes it under a file lock (into a temporary directory, renamed when `make`
    returns; nothing is left when it raises) while the others wait, then all read it."""
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    out = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not out.is_dir():
            tmp = root / f".{name}.tmp"
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
            try:
                make(tmp)
            except BaseException:
                shutil.rmtree(tmp)
                raise
            tmp.rename(out)
    return out


def built_bundle(root: Path, recipe: str, *overrides: str) -> Path:
    """The bundle `edgespec export RECIPE OVERRIDES...` writes, exported once per test run and
    shared by every test and xdist worker that asks for the same one (`shared_dir`): keyed by
    the recipe (a YAML text, a recipe file's path and text, or "" for the default), the
    overrides and a digest of edgespec's sources. Read-only: a test that changes a bundle
    copies it first."""
    recipe_file = Path(recipe) if recipe.endswith((".yaml", ".yml")) and "\n" not in recipe else None
    identity = [recipe, recipe_file.read_text() if recipe_file else None, list(overrides), _source_digest()]
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:20]

    def export(d: Path) -> None:
        from click.testing import CliRunner

        from edgespec.cli import main

        args = [str(recipe_file)] if recipe_file else []
        if recipe and not recipe_file:
            (d / "recipe.yaml").write_text(recipe)
            args = [str(d / "recipe.yaml")]
        res = CliRunner().invoke(main, ["export", *args, *overrides, "-o", str(d / "bundle")])
        assert res.exit_code == 0, res.output

    return shared_dir(root, f"bundle-{key}", export) / "bundle"


@pytest.fixture(scope="session")
def shared_root(tmp_path_factory) -> Path:
    """Where the test run keeps what its processes share: inside the run's temporary directory,
    one for all pytest-xdist workers (each worker's own base directory sits beside it)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"


@pytest.fixture(scope="session")
def build_bundle(shared_root):
    """`build_bundle(recipe, *overrides)`: the run's shared bundle of that export (`built_bundle`)."""
    return functools.partial(built_bundle, shared_root)


def pytest_terminal_summary(terminalreporter):
    """Seconds per test module (setup, call and teardown of its tests, on whichever worker ran
    them), largest first: the budget's ledger beside pytest's slowest steps."""
    per_module: dict[str, float] = defaultdict(float)
    for reports in terminalreporter.stats.values():
        for r in reports:
            if isinstance(r, pytest.TestReport):
                per_module[r.nodeid.split("::")[0]] += r.duration
    if not per_module:
        return
    total = sum(per_module.values())
    terminalreporter.write_sep("=", f"seconds per module ({total:.0f} s of test time in all)")
    for module, seconds in sorted(per_module.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s {100 * seconds / total:5.1f}%  {module}")


@pytest.fixture(scope="session")
def tiny_batched_bundle(tiny_hf_dir, build_bundle):
    """The tiny byte-level model on edgespec's block kernel with three batch slots (decode_rows)."""
    return build_bundle(
        f"name: tiny-batched\nmodel: {{source: {tiny_hf_dir}, max_seq_len: 96}}\nquant: {{scheme: 8da4w}}\nnumerics: {{search: false}}\n"
        "export: {batch_slots: 3, prefill_chunk: 16}\nvalidate: {enabled: false}\n"
    )


@pytest.fixture(scope="session")
def fp32_bundle(build_bundle):
    # with the shipped stream weights: forward + spec_step in one program; a
    # branching tree, so tree masks and KV compaction run on the real model
    return build_bundle(
        # the normalizer search runs (its report is a bundle file and the no_overflow gate's
        # input) on 2 + 1 prompts: on the real model each prompt costs seconds of every export
        "name: t-fp32\nmodel: {max_seq_len: 256}\nquant: {scheme: fp32}\nnumerics: {calibration_prompts: 2, heldout_prompts: 1}\n"
        "drafter: {weights: smollm2-135m-streams-cpu120.pt, tree: [2, 1]}\nvalidate: {enabled: false}\n",
    )


@pytest.fixture(scope="session")
def q_bundle(build_bundle):
    # the export's validate stage runs for real: two suites, the fp32 base model as reference
    return build_bundle(
        "name: t-8da4w\nmodel: {max_seq_len: 256}\nquant: {scheme: 8da4w, group_size: 32}\nnumerics: {search: false}\nvalidate: {suites: [rag, qa], prompts_per_suite: 2}\n",
    )


@pytest.fixture(scope="session")
def tiny_hf_dir(shared_root):
    """A 2-layer Llama with a byte-level tokenizer (every text encodes), saved as an HF directory
    (one for the run, so the bundles exported from it are shared too)."""
    return shared_dir(shared_root, "tiny_hf", _write_tiny_hf_dir)


def _write_tiny_hf_dir(d: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from tokenizers.pre_tokenizers import ByteLevel

    from edgespec.models.tokenizer import build_bpe_tokenizer_json

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


@pytest.fixture(scope="session")
def tiny_bundle(tiny_hf_dir, build_bundle):
    """A real fp32 .pte bundle of the tiny byte-level model (no validation)."""
    return build_bundle(
        f"name: tiny\nmodel: {{source: {tiny_hf_dir}, max_seq_len: 512}}\nquant: {{scheme: fp32}}\nnumerics: {{search: false}}\nvalidate: {{enabled: false}}\n",
    )
