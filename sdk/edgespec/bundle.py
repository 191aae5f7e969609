"""Bundles: a directory with the program, the tokenizer and a checksummed manifest.

A bundle is staged in a temporary sibling directory and renamed into place only when
complete, so a failed export never leaves a half-written bundle behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edgespec.errors import EdgespecError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
PROGRAM = "model.pte"
TOKENIZER = "tokenizer.json"
STREAMS = "streams.pt"  # trained stream weights of a speculative bundle (edgespec tune reads them)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def staged_bundle(outdir: str | Path, overwrite: bool = True) -> Iterator[Path]:
    """Yield a staging directory; on success it atomically becomes `outdir`.

    On any exception the staging directory is removed and `outdir` is left untouched.
    """
    out = Path(outdir).resolve()
    if out.exists() and not out.is_dir():
        raise EdgespecError(f"output '{out}' exists and is not a directory")
    if out.exists() and not overwrite:
        raise EdgespecError(f"output '{out}' already exists")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_stages(out)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
    except OSError as e:
        raise EdgespecError(f"cannot write to output directory '{out.parent}': {e.strerror}") from None
    try:
        yield stage
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
        stage.rename(out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _remove_stale_stages(out: Path) -> None:
    """Staging (`.NAME.partial-PID-*`) and replaced (`.NAME.old-PID`) directories of processes
    that no longer run: what a killed export leaves beside the bundle."""
    for p in out.parent.glob(f".{out.name}.*"):
        kind, _, rest = p.name[len(out.name) + 2 :].partition("-")
        pid = rest.split("-", 1)[0]
        if kind in ("partial", "old") and pid.isdigit() and p.is_dir() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_manifest(bundle_dir: Path, fields: dict[str, Any]) -> dict[str, Any]:
    """Write manifest.json with the SHA-256 of every other file in the bundle."""
    files = {
        p.relative_to(bundle_dir).as_posix(): {"sha256": sha256_file(p), "bytes": p.stat().st_size}
        for p in sorted(bundle_dir.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    manifest = {"schema_version": SCHEMA_VERSION, **fields, "files": files}
    (bundle_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(bundle_dir: str | Path) -> dict[str, Any]:
    d = Path(bundle_dir)
    if not d.is_dir():
        raise EdgespecError(f"bundle '{d}' not found (expected a directory made by `edgespec export`)")
    mf = d / MANIFEST
    if not mf.is_file():
        raise EdgespecError(f"bundle '{d}' has no {MANIFEST}")
    try:
        manifest = json.loads(mf.read_text())
    except json.JSONDecodeError as e:
        raise EdgespecError(f"bundle '{d}': {MANIFEST} is not valid JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise EdgespecError(f"bundle '{d}': {MANIFEST} must hold a JSON object, not {type(manifest).__name__}")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise EdgespecError(f"bundle '{d}': schema_version {version!r} is not supported (expected {SCHEMA_VERSION})")
    _check_manifest(manifest, f"bundle '{d}': {MANIFEST}")
    return manifest


def _check_manifest(m: dict[str, Any], where: str) -> None:
    """The shape the readers rely on: EdgespecError naming the first field that is off."""

    def need(ok: bool, field: str, what: str) -> None:
        if not ok:
            raise EdgespecError(f"{where}: '{field}' must be {what}")

    is_int = lambda x: isinstance(x, int) and not isinstance(x, bool)  # noqa: E731
    files = m.get("files", {})
    need(isinstance(files, dict), "files", "an object of file name -> {sha256}")
    for name, entry in files.items():
        safe = name and not name.startswith(("/", "\\")) and ".." not in Path(name).parts and "\x00" not in name
        need(safe, f"files.{name}", "a plain relative file name")
        need(isinstance(entry, dict) and isinstance(entry.get("sha256"), str), f"files.{name}", "an object with a sha256 string")
    need(isinstance(m.get("methods", []), list) and all(isinstance(x, str) for x in m.get("methods", [])), "methods", "a list of names")
    if m.get("task") == "asr":  # a speech bundle: no tokenizer, the phoneme list in tokens.json
        need(isinstance(m.get("ctc"), dict), "ctc", "an object with temperature and blank_bias")
        need(isinstance(m.get("model"), dict) and isinstance(m["model"].get("args"), dict), "model.args", "an object")
        return
    model, tok = m.get("model"), m.get("tokenizer")
    need(isinstance(model, dict) and is_int(model.get("vocab_size")), "model.vocab_size", "an integer")
    need(isinstance(tok, dict) and isinstance(tok.get("file"), str), "tokenizer.file", "a file name")
    need(isinstance(tok.get("eos_ids"), list) and all(is_int(x) for x in tok["eos_ids"]), "tokenizer.eos_ids", "a list of integers")
    spec = m.get("speculative")
    if spec is not None:
        need(isinstance(spec, dict), "speculative", "an object")
        for key in ("tree_branching", "tree_parents"):
            need(isinstance(spec.get(key), list) and all(is_int(x) for x in spec[key]), f"speculative.{key}", "a list of integers")


def verify_checksums(bundle_dir: str | Path, manifest: dict[str, Any]) -> None:
    """Raise if any file listed in the manifest is missing or differs."""
    d = Path(bundle_dir)
    for name, entry in manifest.get("files", {}).items():
        p = d / name
        if not p.is_file():
            raise EdgespecError(f"bundle '{d}': file '{name}' listed in the manifest is missing")
        if sha256_file(p) != entry["sha256"]:
            raise EdgespecError(f"bundle '{d}': file '{name}' is corrupt (SHA-256 does not match the manifest)")


def stream_weights(bundle_dir: str | Path, manifest: dict[str, Any]) -> Path:
    """The stream weights a speculative bundle carries (its manifest's `speculative.weights`)."""
    d = Path(bundle_dir)
    spec = manifest.get("speculative")
    if spec is None:
        raise EdgespecError(f"bundle '{d}' has no speculative methods; export it with trained streams (recipe streams.weights)")
    name = spec.get("weights")
    if name not in manifest.get("files", {}) or not (d / name).is_file():
        raise EdgespecError(f"bundle '{d}' does not carry its stream weights ({STREAMS}; older bundles only name the recipe's file): re-export it")
    return d / name


def package_zip(bundle_dir: str | Path, out: str | Path) -> Path:
    """The bundle as one zip (manifest first, files stored uncompressed so the program can be
    memory-mapped after unpacking), written to a temporary name and renamed."""
    import zipfile

    d = Path(bundle_dir)
    manifest = read_manifest(d)
    verify_checksums(d, manifest)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
            z.write(d / MANIFEST, MANIFEST)
            for name in manifest["files"]:
                z.write(d / name, name)
        tmp.replace(out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise EdgespecError(f"cannot write '{out}': {e.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


MAX_UNPACKED_BYTES = 16 << 30  # a bundle is a few hundred MB; refuse archives that claim more


def unpack_zip(zip_path: str | Path, outdir: str | Path, overwrite: bool = False, max_bytes: int = MAX_UNPACKED_BYTES) -> dict[str, Any]:
    """Unpack a zip written by `package_zip` into the bundle directory `outdir` and return its
    manifest. Refused, with nothing written: members other than the manifest and the files it
    lists (so no absolute or `..` names, no duplicates), symbolic links or other special
    entries, encrypted members, archives that declare more than `max_bytes`, members that
    inflate past their declared size, and files whose SHA-256 differs from the manifest's. The
    files are staged next to `outdir` and renamed into place when all of them check out."""
    import stat
    import zipfile

    src = Path(zip_path)
    if not src.is_file():
        raise EdgespecError(f"bundle zip '{src}' not found")
    try:
        z = zipfile.ZipFile(src)
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError) as e:
        raise EdgespecError(f"'{src}' is not a readable zip file ({e})") from None
    with z:
        infos = z.infolist()
        names = [i.filename for i in infos]
        if MANIFEST not in names:
            raise EdgespecError(f"'{src}' holds no {MANIFEST}: not a bundle zip (make one with `edgespec package`)")
        if len(set(names)) != len(names):
            raise EdgespecError(f"'{src}' holds a name twice; refusing an ambiguous archive")
        for info in infos:
            mode = info.external_attr >> 16
            if info.is_dir() or stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # 0: no Unix type recorded
                raise EdgespecError(f"'{src}': member '{info.filename}' is not a regular file (a link or a directory); refusing it")
            if info.flag_bits & 0x1:
                raise EdgespecError(f"'{src}': member '{info.filename}' is encrypted; bundle zips are not")
        total = sum(i.file_size for i in infos)
        if total > max_bytes:
            raise EdgespecError(f"'{src}' declares {total:,} bytes unpacked, more than the limit of {max_bytes:,}")
        try:
            manifest = json.loads(_read_member(z, z.getinfo(MANIFEST), 1 << 20).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise EdgespecError(f"'{src}': {MANIFEST} is not valid JSON ({e})") from None
        if not isinstance(manifest, dict):
            raise EdgespecError(f"'{src}': {MANIFEST} must be a JSON object")
        if manifest.get("schema_version") != SCHEMA_VERSION:
            raise EdgespecError(f"'{src}': schema_version {manifest.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})")
        _check_manifest(manifest, f"'{src}'")
        listed = set(manifest["files"])
        extra = [n for n in names if n != MANIFEST and n not in listed]
        if extra:
            raise EdgespecError(f"'{src}' holds files its manifest does not list: {', '.join(sorted(extra)[:5])}")
        missing = sorted(listed - set(names))
        if missing:
            raise EdgespecError(f"'{src}' lacks files its manifest lists: {', '.join(missing[:5])}")
        with staged_bundle(outdir, overwrite=overwrite) as stage:
            for info in infos:
                target = stage / info.filename  # names are the manifest's, checked to stay inside
                if not target.resolve().is_relative_to(stage.resolve()) or target.resolve() == stage.resolve():
                    raise EdgespecError(f"'{src}': member '{info.filename}' would land outside the bundle; refusing it")
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    with open(target, "wb") as f:
                        _copy_member(z, info, f)
                except OSError as e:
                    raise EdgespecError(f"cannot write '{Path(outdir)}': {e.strerror}") from None
            verify_checksums(stage, manifest)
    return manifest


def _read_member(z, info, limit: int) -> bytes:
    if info.file_size > limit:
        raise EdgespecError(f"zip member '{info.filename}' is too large ({info.file_size:,} bytes)")
    import io

    buf = io.BytesIO()
    _copy_member(z, info, buf)
    return buf.getvalue()


def _copy_member(z, info, out) -> None:
    """Copy a member, stopping at its declared size (an archive may lie about it)."""
    import zipfile
    import zlib

    def corrupt(e: Exception) -> EdgespecError:
        return EdgespecError(f"zip member '{info.filename}' is corrupt ({e})")

    left = info.file_size
    try:
        f = z.open(info)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as e:
        raise corrupt(e) from None
    with f:
        while True:
            try:  # reading errors are the archive's; writing errors (out.write) are the caller's
                chunk = f.read(min(1 << 20, left + 1))
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as e:
                raise corrupt(e) from None
            if not chunk:
                return
            left -= len(chunk)
            if left < 0:
                raise EdgespecError(f"zip member '{info.filename}' inflates past its declared size {info.file_size:,}; refusing it")
            out.write(chunk)
