"""The real Gemma 3 270M (`model.source=gemma-3-270m`: the Q4_K_M GGUF assembled from the
`gemma3` extra's packages) against transformers' own loading of the same file: eager logits
on prompts shorter and longer than its 512-token window, and its tokenizer on varied text;
and the file exported to a block-kernel bundle with every matrix carried and a context twice
the window, prefill equal to one-token decoding past the window."""

import json

import pytest
import torch

from edgespec.models.load import build_model, embedded_path, read_source, tokenizer_of

pytestmark = pytest.mark.slow

NAME = "gemma-3-270m"


@pytest.fixture(scope="module")
def gguf_file():
    return embedded_path(NAME)


@pytest.fixture(scope="module")
def transformers_model(gguf_file):
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name, dtype=torch.float32)
    return model.eval()


def test_architecture_as_llama_cpp_lays_it_out():
    a = read_source(NAME, 64).args
    assert (a.n_layers, a.dim, a.n_heads, a.n_kv_heads, a.head_dim, a.vocab_size) == (18, 640, 4, 1, 256, 262144)
    assert a.sliding_window == 512 and a.local_layers == tuple(i for i in range(18) if (i + 1) % 6)  # layers 5, 11, 17 global
    assert (a.rope_theta, a.local_rope_theta, a.activation) == (1e6, 1e4, "gelu_tanh") and a.sandwich_norms and a.embed_scale and a.qk_norm


def test_eager_logits_equal_transformers_within_and_past_the_window(transformers_model):
    """Every row's logits of a short prompt and of one of 600 tokens (past the 512-token
    window of the local layers), edgespec's eager fp32 model against transformers'."""
    src = read_source(NAME, 640)
    model, tokenizer = build_model(src), tokenizer_of(src)
    from edgespec.corpus.varied_text import varied_lines

    prose = " ".join(varied_lines(20)["prose"])
    for ids in (tokenizer.encode("The capital of France is"), tokenizer.encode(prose)[:600]):
        x = torch.tensor([ids])
        with torch.no_grad():
            ours = model.output(model.hidden(x, torch.tensor([0])))[0]
            ref = transformers_model(x).logits[0]
        diff = (ours - ref).abs().max().item()
        assert diff < 1e-3 * ref.abs().max().item(), f"{len(ids)} tokens: max |logit difference| {diff:.2e}"  # observed ~3e-5 on logits of ~22
        assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_tokenizer_equals_transformers_gguf_tokenizer(gguf_file):
    """edgespec's tokenizer.json of the file (SentencePiece BPE as llama.cpp tokenizes it)
    against transformers' tokenizer of the same file, on ~300 varied texts (Debian descriptions
    in English, German and French, CJK, prose, chat, code). (Against llama.cpp itself:
    bench/tokenizer_agreement.py, 353/353.)"""
    transformers = pytest.importorskip("transformers")
    from edgespec.corpus.varied_text import varied_lines

    theirs = transformers.AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    ours = tokenizer_of(read_source(NAME, 64))
    texts = [t for lines in varied_lines(50).values() for t in lines]
    assert len(texts) > 250
    differ = [t for t in texts if ours.encode_continuation(t) != theirs.encode(t, add_special_tokens=False)]
    assert not differ, f"{len(differ)} of {len(texts)} differ, e.g. {differ[:2]!r}"


def test_block_kernel_bundle_past_the_window(tmp_path):
    """The shipped recipe (recipes/gemma3-270m.yaml: edgespec's block kernel, a context of 1024,
    twice the window): every matrix carried, its bf16 normalizer search clean; a 600-token prompt gives the same last-row logits, bit for bit,
    prefilled in one call as prefilled to 300 and then fed one token per call (the windowed
    layers' masks and the exact attention keep rows independent of the call's shape); its
    greedy continuation the same either way, and through the screened head's next_token."""
    from click.testing import CliRunner

    from edgespec.cli import main
    from edgespec.corpus.varied_text import varied_lines
    from edgespec.runtime.runner import ProgramRunner

    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["export", "recipes/gemma3-270m.yaml", "validate.enabled=false", "-o", str(out)])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["quantization"]["carried"], manifest["quantization"]["rounded"]) == (127, 0)
    search = json.loads((out / "normsearch.json").read_text())["summary"]
    assert search["chosen_events_all_sets"] == 0 and search["layers_beyond_format"] == []
    tokenizer = tokenizer_of(read_source(NAME, 64))
    ids = torch.tensor([tokenizer.encode(" ".join(varied_lines(20)["prose"]))[:600]])
    runner = ProgramRunner(out / "model.pte")

    def continue_greedy(logits: torch.Tensor, pos: int, n: int = 8) -> list[int]:
        out = []
        for p in range(pos, pos + n):
            out.append(int(logits.argmax()))
            logits = runner.forward(torch.tensor([[out[-1]]]), p)
        return out

    whole = runner.forward(ids, 0).clone()  # (an output buffer the next call may reuse)
    a = continue_greedy(whole, 600)
    stepped = runner.forward(ids[:, :300], 0)
    for p in range(300, 600):
        stepped = runner.forward(ids[:, p : p + 1], p).clone()
    assert torch.equal(whole, stepped)
    assert continue_greedy(stepped, 600) == a
    # the recipe's next_token (its head read through the 5-bit screen): the same greedy tokens,
    # the prompt prefilled by it and every step through it
    assert runner.has_next_token
    tok, screened = runner.next_token(ids, 0), []
    for p in range(600, 608):
        screened.append(tok)
        tok = runner.next_token(torch.tensor([[tok]]), p)
    assert screened == a
