"""edgespec's tokenizer for a GGUF file against the file's own tokenizer in llama.cpp
(`llama-tokenize`), line by line on varied text read from what is installed here:

    debian-en/de/fr  apt's Translation files: package synopses and long descriptions
    cjk              CPython's test data in Chinese, Japanese and Korean (test/cjkencodings/*-utf8.txt)
    prose, chat      edgespec's held-out text (the chat in plain lines)
    code             edgespec's own Python source (indentation, operators, tabs made of spaces)

Every line is tokenized by both (no BOS; control tokens parsed, as llama-tokenize does by
default and edgespec's prompts need) and the ids compared exactly. Prints JSON: per source the
lines, the agreeing ones, and the first disagreements with both tokenizations. llama.cpp is
built outside the project (from the `llama-cpp-python` sdist's vendored source, target
llama-tokenize).

    python bench/tokenizer_agreement.py --gguf gemma-3-270m-q4_k_m.gguf --llama-tokenize /path/llama-tokenize \\
        > docs/results/tokenizer_agreement_gemma3.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def sources(per_source: int) -> dict[str, list[str]]:
    from edgespec.corpus.validation_sets import debian_descriptions

    out: dict[str, list[str]] = {}
    for lang in ("en", "de", "fr"):
        items = sorted(debian_descriptions(lang).values())
        step = max(1, len(items) // per_source)
        out[f"debian-{lang}"] = [s if i % 2 else f"{s}\n{long}" for i, (s, long) in enumerate(items[::step][:per_source])]
    cjk = Path(sysconfig.get_paths()["stdlib"]) / "test" / "cjkencodings"
    lines = [line for p in sorted(cjk.glob("*-utf8.txt")) for line in p.read_text("utf-8").splitlines() if line.strip() and not line.isascii()]
    out["cjk"] = lines[:: max(1, len(lines) // per_source)][:per_source]
    heldout = Path(__file__).resolve().parent.parent / "sdk" / "edgespec" / "corpus" / "heldout"
    out["prose"] = [p for p in heldout.joinpath("prose.txt").read_text().split("\n\n") if p.strip()][:per_source]
    chat = json.loads(heldout.joinpath("chat.json").read_text())
    out["chat"] = [m["content"] for conv in chat for m in (conv["messages"] if isinstance(conv, dict) else conv)][:per_source]
    code = [line for p in sorted((heldout.parent.parent / "runtime").glob("*.py")) for line in p.read_text().splitlines() if line.strip()]
    out["code"] = code[:: max(1, len(code) // per_source)][:per_source]
    return {k: v for k, v in out.items() if v}


def llama_ids(exe: str, gguf: str, text: str) -> list[int]:
    cmd = [exe, "-m", gguf, "--stdin", "--ids", "--no-bos", "--no-escape", "--log-disable"]
    done = subprocess.run(cmd, input=text.encode(), capture_output=True, check=True)
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama-tokenize", required=True)
    ap.add_argument("--per-source", type=int, default=60, help="lines per source")
    ap.add_argument("--show", type=int, default=5, help="disagreements shown per source")
    a = ap.parse_args()

    from gguf import GGUFReader

    from edgespec.models.gguf import tokenizer_json
    from edgespec.models.tokenizer import Tokenizer

    reader = GGUFReader(a.gguf)
    tokenizer = Tokenizer.from_json(tokenizer_json(reader, a.gguf))
    report = {"gguf": Path(a.gguf).name, "tokenizer": str(reader.fields["tokenizer.ggml.model"].contents()), "sources": {}}
    total = agree = 0
    with ThreadPoolExecutor(2) as pool:
        for name, lines in sources(a.per_source).items():
            theirs = list(pool.map(lambda t: llama_ids(a.llama_tokenize, a.gguf, t), lines))
            ours = [tokenizer.encode_continuation(t) for t in lines]
            same = [o == t for o, t in zip(ours, theirs)]
            diffs = [{"text": line, "edgespec": o, "llama.cpp": t} for line, o, t, s in zip(lines, ours, theirs, same) if not s]
            report["sources"][name] = {"lines": len(lines), "agree": sum(same), "tokens": sum(map(len, theirs)), "disagreements": diffs[: a.show]}
            total, agree = total + len(lines), agree + sum(same)
    report["lines"], report["agree"] = total, agree
    print(json.dumps(report, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
