"""Resident memory and encode speed of the `tokenizers` library's tokenizer against
`edgespec.models.compact_tokenizer.CompactTokenizer`, for SmolLM2-135M-Instruct's and Gemma 3
270M's tokenizer.json (as edgespec builds them from the embedded GGUF files).

Each (tokenizer, implementation) is loaded in its own fresh subprocess: `load_mb` is the VmRSS
after loading less the VmRSS just before (modules already imported; `import_mb` is what the
imports took), `peak_mb` the VmHWM during loading less that same start, `after_encode_mb` the
VmRSS delta once the corpus has been encoded (caches filled). Encode time is per 1,000
characters over `edgespec.corpus.varied_text` (Debian descriptions in English, German and
French, CJK, prose, chat, Python source): `cold` the first pass, `warm` the best of the
following passes. Every text's ids of both are compared (`same_ids`).

    python bench/tokenizer_memory.py > docs/results/tokenizer_memory.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("smollm2-135m-instruct", "gemma-3-270m")


def _status(field: str) -> float:
    """A /proc/self/status field in MB."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def child(path: str, impl: str, texts_file: str, passes: int) -> dict:
    """One measurement, in this (fresh) process."""
    start = _status("VmRSS")
    if impl == "library":
        from tokenizers import Tokenizer

        def load():
            return Tokenizer.from_file(path)

        def encode(tk, text):
            return tk.encode(text, add_special_tokens=False).ids
    else:
        import numpy  # noqa: F401  (imported by the module when it builds a tokenizer: counted with the imports)
        import regex  # noqa: F401

        from edgespec.models.compact_tokenizer import CompactTokenizer

        def load():
            return CompactTokenizer.from_file(path)

        def encode(tk, text):
            return tk.encode(text)

    before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here
    t0 = time.perf_counter()
    tk = load()
    load_s = time.perf_counter() - t0
    loaded, peak = _status("VmRSS"), _status("VmHWM")
    texts = json.loads(Path(texts_file).read_text())
    chars = sum(map(len, texts))
    times, ids = [], None
    for _ in range(passes):
        t0 = time.perf_counter()
        out = [encode(tk, t) for t in texts]
        times.append(time.perf_counter() - t0)
        ids = ids or out
    return {
        "import_mb": round(before - start, 1),
        "load_mb": round(loaded - before, 1),
        "peak_mb": round(peak - before, 1),
        "after_encode_mb": round(_status("VmRSS") - before, 1),
        "load_s": round(load_s, 3),
        "encode_ms_per_1k_chars": {"cold": round(1e6 * times[0] / chars, 3), "warm": round(1e6 * min(times[1:] or times) / chars, 3)},
        "ids": ids,
    }


def tokenizer_files(out: Path, paths: list[str]) -> dict[str, Path]:
    """name -> tokenizer.json: the files given, else built from the embedded GGUF files."""
    if paths:
        return {Path(p).stem: Path(p) for p in paths}
    from gguf import GGUFReader

    from edgespec.models.gguf import tokenizer_json
    from edgespec.models.load import embedded_path

    files = {}
    for name in MODELS:
        gguf = embedded_path(name)
        files[name] = out / f"{name}.json"
        files[name].write_text(tokenizer_json(GGUFReader(gguf), gguf))
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer-json", nargs="*", default=[], help="tokenizer.json files (default: SmolLM2's and Gemma 3's, from the embedded GGUFs)")
    ap.add_argument("--per-source", type=int, default=60, help="texts per varied_text source")
    ap.add_argument("--passes", type=int, default=4, help="encode passes over the corpus")
    ap.add_argument("--child", nargs=3, metavar=("PATH", "IMPL", "TEXTS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child, a.passes)))
        return
    from edgespec.corpus.varied_text import varied_lines

    texts = [t for lines in varied_lines(a.per_source).values() for t in lines]
    report = {"python": sys.version.split()[0], "tokenizers": _version("tokenizers"), "texts": len(texts), "chars": sum(map(len, texts)), "tokenizer_json": {}}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts))
        for name, path in tokenizer_files(Path(tmp), a.tokenizer_json).items():
            row = {"file_mb": round(path.stat().st_size / 2**20, 1)}
            for impl in ("library", "compact"):
                cmd = [sys.executable, __file__, "--child", str(path), impl, str(texts_file), "--passes", str(a.passes)]
                row[impl] = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
                print(f"[tokenizer_memory] {name} {impl}: {row[impl]['load_mb']} MB", file=sys.stderr)
            theirs, ours = row["library"].pop("ids"), row["compact"].pop("ids")
            row["same_ids"] = f"{sum(a == b for a, b in zip(theirs, ours))}/{len(theirs)}"
            report["tokenizer_json"][name] = row
    print(json.dumps(report, indent=1))


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    main()
