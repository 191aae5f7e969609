"""Varied text from what is installed here, for checks that want many scripts and styles
(tokenizer agreement): no data copied into the project."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path


def varied_lines(per_source: int) -> dict[str, list[str]]:
    """Up to `per_source` texts per source, by source name (sources whose data is missing here
    are left out, apt's Translation files excepted: their absence is an error naming the fix):

        debian-en/de/fr  apt's Translation files: package synopses (and, every other one, the long description)
        cjk              CPython's test data in Chinese, Japanese and Korean (test/cjkencodings/*-utf8.txt)
        prose, chat      edgespec's held-out text (the chat's messages one by one)
        code             edgespec's own Python source (indentation, operators)
    """
    from edgespec.corpus.validation_sets import debian_descriptions

    out: dict[str, list[str]] = {}
    for lang in ("en", "de", "fr"):
        items = sorted(debian_descriptions(lang).values())
        step = max(1, len(items) // per_source)
        out[f"debian-{lang}"] = [s if i % 2 else f"{s}\n{long}" for i, (s, long) in enumerate(items[::step][:per_source])]
    cjk = Path(sysconfig.get_paths()["stdlib"]) / "test" / "cjkencodings"
    lines = [line for p in sorted(cjk.glob("*-utf8.txt")) for line in p.read_text("utf-8").splitlines() if line.strip() and not line.isascii()]
    out["cjk"] = lines[:: max(1, len(lines) // per_source)][:per_source]
    heldout = Path(__file__).resolve().parent / "heldout"
    out["prose"] = [p for p in heldout.joinpath("prose.txt").read_text().split("\n\n") if p.strip()][:per_source]
    chat = json.loads(heldout.joinpath("chat.json").read_text())
    out["chat"] = [m["content"] for conv in chat for m in (conv["messages"] if isinstance(conv, dict) else conv)][:per_source]
    code = [line for p in sorted((heldout.parent.parent / "runtime").glob("*.py")) for line in p.read_text().splitlines() if line.strip()]
    out["code"] = code[:: max(1, len(code) // per_source)][:per_source]
    return {k: v for k, v in out.items() if v}
