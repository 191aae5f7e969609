"""Bundle zips: packing round trip, hostile archives refused with nothing written, fuzzed bytes."""

import json
import os
import stat
import zipfile

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgespec import bundle as B
from edgespec.cli import main
from edgespec.errors import EdgespecError
from manifests import tiny_manifest


def _bundle(tmp_path, name="b"):
    out = tmp_path / name
    with B.staged_bundle(out) as stage:
        (stage / B.PROGRAM).write_bytes(b"\x00program" * 100)
        (stage / B.TOKENIZER).write_text('{"model": {}}')
        B.write_manifest(stage, tiny_manifest())
    return out


def _leftovers(parent, keep):
    return sorted(p.name for p in parent.iterdir() if p.name not in keep)


def test_package_then_unpack_gives_the_same_bundle(tmp_path):
    src = _bundle(tmp_path)
    z = B.package_zip(src, tmp_path / "b.zip")
    m = B.unpack_zip(z, tmp_path / "u")
    assert m == B.read_manifest(tmp_path / "u")
    for name in [B.MANIFEST, *m.files]:
        assert (tmp_path / "u" / name).read_bytes() == (src / name).read_bytes()
    with pytest.raises(EdgespecError, match="already exists"):
        B.unpack_zip(z, tmp_path / "u")
    B.unpack_zip(z, tmp_path / "u", overwrite=True)
    res = CliRunner().invoke(main, ["unpack", str(z), "-o", str(tmp_path / "v")])
    assert res.exit_code == 0 and "SHA-256 match" in res.output


def _hostile(tmp_path, members, manifest_files=None, name="h.zip"):
    """A zip with the manifest (listing manifest_files, default: the members' names) and members:
    (ZipInfo or name, bytes)."""
    src = _bundle(tmp_path, "src")
    m = B.read_manifest(src).to_dict()
    if manifest_files is not None:
        m["files"] = manifest_files
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(B.MANIFEST, json.dumps(m))
        for info, data in members:
            z.writestr(info, data)
    return path


def _link(name):
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def _sha(data):
    import hashlib

    return {"sha256": hashlib.sha256(data).hexdigest()}


@pytest.mark.parametrize(
    "case, match",
    [
        ("traversal", "plain relative file name"),
        ("absolute", "plain relative file name"),
        ("unlisted", "does not list"),
        ("missing", "lacks files"),
        ("symlink", "not a regular file"),
        ("directory", "not a regular file"),
        ("duplicate", "twice"),
        ("corrupt", "corrupt"),
        ("no_manifest", "no manifest.json"),
        ("bomb", "declares"),
    ],
)
def test_hostile_zip_is_refused_and_nothing_is_written(tmp_path, case, match):
    data = b"x" * 64
    cases = {
        "traversal": lambda: _hostile(tmp_path, [("../evil", data)], {"../evil": _sha(data)}),
        "absolute": lambda: _hostile(tmp_path, [("/tmp/evil", data)], {"/tmp/evil": _sha(data)}),
        "unlisted": lambda: _hostile(tmp_path, [("model.pte", data), ("extra.bin", data)], {"model.pte": _sha(data)}),
        "missing": lambda: _hostile(tmp_path, [], {"model.pte": _sha(data)}),
        "symlink": lambda: _hostile(tmp_path, [(_link("model.pte"), b"/etc/passwd")], {"model.pte": _sha(b"/etc/passwd")}),
        "directory": lambda: _hostile(tmp_path, [("model.pte/", b"")], {"model.pte": _sha(b"")}),
        "duplicate": lambda: _hostile(tmp_path, [("model.pte", data), ("model.pte", data)], {"model.pte": _sha(data)}),
        "corrupt": lambda: _hostile(tmp_path, [("model.pte", data), ("tokenizer.json", data)], {"model.pte": _sha(b"other"), "tokenizer.json": _sha(data)}),
        "no_manifest": lambda: _zip_without_manifest(tmp_path),
        "bomb": lambda: _hostile(tmp_path, [("model.pte", b"\x00" * (1 << 20))], {"model.pte": _sha(b"\x00" * (1 << 20))}),
    }
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name
        path = cases[case]()
    before = _leftovers(tmp_path, set())
    with pytest.raises(EdgespecError, match=match):
        B.unpack_zip(path, tmp_path / "out", max_bytes=1 << 19 if case == "bomb" else B.MAX_UNPACKED_BYTES)
    assert _leftovers(tmp_path, set()) == before  # no out/, no staging directory
    assert not (tmp_path.parent / "evil").exists()


def _zip_without_manifest(tmp_path):
    path = tmp_path / "n.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("model.pte", b"x")
    return path


@settings(max_examples=int(os.environ.get("EDGESPEC_FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_zip_bytes_unpack_verified_or_fail_with_one_error_line(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("fz")
    good = B.package_zip(_bundle(tmp), tmp / "b.zip").read_bytes()
    raw = bytearray(good)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    path = tmp / "f.zip"
    path.write_bytes(bytes(raw))
    res = CliRunner().invoke(main, ["unpack", str(path), "-o", str(tmp / "out")])
    if res.exit_code == 0:  # a mutation the format tolerates: the files still match the manifest
        m = B.read_manifest(tmp / "out")
        B.verify_checksums(tmp / "out", m)
    else:
        assert res.exit_code == 2 and res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
        assert not (tmp / "out").exists()
    assert not [p for p in tmp.iterdir() if p.name.startswith(".out.partial")]
