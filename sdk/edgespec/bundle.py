"""Bundles: a directory with the program, the tokenizer and a checksummed manifest.

A bundle is staged in a temporary sibling directory and renamed into place only when
complete, so a failed export never leaves a half-written bundle behind, and a killed one
never loses the bundle it was replacing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edgespec.errors import EdgespecError
from edgespec.host import process_alive
from edgespec.manifest import LAYOUT, FileEntry, Manifest, RuntimeNeeds, parse_manifest
from edgespec.manifest import SCHEMA_VERSION as SCHEMA_VERSION  # readers check it beside the file names
from edgespec.output_dir import listing, renamed_into_place

MANIFEST = LAYOUT.manifest
PROGRAM = LAYOUT.program
TOKENIZER = LAYOUT.tokenizer


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def staged_bundle(outdir: str | Path, overwrite: bool = True) -> Iterator[Path]:
    """Yield a staging directory; on success it becomes `outdir` (`_replace_dir`).

    On any exception the staging directory is removed and `outdir` is left untouched; a kill
    at any point leaves `outdir` as it was or restorable by the next export's cleanup.
    """
    out = check_output(outdir, overwrite)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
    except OSError as e:
        raise EdgespecError(f"cannot write to output directory '{out.parent}': {e.strerror}") from None
    try:
        yield stage
        _replace_dir(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def check_output(outdir: str | Path, overwrite: bool = True) -> Path:
    """The absolute bundle path `outdir`, once it is known that a bundle may be written there:
    nothing is there, or (`overwrite`) an empty directory or a bundle (`check_replaceable`).
    Callers run it before slow work; `staged_bundle` runs it again."""
    out = Path(outdir).resolve()
    try:
        if out.parent.is_dir():
            _remove_stale_stages(out)  # first: it may put back the bundle a killed export had moved aside
    except OSError as e:
        raise EdgespecError(f"cannot write to output directory '{out.parent}': {e.strerror}") from None
    if out.exists() and not out.is_dir():
        raise EdgespecError(f"output '{out}' exists and is not a directory")
    if out.exists() and not overwrite:
        raise EdgespecError(f"output '{out}' already exists (--overwrite replaces a bundle there)")
    if out.exists():
        check_replaceable(out)
    return out


def check_replaceable(out: Path) -> None:
    """Raise unless the existing directory `out` may be replaced: it is empty, or an edgespec
    bundle (its manifest parses) holding nothing but its manifest's files. Anything else is the
    user's, and a bundle is written elsewhere."""
    try:
        if not any(out.iterdir()):
            return
    except OSError as e:
        raise EdgespecError(f"cannot read output directory '{out}': {e.strerror}") from None
    way_out = "nothing was written: choose a new or empty directory (edgespec replaces only a bundle it wrote)"
    try:
        manifest = read_manifest(out)
    except EdgespecError:
        found = listing(e.name for e in out.iterdir())
        raise EdgespecError(f"output '{out}' exists and is not an edgespec bundle (it holds {found}); {way_out}") from None
    unlisted = [name for name in _tree_names(out) if name != MANIFEST and name not in manifest.files]
    if unlisted:
        raise EdgespecError(f"output '{out}' is a bundle but also holds files its manifest does not list ({listing(unlisted)}); {way_out}")


def _tree_names(root: Path) -> list[str]:
    """Every non-directory under `root` (links included, never followed), relative, with '/'."""
    names = []
    for top, dirs, files in os.walk(root):
        rel = Path(top).relative_to(root)
        names += [(rel / f).as_posix() for f in files]
        names += [(rel / d).as_posix() for d in dirs if (Path(top) / d).is_symlink()]
    return names


def _replace_dir(new: Path, out: Path) -> None:
    """Rename directory `new` to `out`, replacing the one there. Where the OS swaps two names in
    one step (Linux renameat2 RENAME_EXCHANGE), `out` names the old or the new bundle at every
    instant. Elsewhere the old one is first renamed `.NAME.old-PID`: a kill before the second
    rename leaves it there, and the next export's `_remove_stale_stages` renames it back."""
    if out.exists() and _exchange(new, out):
        shutil.rmtree(new, ignore_errors=True)  # the old bundle now
        return
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
    try:
        new.rename(out)
    except BaseException:
        if old is not None:
            old.rename(out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names of two existing paths in one step (Linux renameat2 RENAME_EXCHANGE);
    False, with nothing changed, where the C library or the file system cannot."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not glibc >= 2.28 (macOS, musl, Windows)
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _remove_stale_stages(out: Path) -> None:
    """What killed exports left beside the bundle, of processes that no longer run: staging
    directories (`.NAME.partial-PID-*`) are removed; a replaced bundle (`.NAME.old-PID`) is
    renamed back to NAME when a kill between the two renames left NAME missing, else removed."""
    for p in sorted(out.parent.glob(f".{out.name}.*")):
        kind, _, rest = p.name[len(out.name) + 2 :].partition("-")
        pid = rest.split("-", 1)[0]
        if kind not in ("partial", "old") or not pid.isdigit() or not p.is_dir() or process_alive(int(pid)):
            continue
        if kind == "old" and not out.exists():
            p.rename(out)
        else:
            shutil.rmtree(p, ignore_errors=True)


def write_manifest(bundle_dir: Path, manifest: Manifest) -> Manifest:
    """Write manifest.json: `manifest` with the SHA-256 and size of every other file in the
    bundle. Returns what was written."""
    files = {
        p.relative_to(bundle_dir).as_posix(): FileEntry(sha256_file(p), p.stat().st_size)
        for p in sorted(bundle_dir.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    manifest = dataclasses.replace(manifest, files=files)
    (bundle_dir / MANIFEST).write_text(json.dumps(manifest.to_dict(), indent=2) + "\n")
    return manifest


def read_manifest(bundle_dir: str | Path) -> Manifest:
    """The typed manifest of a bundle directory (edgespec.manifest); EdgespecError naming what
    is missing or off."""
    d = Path(bundle_dir)
    if not d.is_dir():
        raise EdgespecError(f"bundle '{d}' not found (expected a directory made by `edgespec export`)")
    mf = d / MANIFEST
    if not mf.is_file():
        raise EdgespecError(f"bundle '{d}' has no {MANIFEST}")
    try:
        data = json.loads(mf.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise EdgespecError(f"bundle '{d}': {MANIFEST} is not valid JSON ({_reason(e)})") from None
    except OSError as e:
        raise EdgespecError(f"bundle '{d}': cannot read {MANIFEST}: {e.strerror}") from None
    return parse_manifest(data, f"bundle '{d}': {MANIFEST}")


def _reason(e: Exception) -> str:
    return "nested too deeply" if isinstance(e, RecursionError) else str(e)


def verify_checksums(bundle_dir: str | Path, manifest: Manifest, remembered: bool = False) -> None:
    """Raise if a file the bundle's runtime reads is not in the manifest (an unlisted file
    cannot be checked), or a listed file is missing or its SHA-256 differs. `remembered`: a
    file unchanged since this machine last hashed it at the same path (`VerifiedFiles`) is not
    hashed again: what opening a bundle does; `edgespec verify` hashes everything."""
    d = Path(bundle_dir)
    unlisted = [n for n in manifest.needed_files() if n not in manifest.files]
    if unlisted:
        raise EdgespecError(f"bundle '{d}': {MANIFEST} does not list {listing(unlisted)}, so it cannot be checked; re-export the bundle")
    seen = VerifiedFiles.load() if remembered else None
    for name, entry in manifest.files.items():
        p = d / name
        if not p.is_file():
            raise EdgespecError(f"bundle '{d}': file '{name}' listed in the manifest is missing")
        if seen is not None and seen.holds(p, entry.sha256):
            continue
        if sha256_file(p) != entry.sha256:
            raise EdgespecError(f"bundle '{d}': file '{name}' is corrupt (SHA-256 does not match the manifest)")
        if seen is not None:
            seen.add(p, entry.sha256)
    if seen is not None:
        seen.save()


class VerifiedFiles:
    """Files this machine hashed and found as their manifest says, by absolute path, with the
    size, modification and status-change times and inode they had then
    (``$EDGESPEC_CACHE/verified/files.json``). A file that still has all of them is taken as
    unchanged: the same test `make` and rsync rely on, with the status-change time, which no
    program can set back, beside the modification time. A cache that cannot be read is empty;
    one that cannot be written is not kept."""

    LIMIT = 256  # entries kept, the newest

    def __init__(self, path: Path, entries: dict[str, list]):
        self.path, self.entries = path, entries

    @classmethod
    def load(cls) -> VerifiedFiles:
        from edgespec.host import cache_dir

        path = cache_dir("verified") / "files.json"
        try:
            entries = json.loads(path.read_text())
            if not isinstance(entries, dict):
                entries = {}
        except (OSError, ValueError, RecursionError):
            entries = {}
        return cls(path, entries)

    @staticmethod
    def _identity(p: Path, sha256: str) -> list:
        st = p.stat()
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, sha256]

    def holds(self, p: Path, sha256: str) -> bool:
        return self.entries.get(str(p.resolve())) == self._identity(p, sha256)

    def add(self, p: Path, sha256: str) -> None:
        key = str(p.resolve())
        self.entries.pop(key, None)
        self.entries[key] = self._identity(p, sha256)

    def save(self) -> None:
        entries = dict(list(self.entries.items())[-self.LIMIT :])
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with renamed_into_place(self.path, f".{self.path.name}.", ".tmp") as tmp:
                tmp.write_text(json.dumps(entries))


def drafter_weights(bundle_dir: str | Path, manifest: Manifest) -> Path:
    """The drafter weights a speculative bundle carries (its manifest's `speculative.weights`)."""
    d = Path(bundle_dir)
    spec = getattr(manifest, "speculative", None)
    if spec is None:
        raise EdgespecError(f"bundle '{d}' has no speculative methods; export it with a trained drafter (recipe drafter.weights)")
    if spec.weights not in manifest.files or not (d / spec.weights).is_file():
        raise EdgespecError(f"bundle '{d}' does not carry its drafter weights ({LAYOUT.drafter}; older bundles only name the recipe's file): re-export it")
    return d / spec.weights


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
            for name in manifest.files:
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


def unpack_zip(zip_path: str | Path, outdir: str | Path, overwrite: bool = False, max_bytes: int = MAX_UNPACKED_BYTES) -> Manifest:
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
            data = json.loads(_read_member(z, z.getinfo(MANIFEST), 1 << 20).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise EdgespecError(f"'{src}': {MANIFEST} is not valid JSON ({_reason(e)})") from None
        manifest = parse_manifest(data, f"'{src}'")
        listed = set(manifest.files)
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


def runtime_needs(program: bytes) -> RuntimeNeeds:
    """The operators and delegates of a serialized program (`.pte` bytes), from its flatbuffer
    (EdgespecError: not a program)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    try:
        plans = deserialize_pte_binary(program).program.execution_plan
    except Exception as e:
        raise EdgespecError(f"the program is not an ExecuTorch program that can be read ({type(e).__name__}: {e})") from None
    ops = {f"{o.name}.{o.overload}" if o.overload else o.name for plan in plans for o in plan.operators}
    return RuntimeNeeds(operators=tuple(sorted(ops)), delegates=tuple(sorted({d.id for plan in plans for d in plan.delegates})))
