"""Issue 59: no input crashes or runs code. A checkpoint that would run code is refused, bad
text in a prompt is one recorded error (batch) or one `error:` line (CLI), flags out of range
are refused, and batch resume is keyed by what a line asks for."""

import hashlib
import json
import string

import pytest
import torch
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from edgespec.cli import main
from edgespec.cli import run as run_cli
from edgespec.config import DrafterConfig
from edgespec.errors import EdgespecError
from edgespec.models.tokenizer import Tokenizer
from edgespec.runtime.batch import finished_ids, run_batch
from edgespec.runtime.generate import GenerationResult
from edgespec.speculative.features import FeatureCache
from edgespec.speculative.streams import StreamParams, StreamsModel
from test_fuzz import FAST, json_values
from test_train import _periodic_examples, _run


class _RunsCode:
    """Unpickled, it calls exec: what a crafted .pt file does under torch.load(weights_only=False)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def _unsafe_files(tmp_path):
    marker = tmp_path / "code-ran"
    return marker, {
        "runs code": lambda p: torch.save({"fingerprint": _RunsCode(marker), "key": _RunsCode(marker)}, p),
        "damaged": lambda p: p.write_bytes(b"PK\x03\x04 not a zip"),
        "not a dict": lambda p: torch.save([torch.zeros(2)], p),
    }


@pytest.mark.parametrize("kind", ["runs code", "damaged", "not a dict"])
def test_resume_refuses_a_checkpoint_that_would_run_code(tiny_model, tmp_path, kind):
    marker, files = _unsafe_files(tmp_path)
    d = tmp_path / "run"
    d.mkdir()
    files[kind](d / "ckpt.pt")
    with pytest.raises(EdgespecError, match=r"ckpt.pt.*train.out_dir"):
        _run(tiny_model, _periodic_examples(), d, steps=1)
    assert not marker.exists()  # the pickle's code never ran
    assert (d / "ckpt.pt").exists()  # and the user's file is still there


@pytest.mark.parametrize("kind", ["runs code", "damaged", "not a dict"])
def test_feature_cache_rebuilds_a_file_that_would_run_code(tiny_model, tmp_path, kind):
    marker, files = _unsafe_files(tmp_path)
    spec = StreamsModel(tiny_model, StreamParams(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))))
    ex = _periodic_examples()
    files[kind](tmp_path / "features.pt")
    calls = []
    FeatureCache(spec, ex, tmp_path / "features.pt", on_progress=calls.append)
    assert not marker.exists() and len(calls) == len(ex)  # computed, not read
    calls.clear()
    FeatureCache(spec, ex, tmp_path / "features.pt", on_progress=calls.append)
    assert calls == []  # the rebuilt cache is read back


# --- batch: every line is generated, already done, or one recorded error; never an exception


@pytest.fixture(scope="module")
def tokenizer(tiny_hf_dir):
    """A real byte-level tokenizer: `tokenizers` refuses a str with a lone surrogate (TypeError)."""
    return Tokenizer.from_file(tiny_hf_dir / "tokenizer.json", eos_ids=(2,))


def _decode(ids, **kw):
    if len(ids) > 200:
        raise EdgespecError("the prompt has too many tokens")
    return GenerationResult(ids, [(sum(ids) + k) % 90 + 3 for k in range(kw["max_new_tokens"])], False, 0.001, 0.002, [0.001] * kw["max_new_tokens"])


def _batch(tokenizer, inp, out, pipelined=True):
    return run_batch(_decode, tokenizer.encode, tokenizer.decode, inp, out, gen_kwargs={"max_new_tokens": 3}, pipelined=pipelined)


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


BAD_LINES = {
    "lone surrogate in the prompt": (rb'{"id": "bad", "prompt": "hi \ud800"}', "bad"),
    "invalid UTF-8 in the prompt": (b'{"id": "bad", "prompt": "caf\xe9"}', "bad"),
    "lone surrogate in the id": (rb'{"id": "b\udc80", "prompt": "hi"}', None),
    "nesting deeper than the parser's recursion": (b"[" * 100_000, None),
}


@pytest.mark.parametrize("pipelined", [True, False])
@pytest.mark.parametrize("name", list(BAD_LINES))
def test_bad_text_is_a_recorded_error_and_the_batch_goes_on(tokenizer, tmp_path, name, pipelined):
    bad, key = BAD_LINES[name]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_bytes(b'{"id": "p0", "prompt": "first"}\n' + bad + b'\n{"id": "p1", "prompt": "last"}\n')
    stats = _batch(tokenizer, inp, out, pipelined)
    key = key or "sha256:" + hashlib.sha256(bad.decode("utf-8", "surrogateescape").encode("utf-8", "surrogatepass") + b"\n").hexdigest()[:16]
    rows = _rows(out)
    assert [r["id"] for r in rows] == ["p0", key, "p1"] and stats.generated == 2
    assert rows[1]["line"] == 2 and "malformed input" in rows[1]["error"] and "completion" not in rows[1]  # recorded in the output
    assert len(stats.errors) == 1 and stats.errors[0]["line"] == 2 and stats.errors[0]["id"] == key, stats.errors
    again = _batch(tokenizer, inp, out, pipelined)  # a rerun moves on past it: recorded, not retried
    assert again.generated == 0 and again.skipped_done == 3 and again.errors == [] and _rows(out) == rows


def test_a_whole_last_line_without_a_newline_is_finished(tokenizer, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"id": k, "prompt": f"prompt {k}"}) + "\n" for k in "abc"))
    _batch(tokenizer, inp, out)
    full = out.read_text()
    out.write_text(full.rstrip("\n").rsplit("\n", 1)[0])  # a, b; b without its newline (an edited file)
    assert finished_ids(out) == {"a", "b"} and out.read_text() == "\n".join(full.splitlines()[:2]) + "\n"
    stats = _batch(tokenizer, inp, out)
    assert stats.generated == 1 and stats.skipped_done == 2 and out.read_text() == full


def test_lines_without_an_id_resume_by_their_prompt(tokenizer, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text('{"prompt": "alpha"}\n{"prompt": "beta"}\n{"prompt": "beta"}\n')
    stats = _batch(tokenizer, inp, out)
    assert len(stats.errors) == 1 and stats.errors[0]["line"] == 3 and "same prompt" in stats.errors[0]["error"]
    inp.write_text('{"prompt": "new"}\n{"prompt": "alpha"}\n{"prompt": "beta"}\n')  # edited: a line inserted above
    stats = _batch(tokenizer, inp, out)
    rows = _rows(out)
    assert [r["prompt"] for r in rows] == ["alpha", "beta", "new"] and stats.skipped_done == 2 and stats.generated == 1
    assert len({r["id"] for r in rows}) == 3


# any code point, lone surrogates included (st.text would leave them out)
text = st.lists(st.characters(exclude_categories=()) | st.sampled_from("\ud800\udce9\udfff\x00é \n\r"), max_size=12).map("".join)
ids = st.none() | st.integers(-5, 5) | text | json_values
objects = st.fixed_dictionaries({"prompt": text | json_values}, optional={"id": ids, "extra": json_values})
line = (
    objects.map(lambda d: json.dumps(d).encode())  # surrogates as \ud800 escapes
    | objects.map(lambda d: json.dumps(d, ensure_ascii=False).encode("utf-8", "surrogatepass"))  # as bytes that are not UTF-8
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=40)
)


@FAST
@given(lines=st.lists(line, max_size=8), old_output=st.binary(max_size=60) | st.just(b""), pipelined=st.booleans())
def test_any_jsonl_is_processed_or_recorded(tokenizer, tmp_path_factory, lines, old_output, pipelined):
    d = tmp_path_factory.mktemp("b")
    inp, out = d / "in.jsonl", d / "out.jsonl"
    inp.write_bytes(b"\n".join(lines))
    out.write_bytes(old_output)
    first = _batch(tokenizer, inp, out, pipelined)
    assert first.total_lines == first.generated + first.skipped_done + len(first.errors)
    done = finished_ids(out)
    second = _batch(tokenizer, inp, out, pipelined)  # nothing generated twice
    assert second.generated == 0 and second.total_lines == first.total_lines and finished_ids(out) == done


# --- the CLI: one `error:` line (or click's usage error) for a bad prompt or flag


class _Runner:
    """What `generate` needs of a program: a step function with fixed logits."""

    max_seq_len, eos_ids, has_spec, has_next_token, path = 64, (2,), False, False, "fake.pte"

    def forward(self, tokens, pos):
        return torch.arange(259, dtype=torch.float32)  # greedy: 258


@pytest.fixture
def generate_cli(tokenizer, monkeypatch):
    monkeypatch.setattr(run_cli, "_load_bundle", lambda bundle, verify=False: (None, tokenizer, _Runner()))
    return lambda *args: CliRunner().invoke(main, ["generate", "--bundle", "b", "--no-chat-template", "--max-new-tokens", "3", *args])


def _error_line(res, text):
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), (res.output, res.exception)
    lines = [l for l in res.output.splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and text in lines[0], res.output


@pytest.mark.parametrize("prompt", ["caf\udce9", "hi \ud800"])  # the first as Python decodes invalid UTF-8 in argv
def test_cli_prompt_that_is_not_text(generate_cli, prompt):
    _error_line(generate_cli("--prompt", prompt), "not valid text")


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_cli_temperature_must_be_finite(generate_cli, value):
    _error_line(generate_cli("--prompt", "hi", "--temperature", value), "--temperature")


def test_cli_tiny_temperature_samples(generate_cli):
    res = generate_cli("--prompt", "hi", "--temperature", "1e-300", "--json")
    assert res.exit_code == 0 and json.loads(res.output)["completion_ids"] == [258] * 3, res.output


@pytest.mark.parametrize("seed, ok", [(2**64 - 1, True), (-(2**63), True), (2**64, False), (-(2**63) - 1, False)])
def test_cli_seed_in_the_generators_range(generate_cli, seed, ok):
    res = generate_cli("--prompt", "hi", "--temperature", "1", "--seed", str(seed))
    if ok:
        assert res.exit_code == 0, (res.output, res.exception)
    else:  # click's usage error: exit 2, no traceback
        assert res.exit_code == 2 and isinstance(res.exception, SystemExit) and "--seed" in res.output, (res.output, res.exception)
    assert "2**64-1" in CliRunner().invoke(main, ["generate", "--help"]).output


def test_check_text_names_the_character():
    from edgespec.models.tokenizer import check_text

    assert check_text("fine é") == "fine é"
    with pytest.raises(EdgespecError, match=r"'\\udce9' at character 3"):
        check_text("caf\udce9")
    assert all(c in string.printable for c in str(pytest.raises(EdgespecError, check_text, "\ud800").value))
