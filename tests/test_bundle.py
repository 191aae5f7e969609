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


# a child process that replaces the bundle `argv[1]` and is killed (os._exit: no cleanup runs)
# right after the rename named by argv[2]: "old" (the old bundle moved aside, where the OS cannot
# swap two names) or "swap" (the two bundles swapped in one step)
_KILLED_EXPORT = """
import os, sys
from pathlib import Path
from edgespec import bundle as B

out, at = Path(sys.argv[1]), sys.argv[2]
if at == "old":
    B._exchange = lambda a, b: False
    rename = Path.rename

    def killed_after(self, target):
        rename(self, target)
        if Path(target).name.startswith(f".{out.name}.old-"):
            os._exit(9)

    Path.rename = killed_after
else:
    exchange = B._exchange
    B._exchange = lambda a, b: exchange(a, b) and os._exit(9)
with B.staged_bundle(out) as stage:  # a complete bundle: the old one's manifest over new files
    (stage / B.PROGRAM).write_bytes(b"new")
    (stage / B.TOKENIZER).write_text("{}")
    B.write_manifest(stage, B.read_manifest(out))
"""


def _killed_export(out, at):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _KILLED_EXPORT, str(out), at], capture_output=True, text=True)
    assert done.returncode == 9, done.stderr[-2000:]


def test_a_kill_between_the_renames_never_loses_the_old_bundle(tmp_path):
    out = tmp_path / "b"
    with B.staged_bundle(out) as stage:
        _write(stage, b"old")
    _killed_export(out, "old")
    assert not out.exists() and [p.name.startswith(".b.old-") for p in tmp_path.iterdir()].count(True) == 1
    # the next export (here one that fails) first puts the old bundle back under its name
    with pytest.raises(RuntimeError):
        with B.staged_bundle(out) as stage:
            raise RuntimeError("lowering failed")
    assert (out / B.PROGRAM).read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["b"]
    B.verify_checksums(out, B.read_manifest(out))
    # ... and a refusing one (overwrite=False) sees the restored bundle
    _killed_export(out, "old")
    with pytest.raises(EdgespecError, match="already exists"):
        with B.staged_bundle(out, overwrite=False):
            pass
    assert (out / B.PROGRAM).read_bytes() == b"old"


def test_swapped_bundles_leave_the_new_one_in_place(tmp_path):
    out = tmp_path / "b"
    with B.staged_bundle(out) as stage:
        _write(stage, b"old")
    _killed_export(out, "swap")  # killed after the swap, before the old bundle was removed
    assert (out / B.PROGRAM).read_bytes() == b"new" and len(list(tmp_path.iterdir())) == 2
    with B.staged_bundle(out) as stage:
        _write(stage, b"newer")
    assert (out / B.PROGRAM).read_bytes() == b"newer" and [p.name for p in tmp_path.iterdir()] == ["b"]


def test_a_failed_second_rename_puts_the_old_bundle_back(tmp_path, monkeypatch):
    out = tmp_path / "b"
    with B.staged_bundle(out) as stage:
        _write(stage, b"old")
    monkeypatch.setattr(B, "_exchange", lambda a, b: False)
    rename = type(out).rename

    def failing(self, target):
        if self.name.startswith(".b.partial-"):
            raise OSError(28, "No space left on device")
        return rename(self, target)

    monkeypatch.setattr(type(out), "rename", failing)
    with pytest.raises(OSError):
        with B.staged_bundle(out) as stage:
            _write(stage, b"new")
    assert (out / B.PROGRAM).read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["b"]


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
        ({"model": ok["model"] | {"vocab_size": True}}, "vocab_size"),
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


def test_runtime_needs_tell_edgespecs_ops_from_executorchs_own():
    """Operators outside ExecuTorch's namespaces (aten, its prim ops, quantized, llama) are what a
    stock runtime lacks; a program without them runs on the prebuilt AAR."""
    from edgespec.manifest import RuntimeNeeds

    stock = RuntimeNeeds(operators=("aten::embedding.out", "executorch_prim::add.Scalar", "llama::update_cache.out"), delegates=("XnnpackBackend",))
    assert stock.extra_operators() == () and "prebuilt Android AAR run it" in stock.runtimes_line() and "XnnpackBackend" in stock.runtimes_line()
    block = RuntimeNeeds(operators=("aten::embedding.out", "edgespec::block_linear.out", "edgespec::rope.out", "quantized_decomposed::x.out"))
    assert block.extra_operators() == ("edgespec::block_linear.out", "edgespec::rope.out")
    assert "android/kernels" in block.runtimes_line() and "does not" in block.runtimes_line()
