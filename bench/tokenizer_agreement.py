"""edgespec's tokenizer for a GGUF file against the file's own tokenizer in llama.cpp
(`llama-tokenize`), line by line on varied text read from what is installed here
(`edgespec.corpus.varied_text`: Debian descriptions in English, German and French, CPython's
Chinese/Japanese/Korean test text, edgespec's held-out prose and chat, Python source).

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


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

    from edgespec.corpus.varied_text import varied_lines
    from edgespec.models.gguf import tokenizer_json
    from edgespec.models.tokenizer import Tokenizer

    reader = GGUFReader(a.gguf)
    tokenizer = Tokenizer.from_json(tokenizer_json(reader, a.gguf))
    report = {"gguf": Path(a.gguf).name, "tokenizer": str(reader.fields["tokenizer.ggml.model"].contents()), "sources": {}}
    total = agree = 0
    with ThreadPoolExecutor(2) as pool:
        for name, lines in varied_lines(a.per_source).items():
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
