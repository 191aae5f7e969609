"""Nothing a user owns is deleted or overwritten: every command that writes a directory
replaces or writes into it only when it is empty or holds what that command wrote (a bundle:
its manifest parses and lists every file); and a bundle is checked before it is loaded."""

import json
import shutil
import zipfile

import pytest
from click.testing import CliRunner
from tests.manifests import tiny_manifest

from edgespec import bundle as B
from edgespec.cli import main
from edgespec.errors import EdgespecError
from edgespec.output_dir import claim_dir, written_names


def _user_project(d):
    (d / "src").mkdir(parents=True)
    (d / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    (d / "NOTES.txt").write_text("mine\n")
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def _contents(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def _one_error_line(res):
    assert res.exit_code != 0 and res.output.startswith("error: ") and res.output.count("\n") == 1, res.output


def _small_bundle(d):
    d.mkdir(parents=True, exist_ok=True)
    (d / B.PROGRAM).write_bytes(b"program")
    (d / B.TOKENIZER).write_text("{}")
    B.write_manifest(d, tiny_manifest())
    return d


@pytest.fixture
def bundle_zip(tmp_path):
    src = _small_bundle(tmp_path / "b")
    return B.package_zip(src, tmp_path / "b.zip")


def test_export_refuses_to_replace_a_directory_that_is_not_a_bundle(tiny_hf_dir, tmp_path):
    proj = tmp_path / "proj"
    before = _user_project(proj)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: t\nmodel: {{source: {tiny_hf_dir}}}\nquant: {{scheme: fp32}}\nvalidate: {{enabled: false}}\n")
    res = CliRunner().invoke(main, ["export", str(recipe), "-o", str(proj)])
    _one_error_line(res)
    assert "is not an edgespec bundle" in res.output and "NOTES.txt" in res.output
    assert _contents(proj) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj", "r.yaml"]  # no staging left beside it


def test_unpack_overwrite_refuses_a_directory_that_is_not_a_bundle(bundle_zip, tmp_path):
    proj = tmp_path / "proj"
    before = _user_project(proj)
    res = CliRunner().invoke(main, ["unpack", str(bundle_zip), "-o", str(proj), "--overwrite"])
    _one_error_line(res)
    assert _contents(proj) == before


def test_a_bundle_holding_files_of_its_own_is_not_replaced(bundle_zip, tmp_path):
    out = _small_bundle(tmp_path / "out")
    (out / "my-notes.md").write_text("keep me\n")
    res = CliRunner().invoke(main, ["unpack", str(bundle_zip), "-o", str(out), "--overwrite"])
    _one_error_line(res)
    assert "my-notes.md" in res.output and (out / "my-notes.md").read_text() == "keep me\n"


def test_a_bundle_or_an_empty_directory_is_replaced(bundle_zip, tmp_path):
    out = _small_bundle(tmp_path / "out")
    (out / B.PROGRAM).write_bytes(b"an older program")
    B.write_manifest(out, tiny_manifest())
    res = CliRunner().invoke(main, ["unpack", str(bundle_zip), "-o", str(out), "--overwrite"])
    assert res.exit_code == 0, res.output
    assert (out / B.PROGRAM).read_bytes() == b"program"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert CliRunner().invoke(main, ["unpack", str(bundle_zip), "-o", str(empty), "--overwrite"]).exit_code == 0
    assert (empty / B.MANIFEST).is_file()


def test_a_link_inside_a_bundle_makes_it_the_users(bundle_zip, tmp_path):
    out = _small_bundle(tmp_path / "out")
    (tmp_path / "data").mkdir()
    (out / "data").symlink_to(tmp_path / "data", target_is_directory=True)
    with pytest.raises(EdgespecError, match=r"does not list \(data\)"):
        with B.staged_bundle(out):
            pass
    assert (out / "data").is_symlink()


def test_claim_dir_accepts_only_its_own_names(tmp_path):
    shards = written_names("shard-*.pt")
    d = tmp_path / "new" / "deep"
    assert claim_dir(d, shards, "shards") == d and d.is_dir()
    (d / "shard-00001.pt").write_bytes(b"x")
    claim_dir(d, shards, "shards")
    (d / "thesis.tex").write_text("x")
    with pytest.raises(EdgespecError, match=r"shards '.*deep' holds files edgespec did not write there \(thesis.tex\)"):
        claim_dir(d, shards, "shards")
    (tmp_path / "f").write_text("x")
    with pytest.raises(EdgespecError, match="not a directory"):
        claim_dir(tmp_path / "f", shards, "shards")


def test_distill_shards_refuse_a_directory_of_other_files(tmp_path):
    from edgespec.corpus.distill import distill_shards

    before = _user_project(tmp_path / "proj")
    with pytest.raises(EdgespecError, match="holds files edgespec did not write"):
        distill_shards(None, [("a", "t", [1, 2])], tmp_path / "proj", batch=1, max_new_tokens=1, eos_ids=(2,))
    assert _contents(tmp_path / "proj") == before


def test_normsearch_refuses_an_outdir_of_other_files_before_the_search(tmp_path):
    before = _user_project(tmp_path / "proj")
    res = CliRunner().invoke(main, ["normsearch", "model.source=/nonexistent/x.gguf", "-o", str(tmp_path / "proj")])
    _one_error_line(res)
    assert "holds files edgespec did not write" in res.output  # not the missing model: checked first
    assert _contents(tmp_path / "proj") == before


def test_validate_out_refuses_a_directory_of_other_files(tmp_path):
    b = _small_bundle(tmp_path / "b")
    before = _user_project(tmp_path / "proj")
    res = CliRunner().invoke(main, ["validate", "--bundle", str(b), "-o", str(tmp_path / "proj")])
    _one_error_line(res)
    assert "holds files edgespec did not write" in res.output
    assert _contents(tmp_path / "proj") == before


def test_export_keeps_a_foreign_directory_at_the_rejection_path(tiny_hf_dir, tmp_path):
    """A gate failure writes its report to <out>.rejected/ only where that holds reports."""
    from edgespec.manifest import LAYOUT

    rejected = LAYOUT.rejected(tmp_path / "b")
    before = _user_project(rejected)
    with pytest.raises(EdgespecError, match="rejection report directory"):
        claim_dir(rejected, LAYOUT.is_report, "rejection report directory")
    assert _contents(rejected) == before


# -- manifests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda m: m | {"task": []}, id="task-list"),
        pytest.param(lambda m: m | {"task": {"a": 1}}, id="task-dict"),
        pytest.param(lambda m: m | {"files": {}}, id="no-files-listed"),
        pytest.param(lambda m: m | {"tokenizer": {**m["tokenizer"], "file": "/etc/passwd"}}, id="tokenizer-outside"),
        pytest.param(lambda m: m | {"tokenizer": {**m["tokenizer"], "file": "../b/tokenizer.json"}}, id="tokenizer-up"),
    ],
)
def test_malformed_manifest_is_one_error_line(tmp_path, edit):
    b = _small_bundle(tmp_path / "b")
    data = json.loads((b / B.MANIFEST).read_text())
    (b / B.MANIFEST).write_text(json.dumps(edit(data)))
    for cmd in (["verify", "--bundle", str(b)], ["info", "--bundle", str(b)], ["generate", "--bundle", str(b), "--prompt", "hi"]):
        _one_error_line(CliRunner().invoke(main, cmd))


def test_deeply_nested_manifest_is_one_error_line(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    (b / B.MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    _one_error_line(CliRunner().invoke(main, ["verify", "--bundle", str(b)]))
    z = tmp_path / "deep.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr(B.MANIFEST, '{"a":' * 50_000 + "1" + "}" * 50_000)
    _one_error_line(CliRunner().invoke(main, ["unpack", str(z), "-o", str(tmp_path / "out")]))


def test_unlisted_program_or_tokenizer_fails_verification(tmp_path):
    b = _small_bundle(tmp_path / "b")
    m = B.read_manifest(b)
    for name in (B.PROGRAM, B.TOKENIZER):
        cut = type(m)(**{**m.__dict__, "files": {k: v for k, v in m.files.items() if k != name}})
        with pytest.raises(EdgespecError, match=f"does not list {name}"):
            B.verify_checksums(b, cut)


# -- checked before loading ---------------------------------------------------------------


def _copy(bundle, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(bundle, d)
    return d


def test_generate_checks_the_program_before_loading_it(tiny_bundle, tmp_path):
    b = _copy(tiny_bundle, tmp_path)
    assert CliRunner().invoke(main, ["generate", "--bundle", str(b), "--prompt", "hi", "--max-new-tokens", "2"]).exit_code == 0
    with open(b / B.PROGRAM, "r+b") as f:  # one flipped byte deep in the weights
        f.seek(-4096, 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 1]))
    res = CliRunner().invoke(main, ["generate", "--bundle", str(b), "--prompt", "hi", "--max-new-tokens", "2"])
    _one_error_line(res)
    assert "model.pte' is corrupt" in res.output


def test_unchanged_files_are_hashed_once(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    b = _small_bundle(tmp_path / "b")
    m = B.read_manifest(b)
    hashed = []
    real = B.sha256_file
    monkeypatch.setattr(B, "sha256_file", lambda p: hashed.append(p.name) or real(p))
    B.verify_checksums(b, m, remembered=True)
    assert sorted(hashed) == sorted(m.files)
    hashed.clear()
    B.verify_checksums(b, m, remembered=True)
    assert hashed == []
    (b / B.PROGRAM).write_bytes(b"programme")  # changed: hashed again, and caught
    with pytest.raises(EdgespecError, match="corrupt"):
        B.verify_checksums(b, m, remembered=True)
    m = B.write_manifest(b, m)
    B.verify_checksums(b, m, remembered=True)
    hashed.clear()
    B.verify_checksums(b, m, remembered=False)  # `edgespec verify`: everything, always
    assert sorted(hashed) == sorted(m.files)


def test_an_unreadable_verification_cache_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "verified").mkdir(parents=True)
    (tmp_path / "cache" / "verified" / "files.json").write_text("{not json")
    b = _small_bundle(tmp_path / "b")
    B.verify_checksums(b, B.read_manifest(b), remembered=True)
    assert json.loads((tmp_path / "cache" / "verified" / "files.json").read_text())
    (tmp_path / "cache" / "verified" / "files.json").unlink()
    (tmp_path / "cache" / "verified" / "files.json").mkdir()  # cannot be written: not kept, no error
    B.verify_checksums(b, B.read_manifest(b), remembered=True)


def test_train_refuses_an_out_dir_of_other_files_before_loading_the_model(tmp_path):
    before = _user_project(tmp_path / "proj")
    res = CliRunner().invoke(main, ["train", "model.source=/nonexistent/x.gguf", f"train.out_dir={tmp_path / 'proj'}"])
    _one_error_line(res)
    assert "train.out_dir" in res.output and "holds files edgespec did not write" in res.output
    assert _contents(tmp_path / "proj") == before


def test_a_tokenizer_file_that_is_not_one_is_one_error_line(tmp_path):
    b = _small_bundle(tmp_path / "b")  # listed and checksummed, but not a tokenizer
    res = CliRunner().invoke(main, ["generate", "--bundle", str(b), "--prompt", "hi", "--no-verify"])
    _one_error_line(res)
    assert "is not a tokenizer.json" in res.output
