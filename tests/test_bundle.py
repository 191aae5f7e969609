import json
import re

import pytest

from edgespec import bundle as B
from edgespec.errors import EdgespecError
from manifests import tiny_manifest, tiny_manifest_data


def _write(stage, content=b"program"):
    (stage / B.PROGRAM).write_bytes(content)
    (stage / B.TOKENIZER).write_text("{}")
    return B.write_manifest(stage, tiny_manifest())


def test_staged_bundle_appears_only_when_complete(tmp_path):
    out = tmp_path / "b"
    with B.staged_bundle(out) as stage:
        _write(stage)
        assert not out.exists()
    m = B.read_manifest(out)
    assert set(m.files) == {B.PROGRAM, B.TOKENIZER}
    B.verify_checksums(out, m)


def test_failed_export_leaves_nothing_and_keeps_old_bundle(tmp_path):
    out = tmp_path / "b"
    with B.staged_bundle(out) as stage:
        _write(stage, b"old")
    with pytest.raises(RuntimeError):
        with B.staged_bundle(out) as stage:
            _write(stage, b"new")
            raise RuntimeError("lowering failed")
    assert (out / B.PROGRAM).read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["b"]  # no staging leftovers


def test_corrupt_file_is_named(tmp_path):
    out = tmp_path / "b"
    with B.staged_bundle(out) as stage:
        _write(stage)
    (out / B.PROGRAM).write_bytes(b"tampered")
    with pytest.raises(EdgespecError, match="'model.pte' is corrupt"):
        B.verify_checksums(out, B.read_manifest(out))
    (out / B.PROGRAM).unlink()
    with pytest.raises(EdgespecError, match="'model.pte' listed in the manifest is missing"):
        B.verify_checksums(out, B.read_manifest(out))


def test_manifest_errors(tmp_path):
    with pytest.raises(EdgespecError, match="not found"):
        B.read_manifest(tmp_path / "nope")
    with pytest.raises(EdgespecError, match="no manifest.json"):
        B.read_manifest(tmp_path)
    (tmp_path / B.MANIFEST).write_text("{not json")
    with pytest.raises(EdgespecError, match="not valid JSON"):
        B.read_manifest(tmp_path)
    (tmp_path / B.MANIFEST).write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(EdgespecError, match="schema_version 99"):
        B.read_manifest(tmp_path)


def test_unwritable_output_is_reported(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(EdgespecError, match="not a directory|cannot write"):
        with B.staged_bundle(blocker / "bundle"):
            pass
    with pytest.raises(EdgespecError, match="exists and is not a directory"):
        with B.staged_bundle(blocker):
            pass
    ok = tiny_manifest_data()
    for bad, field in (
        ({"files": {"../../etc/passwd": {"sha256": "x"}}}, "files.../../etc/passwd"),
        ({"files": {"a": "x"}}, "files.a"),
        ({"tokenizer": {"file": "t.json", "eos_ids": ["2"]}}, "eos_ids"),
        ({"model": {"name": "t", "source": "t", "vocab_size": True}}, "vocab_size"),
        ({"speculative": {"tree_branching": [1], "tree_parents": None}}, "tree_parents"),
        ({"recipe": {"quant": {"scheme": "int3"}}}, "quant.scheme"),
    ):
        (tmp_path / B.MANIFEST).write_text(json.dumps(ok | bad))
        with pytest.raises(EdgespecError, match=f"manifest.json: manifest field '[^']*{re.escape(field)}[^']*': must"):
            B.read_manifest(tmp_path)
    (tmp_path / B.MANIFEST).write_text(json.dumps(ok | {"model": {"vocab_size": 10}}))
    with pytest.raises(EdgespecError, match="manifest field 'model.name'|missing"):
        B.read_manifest(tmp_path)
    (tmp_path / B.MANIFEST).write_text(json.dumps([ok]))
    with pytest.raises(EdgespecError, match="must hold a JSON object"):
        B.read_manifest(tmp_path)
