"""Property tests of every reader of user input: each input works or is one EdgespecError
(at the CLI: one `error:` line, exit 2); never another exception. Bounded example counts
keep this in seconds."""

import json
import os
import string

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgespec.bundle import MANIFEST, SCHEMA_VERSION, read_manifest, verify_checksums
from edgespec.cli import main
from edgespec.config import Recipe, apply_overrides, load_recipe
from edgespec.corpus.prompts import iter_jsonl
from edgespec.errors import EdgespecError

FAST = settings(
    max_examples=int(os.environ.get("EDGESPEC_FUZZ_EXAMPLES", "150")),  # bench/fuzz_long.py raises it
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ["name", "model.source", "model.max_seq_len", "quant.scheme", "quant.group_size", "drafter.tree", "drafter.draft_depth", "drafter.draft_vocab"]
FIELDS += ["train.lr", "train.steps", "train.depth_weights", "numerics.format", "export.step_attention", "validate.suites", "validate.gates", "nope", "quant"]


def _works_or_says_why(fn, *args):
    try:
        return fn(*args)
    except EdgespecError as e:
        assert str(e)
        return None


@FAST
@given(st.lists(st.tuples(st.sampled_from(FIELDS), st.text(alphabet=string.printable, max_size=20)), max_size=4))
def test_overrides(pairs):
    r = _works_or_says_why(apply_overrides, Recipe(), [f"{k}={v}" for k, v in pairs])
    assert r is None or isinstance(r, Recipe)


@FAST
@given(
    st.dictionaries(st.sampled_from(["name", "model", "quant", "drafter", "streams", "train", "validate", "export", "x"]), json_values, max_size=4)
    | json_values
)
def test_recipe_files(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("r") / "r.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    r = _works_or_says_why(load_recipe, path)
    assert r is None or isinstance(r, Recipe)


@FAST
@given(st.binary(max_size=200))
def test_recipe_bytes(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("r") / "r.yaml"
    path.write_bytes(raw)
    r = _works_or_says_why(load_recipe, path)
    assert r is None or isinstance(r, Recipe)


@FAST
@given(st.dictionaries(st.sampled_from(["schema_version", "task", "files", "methods", "model", "tokenizer", "speculative"]), json_values) | json_values)
def test_manifests(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("b")
    if isinstance(data, dict) and "schema_version" in data and data["schema_version"] is None:
        data["schema_version"] = SCHEMA_VERSION  # reach the readers behind the version check
    (d / MANIFEST).write_text(json.dumps(data))
    m = _works_or_says_why(read_manifest, d)
    if m is not None:
        _works_or_says_why(verify_checksums, d, m)
    res = CliRunner().invoke(main, ["verify", "--bundle", str(d)])
    assert res.exit_code == 2 and res.output.startswith("error: ") and res.output.count("\n") == 1, res.output


def _paths(data, prefix=()):
    """Every (key path) of nested dicts in `data`."""
    for k, v in data.items():
        yield (*prefix, k)
        if isinstance(v, dict):
            yield from _paths(v, (*prefix, k))


@pytest.fixture(scope="module")
def valid_bundle_data(tmp_path_factory):
    """A bundle's files (program bytes, tokenizer) and its valid manifest, as JSON data."""
    from tests.manifests import tiny_manifest

    from edgespec.bundle import PROGRAM, TOKENIZER, write_manifest

    d = tmp_path_factory.mktemp("valid")
    (d / PROGRAM).write_bytes(b"not a program")
    (d / TOKENIZER).write_text("{}")
    return d, write_manifest(d, tiny_manifest()).to_dict()


@FAST
@given(st.data())
def test_manifest_fields_set_to_anything(valid_bundle_data, tmp_path_factory, data):
    """A valid manifest with one field (at any depth) set to any JSON value, or removed, or
    nested deeply: reading and verifying it works or is one EdgespecError; the CLI says one line."""
    import copy

    src, valid = valid_bundle_data
    m = copy.deepcopy(valid)
    path = data.draw(st.sampled_from(sorted(_paths(m), key=str)))
    parent = m
    for k in path[:-1]:
        parent = parent[k]
    how = data.draw(st.sampled_from(["value", "remove", "deep"]))
    if how == "remove":
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(json_values) if how == "value" else "<deep>"
    d = tmp_path_factory.mktemp("b")
    for f in src.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    (d / MANIFEST).write_text(json.dumps(m).replace('"<deep>"', "[" * 3000 + "]" * 3000))
    got = _works_or_says_why(read_manifest, d)
    if got is not None:
        _works_or_says_why(verify_checksums, d, got)
    for cmd in ("verify", "info"):
        res = CliRunner().invoke(main, [cmd, "--bundle", str(d)])
        assert res.exit_code == 0 or (res.exit_code == 2 and res.output.startswith("error: ") and res.output.count("\n") == 1), res.output


@FAST
@given(st.lists(st.text(alphabet=string.printable + "\u2028\x00é", max_size=16), max_size=3))
def test_cli_recipe_errors_are_one_line(tmp_path_factory, overrides):
    d = tmp_path_factory.mktemp("o")
    res = CliRunner().invoke(main, ["normsearch", "model.source=/nonexistent/x.gguf", *[f"quant.{o}" for o in overrides], "-o", str(d / "out")])
    assert res.exit_code == 2 and res.output.startswith("error: ") and res.output.count("\n") == 1, res.output


@FAST
@given(st.lists(st.binary(max_size=40), max_size=6))
def test_jsonl_reader(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("j") / "in.jsonl"
    path.write_bytes(b"\n".join(lines))
    _works_or_says_why(lambda: list(iter_jsonl(path)))


@pytest.fixture(scope="module")
def byte_tokenizer():
    from edgespec.models.tokenizer import Tokenizer, build_bpe_tokenizer_json

    tokens = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 173)] + [chr(c) for c in range(174, 256)] + [chr(c) for c in range(256, 324)]
    return Tokenizer.from_json(build_bpe_tokenizer_json(tokens, [], [1] * len(tokens), pre="gpt2"), chat_template=None, bos_id=None, eos_ids=(), add_bos=False)


@FAST
@given(st.text(max_size=60))
def test_tokenizer_round_trip_on_any_unicode(byte_tokenizer, text):
    assert byte_tokenizer.decode(byte_tokenizer.encode(text)) == text
