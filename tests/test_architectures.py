"""Every family the loaders accept computes what transformers computes: tiny random models
written by transformers itself (Llama tied and untied, Llama 3.1 rope scaling, Qwen2 with q/k/v
biases, Qwen3 with q/k norms and a head size of its own, Gemma 3 with its sliding windows
shorter than the prompt), read from the HF directory and from the GGUF file llama.cpp's
converter would write, in eager code and in an fp32 program; and what edgespec does not
compute is refused by name."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from edgespec.errors import EdgespecError
from edgespec.models.load import build_model, read_source
from tiny_models import GEMMA3_LAYERS, HF_FAMILIES, write_gguf_of_hf, write_hf_dir

PROMPT, STEPS = 24, 8  # prefill rows, then one-token decoding steps
TOL = 1e-4  # fp32: observed differences are ~5e-6 on logits of magnitude ~5


@pytest.fixture(scope="module", params=list(HF_FAMILIES))
def family(request, tmp_path_factory):
    """(name, transformers model, HF directory, token ids [1, PROMPT + STEPS], transformers' logits [PROMPT + STEPS, V])."""
    d = tmp_path_factory.mktemp(request.param) / "hf"
    hf = write_hf_dir(d, request.param)
    ids = torch.randint(3, hf.config.vocab_size, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        logits = hf(ids).logits[0]
    return request.param, hf, d, ids, logits


def _eager_logits(source: str, ids: torch.Tensor) -> torch.Tensor:
    """edgespec's eager model on `source`: all prompt rows in one call, then one token per call
    through the static KV cache; logits of every position [PROMPT + STEPS, V]."""
    model = build_model(read_source(source, 64))
    with torch.no_grad():
        rows = [model.output(model.hidden(ids[:, :PROMPT], torch.tensor([0])))[0]]
        rows += [model(ids[:, p : p + 1], torch.tensor([p])) for p in range(PROMPT, PROMPT + STEPS)]
    return torch.cat(rows)


def test_hf_directory_equals_transformers(family):
    name, _, d, ids, ref = family
    diff = (_eager_logits(str(d), ids) - ref).abs().max().item()
    assert diff < TOL, f"{name}: max |logit difference| {diff:.2e}"


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter's q/k permutation for Llama (written here from its formula, not
    from edgespec's code): rotate-half rows -> interleaved pairs within each head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_gguf_equals_transformers_and_the_hf_directory(family, tmp_path):
    name, hf, d, ids, ref = family
    path = tmp_path / f"{name}.gguf"
    write_gguf_of_hf(path, hf)
    if hf.config.model_type in ("llama", "mistral"):  # the file's q rows are llama.cpp's permutation of transformers'
        from gguf import GGUFReader

        q = next(t for t in GGUFReader(path).tensors if t.name == "blk.0.attn_q.weight")
        hf_q = hf.state_dict()["model.layers.0.self_attn.q_proj.weight"].numpy()
        assert np.array_equal(np.asarray(q.data).reshape(hf_q.shape), _llama_cpp_permute(hf_q, hf.config.num_attention_heads))
    from_gguf, from_dir = read_source(str(path), 64), read_source(str(d), 64)
    f32 = lambda x: np.float32(x).item()  # GGUF keeps eps and rope_freqs in fp32  # noqa: E731
    assert from_gguf.args == dataclasses.replace(
        from_dir.args, norm_eps=f32(from_dir.args.norm_eps), rope_freq_factors=tuple(map(f32, from_dir.args.rope_freq_factors))
    )
    for k, v in from_dir.state_dict.items():
        assert torch.equal(from_gguf.state_dict[k], v), k
    diff = (_eager_logits(str(path), ids) - ref).abs().max().item()
    assert diff < TOL, f"{name} from GGUF: max |logit difference| {diff:.2e}"


def test_quantized_qwen_rows_are_permuted_with_their_blocks(tmp_path):
    """A Qwen file's q/k are rotate-half rows: a Q8_0 q/k is permuted block by block, so its
    carried blocks are the permuted rows of the file (each within Q8_0's error of the float rows)."""
    hf = write_hf_dir(tmp_path / "hf", "qwen2", hidden_size=64, intermediate_size=96, num_attention_heads=4)  # rows of whole Q8_0 blocks
    q8 = {"blk.0.attn_q.weight": "Q8_0", "blk.0.attn_k.weight": "Q8_0", "blk.1.ffn_up.weight": "Q8_0"}
    write_gguf_of_hf(tmp_path / "f32.gguf", hf)
    write_gguf_of_hf(tmp_path / "q8.gguf", hf, quantize=q8)
    f32, q = read_source(str(tmp_path / "f32.gguf"), 64), read_source(str(tmp_path / "q8.gguf"), 64)
    for name in ("layers.0.attention.wq.weight", "layers.0.attention.wk.weight", "layers.1.feed_forward.w3.weight"):
        blocks = q.blocks[name]
        assert blocks.format == "Q8_0" and q.file_types[name] == "Q8_0"
        assert torch.equal(blocks.dequantize(), q.state_dict[name])
        step = f32.state_dict[name].abs().amax(-1, keepdim=True) / 127  # Q8_0's rounding error is at most half a step of a block's scale
        assert ((q.state_dict[name] - f32.state_dict[name]).abs() <= step).all(), name


@pytest.mark.parametrize("kernel", ["edgespec", "xnnpack"])
@pytest.mark.parametrize("name", ["qwen2", "qwen3"])
def test_quantization_keeps_biases_and_head_norms(tmp_path, name, kernel):
    """8da4w over a Qwen model: every q/k/v linear keeps its fp32 bias (edgespec's block
    linear or torchao's) and computes with it, and the q/k norms stay."""
    from edgespec.config import QuantConfig
    from edgespec.quant import plan_quantization, quantize_

    write_hf_dir(tmp_path, name, hidden_size=64, intermediate_size=96, num_attention_heads=4)  # whole blocks of 32
    src = read_source(str(tmp_path), 64)
    model = build_model(src)
    quantize_(model, plan_quantization(model, QuantConfig(kernel=kernel), src.blocks, src.file_types))
    ids = torch.randint(3, 259, (1, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        with_biases = model.output(model.hidden(ids, torch.tensor([0])))
        for i in range(src.args.n_layers):
            att = model.layers[i].attention
            assert (att.q_norm is not None) == (name == "qwen3")
            for proj in ("wq", "wk", "wv"):
                bias = src.state_dict.get(f"layers.{i}.attention.{proj}.bias")
                linear = getattr(att, proj)
                assert type(linear.weight if kernel == "xnnpack" else linear).__name__ == ("IntxUnpackedToInt8Tensor" if kernel == "xnnpack" else "BlockLinear")
                got = linear.bias
                assert (got is None) == (bias is None) and (bias is None or torch.equal(got, bias)), f"layer {i} {proj}"
                if got is not None:
                    got.zero_()
        without = model.output(model.hidden(ids, torch.tensor([0])))
    assert (name == "qwen2") == (not torch.allclose(with_biases, without))


# ---- what is refused, by name


@pytest.mark.parametrize(
    "family, change, message",
    [
        ("llama", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "rope type 'yarn'"),
        ("llama", {"rope_scaling": {"type": "dynamic", "factor": 2.0}, "rope_parameters": None}, "rope type 'dynamic'"),
        ("llama", {"attention_bias": True}, "attention_bias"),
        ("llama", {"mlp_bias": True}, "mlp_bias"),
        ("llama", {"hidden_act": "gelu"}, "activation 'gelu'"),
        ("llama", {"partial_rotary_factor": 0.5}, "partial rotary"),
        ("qwen2", {"use_sliding_window": True, "sliding_window": 16}, "sliding-window"),
        ("qwen3", {"layer_types": ["full_attention", "sliding_attention"]}, "sliding-window"),
        ("llama", {"model_type": "gemma3"}, "unsupported architecture 'gemma3'.*lacks its the multimodal model's vision tower"),
        ("llama", {"model_type": "gemma2"}, "unsupported architecture 'gemma2'.*logit soft-capping"),
        ("mistral", {"sliding_window": 16}, r"window 16.*model.max_seq_len <= 16"),
    ],
)
def test_numerics_it_does_not_implement_are_refused(tmp_path, family, change, message):
    write_hf_dir(tmp_path, family)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(change)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EdgespecError, match=message):
        read_source(str(tmp_path), 64)


def test_a_sliding_window_that_covers_the_context_is_full_attention(tmp_path):
    """Mistral with a window of 64 and a program context of 64: no key is ever outside the
    window, so the model is computed exactly (transformers applies the window)."""
    hf = write_hf_dir(tmp_path, "mistral", sliding_window=64)
    ids = torch.randint(3, 259, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = hf(ids).logits[0]
    assert (_eager_logits(str(tmp_path), ids) - ref).abs().max().item() < TOL
    with pytest.raises(EdgespecError, match="model.max_seq_len <= 64"):
        read_source(str(tmp_path), 65)


def test_weights_without_a_place_are_refused(tmp_path):
    """Qwen2's biases in a directory that says llama: an error, not a model without them."""
    write_hf_dir(tmp_path, "qwen2")
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    with pytest.raises(EdgespecError, match="unexpected.*bias"):
        build_model(read_source(str(tmp_path), 64))


def test_gguf_tensors_and_rope_scaling_it_does_not_implement_are_refused(tmp_path):
    import gguf

    hf = write_hf_dir(tmp_path / "hf", "llama")
    write_gguf_of_hf(tmp_path / "ok.gguf", hf)
    reader = gguf.GGUFReader(tmp_path / "ok.gguf")

    def rewrite(path, arch="llama", extra_kv=(), extra_tensor=None):
        w = gguf.GGUFWriter(str(path), arch)
        for f in reader.fields.values():
            if f.name.startswith("GGUF.") or f.name == "general.architecture":
                continue
            key = f.name.replace("llama.", f"{arch}.", 1)
            w.add_key_value(key, f.contents(), f.types[0], f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None)
        for k, v in extra_kv:
            w.add_string(k, v)
        for t in reader.tensors:
            w.add_tensor(t.name, np.asarray(t.data).reshape(tuple(int(s) for s in reversed(t.shape))))
        if extra_tensor:
            w.add_tensor(extra_tensor, np.ones(48, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return str(path)

    read_source(rewrite(tmp_path / "same.gguf"), 64)  # the rewrite itself loads
    with pytest.raises(EdgespecError, match="unsupported architecture 'gemma2'"):
        read_source(rewrite(tmp_path / "gemma.gguf", arch="gemma2"), 64)
    with pytest.raises(EdgespecError, match="rope scaling 'yarn'"):
        read_source(rewrite(tmp_path / "yarn.gguf", extra_kv=[("llama.rope.scaling.type", "yarn")]), 64)
    with pytest.raises(EdgespecError, match="no place for.*blk.0.post_attention_norm.weight"):
        read_source(rewrite(tmp_path / "sandwich.gguf", extra_tensor="blk.0.post_attention_norm.weight"), 64)


def _program_logits(src, ids: torch.Tensor, tmp_path, attention: str = "custom_sdpa") -> torch.Tensor:
    """The source's fp32 ExecuTorch program (XNNPACK, context 64, ExecuTorch's attention or
    `attention`): the prompt in one call, then one token per call; each call's last-row logits
    [1 + STEPS, V]."""
    from edgespec.export.lowering import ProgramMeta, export_forward, lower_to_executorch
    from edgespec.runtime.runner import ProgramRunner

    path = tmp_path / "model.pte"
    path.write_bytes(
        lower_to_executorch(
            {"forward": export_forward(build_model(src), 64, attention)}, ProgramMeta(64, src.args.vocab_size, src.args.n_layers, 1, (2,))
        ).program
    )
    runner = ProgramRunner(path)
    return torch.stack([runner.forward(ids[:, :PROMPT], 0)] + [runner.forward(ids[:, p : p + 1], p) for p in range(PROMPT, PROMPT + STEPS)])


# ---- Gemma 3: sandwich norms, (1 + w) RMSNorm, GeGLU, scaled embeddings, q/k norms, local
# layers with a window of 5 (the prompt is 24 rows) and a rope base of their own


def _gemma3(tmp_path, tied: bool, **config):
    hf = write_hf_dir(tmp_path / "hf", "gemma3", tie_word_embeddings=tied, **config)
    ids = torch.randint(3, hf.config.vocab_size, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        return hf, ids, hf(ids).logits[0]


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_gemma3_equals_transformers_from_the_hf_directory_and_gguf(tmp_path, tied):
    hf, ids, ref = _gemma3(tmp_path, tied)
    args = read_source(str(tmp_path / "hf"), 64).args
    assert (args.sliding_window, args.local_layers, args.local_rope_theta, args.activation) == (5, (0, 1, 2, 3, 4), 10000.0, "gelu_tanh")
    assert args.attn_scale == 24**-0.5 and args.sandwich_norms and args.embed_scale and args.tie_embeddings == tied
    diff = (_eager_logits(str(tmp_path / "hf"), ids) - ref).abs().max().item()
    assert diff < TOL, f"gemma3 ({'tied' if tied else 'untied'}): max |logit difference| {diff:.2e}"
    # llama.cpp's gemma3 scales queries by head_dim^-0.5 (a GGUF holds no query_pre_attn_scalar):
    # the GGUF check is of a model whose scalar is its head size, as Gemma 3 270M's is
    hf, ids, ref = _gemma3(tmp_path / "g", tied, query_pre_attn_scalar=16)
    path = tmp_path / "gemma3.gguf"
    write_gguf_of_hf(path, hf)
    from_gguf, from_dir = read_source(str(path), 64), read_source(str(tmp_path / "g" / "hf"), 64)
    assert from_gguf.args == dataclasses.replace(from_dir.args, norm_eps=np.float32(from_dir.args.norm_eps).item(), attn_scale=0.0)
    for k, v in from_dir.state_dict.items():
        assert torch.allclose(from_gguf.state_dict[k], v, rtol=0, atol=1e-6), k  # norms: (1 + w) rounded once in fp32 either way
    diff = (_eager_logits(str(path), ids) - ref).abs().max().item()
    assert diff < TOL, f"gemma3 from GGUF: max |logit difference| {diff:.2e}"


def test_gemma3_window_needs_the_exact_attention_in_a_program(tmp_path):
    """ExecuTorch's llama::custom_sdpa has no window: a context longer than it is refused at
    export, by name, with what works."""
    from edgespec.export.lowering import export_forward

    write_hf_dir(tmp_path, "gemma3")
    with pytest.raises(EdgespecError, match=r"5 sliding-window attention layers \(window 5\) need edgespec's exact attention.*max_seq_len <= 5"):
        export_forward(build_model(read_source(str(tmp_path), 64)), 64)


@pytest.mark.slow
def test_gemma3_fp32_program_equals_transformers_past_its_window(tmp_path):
    """An fp32 program of Gemma 3 (local rope base, sandwich norms, GeGLU, scaled embeddings,
    query scale) with edgespec's exact attention over the windowed mask: a 24-token prompt and
    8 one-token steps, every local layer's window 5, equal to transformers."""
    hf, ids, ref = _gemma3(tmp_path, True)
    src = read_source(str(tmp_path / "hf"), 64)
    assert src.args.local_layers == tuple(i for i, t in enumerate(GEMMA3_LAYERS) if t == "sliding_attention")
    diff = (_program_logits(src, ids, tmp_path, "exact") - ref[PROMPT - 1 :]).abs().max().item()
    assert diff < TOL, f"gemma3 program: max |logit difference| {diff:.2e}"


# ---- the fp32 program


@pytest.mark.slow
def test_fp32_program_equals_transformers(family, tmp_path):
    """The family's fp32 ExecuTorch program (XNNPACK, ExecuTorch's attention): the prompt in one
    call, then one token per call, each last-row logits against transformers'. From the HF
    directory only: the GGUF file gives the same eager model (test_gguf_equals_transformers_and_the_hf_directory),
    and the program is lowered from the eager model whatever file it was read from (each
    lowering costs about a minute)."""
    name, hf, d, ids, ref = family
    diff = (_program_logits(read_source(str(d), 64), ids, tmp_path) - ref[PROMPT - 1 :]).abs().max().item()
    assert diff < TOL, f"{name} program: max |logit difference| {diff:.2e}"


# ---- a new user's own model, end to end


USER_SHAPE = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, head_dim=16, max_position_embeddings=1024)  # every linear in whole blocks of 32


def _export(args: list[str]):
    from click.testing import CliRunner

    from edgespec.cli import main

    return CliRunner().invoke(main, ["export", *args])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama3-rope", "qwen2", "qwen3"])
def test_a_users_model_exports_end_to_end(tmp_path, name):
    """`edgespec export model.source=DIR` on a small model of each family (whole blocks of 32):
    8-bit weights on edgespec's kernel pass the validation gates, the fidelity one measured
    against the directory's own fp32 model, and the bundle generates."""
    from click.testing import CliRunner

    from edgespec.bundle import read_manifest
    from edgespec.cli import main

    write_hf_dir(tmp_path / "hf", name, **USER_SHAPE)
    common = [f"model.source={tmp_path / 'hf'}", "numerics.search=false", "validate.suites=[qa]", "validate.prompts_per_suite=2"]
    res = _export([*common, "quant.scheme=8da8w", "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    m = read_manifest(tmp_path / "b")
    assert m.model.source == str(tmp_path / "hf") and m.quantization.unquantized == 0 and m.quantization.rounded == 15
    assert m.validation.fidelity.top1_agreement >= 0.9
    out = CliRunner().invoke(main, ["generate", "--bundle", str(tmp_path / "b"), "--prompt", "Hello", "--max-new-tokens", "4", "--json"])
    assert out.exit_code == 0, out.output
    assert len(json.loads(out.output.strip().splitlines()[-1])["completion_ids"]) == 4


@pytest.mark.slow
def test_the_fidelity_gate_judges_a_users_model(tmp_path):
    """The same model in 4 bits: a model of random weights has no margin between its top
    logits, so 4-bit rounding moves the argmax; the gate measures it and refuses the bundle."""
    write_hf_dir(tmp_path / "hf", "qwen3", **USER_SHAPE)
    res = _export(
        [f"model.source={tmp_path / 'hf'}", "numerics.search=false", "validate.suites=[qa]", "validate.prompts_per_suite=2", "-o", str(tmp_path / "b")]
    )
    assert res.exit_code != 0 and "min_top1_agreement" in res.output and not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    "pre, pieces",
    [
        ("llama-bpe", ["Hello", "Ġworld", ",", "Ġit", "'s", "Ġ", "123", "45", "Ġapples", "!ĊĊ", "OK"]),  # Llama 3: numbers in runs of 3
        ("qwen2", ["Hello", "Ġworld", ",", "Ġit", "'s", "Ġ", "1", "2", "3", "4", "5", "Ġapples", "!ĊĊ", "OK"]),  # Qwen2/Qwen3: digit by digit
    ],
)
def test_gguf_pre_tokenizers_of_the_families_split_as_theirs_do(pre, pieces):
    """A GGUF Llama 3 or Qwen file names its pre-tokenizer (`tokenizer.ggml.pre`); each splits
    text with GPT-4's pattern before byte-level BPE, differing in how digits group."""
    from edgespec.models.tokenizer import _pre_tokenizer

    assert [t for t, _ in _pre_tokenizer(pre).pre_tokenize_str("Hello world, it's 12345 apples!\n\nOK")] == pieces
