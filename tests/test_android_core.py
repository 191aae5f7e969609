"""The Android app's plain-Java decoding core, tested on the JVM against the Python side.

This module records fixtures from the Python runtime — tokenizer encodings of a unicode
corpus, the chat template, a checksummed bundle, and greedy decoding traces (every
`forward`/`spec_step` call with its inputs and outputs) from a real `.pte` — then compiles
android/core (and the app's ExecuTorch adapter against signature stubs) with javac and runs
the JUnit tests, which must reproduce the Python tokens exactly.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ANDROID = ROOT / "android"
JARS = [Path("/usr/share/java/junit4.jar"), Path("/usr/share/java/hamcrest-core.jar")]

CORPUS = [
    "Hello, world!",
    "The year 2024 had 366 days; π ≈ 3.14159.",
    "Größenwahn über alles — naïve café, déjà vu, façade.",
    "日本語のテキストと中文字符，还有한국어.",
    "Emoji: 🚀🔥👍🏽 and a family 👨‍👩‍👧.",
    "مرحبا بالعالم",
    "Привет, мир! Ёлка.",
    "tabs\tand  double  spaces\n\nnew lines   \n",
    "don't I'll we've they're it's",
    "def f(x):\n    return x**2  # comment\n",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "e\u0301 combining accent, zero\u200bwidth",
    "12345678901234567890",
    "   leading and trailing   ",
]


def _java_ok():
    missing = [str(j) for j in JARS if not j.is_file()]
    if shutil.which("javac") is None or missing:
        pytest.fail(f"the JVM tests need javac (JDK 17) and JUnit 4 ({', '.join(missing) or 'javac'} missing): apt-get install junit4 default-jdk-headless")


class Recorder:
    """SpecMethods over a ProgramRunner that records every call (inputs and outputs)."""

    def __init__(self, runner):
        self.r = runner
        self.calls = []
        if runner.has_spec:
            self.depth, self.topk, self.tree_size = runner.depth, runner.topk, runner.tree_size
        self.vocab_size = runner.vocab_size

    def forward(self, tokens, start_pos):
        logits = self.r.forward(tokens, start_pos)
        top = logits.topk(8)
        self.calls.append({"method": "forward", "tokens": tokens[0].tolist(), "pos": int(start_pos), "logits_top": [[int(i), float(v)] for v, i in zip(top.values, top.indices)]})
        return logits

    def spec_step(self, last, draft, pos, temperature, uniforms, gumbel):
        toks, nxt = self.r.spec_step(last, draft, pos, temperature, uniforms, gumbel)
        self.calls.append({"method": "spec_step", "last": int(last), "draft": draft.flatten().tolist(), "pos": int(pos), "out_tokens": list(toks), "next_draft": nxt.flatten().tolist()})
        return toks, nxt


def record_fixtures(bundle: Path, out: Path, max_new_tokens: int = 24) -> None:
    from edgespec.bundle import write_manifest
    from edgespec.runtime.generate import generate, generate_spec
    from edgespec.runtime.session import open_bundle, prompt_ids

    out.mkdir(parents=True, exist_ok=True)
    manifest, tokenizer, runner = open_bundle(bundle)
    shutil.copy(bundle / "tokenizer.json", out / "tokenizer.json")
    cases = [{"text": t, "ids": tokenizer.encode(t), "decoded": tokenizer.decode(tokenizer.encode(t)), "decoded_all": tokenizer.decode(tokenizer.encode(t), skip_special=False)} for t in CORPUS]
    (out / "tokenizer_cases.json").write_text(json.dumps(cases, ensure_ascii=False))
    users = ["What is the capital of France?", "Écris un haïku 🌸", "Line one\nline two"]
    (out / "chat_cases.json").write_text(json.dumps([{"user": u, "text": tokenizer.apply_chat_template(u)} for u in users], ensure_ascii=False))

    meta = {"max_seq_len": runner.max_seq_len, "vocab_size": runner.vocab_size, "eos_ids": list(runner.eos_ids)}
    if runner.has_spec:
        meta |= {"depth": runner.depth, "topk": runner.topk, "tree_size": runner.tree_size}
    prompts = ["What is the capital of France?", "Count from one to ten.", "Write a Python function that adds two numbers."]
    for i, text in enumerate(prompts):
        ids = prompt_ids(tokenizer, text)
        for kind in (("spec", "ar") if runner.has_spec else ("ar",)):
            rec = Recorder(runner)
            kw = dict(max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
            res = generate_spec(rec, ids, **kw) if kind == "spec" else generate(rec.forward, ids, **kw)
            fx = {"kind": kind, "prompt": ids, "max_new_tokens": max_new_tokens, "meta": meta, "calls": rec.calls, "completion": res.completion_ids, "stopped_by_eos": res.stopped_by_eos, "tokens_per_call": res.tokens_per_call}
            (out / f"replay_{kind}_{i}.json").write_text(json.dumps(fx))

    # a small checksummed bundle written by the Python bundle code
    b = out / "bundle"
    b.mkdir()
    (b / "model.pte").write_bytes(bytes(range(256)) * 64)
    shutil.copy(bundle / "tokenizer.json", b / "tokenizer.json")
    write_manifest(b, {"precision": "fp32", "methods": ["forward", "spec_step"], "tokenizer": {"file": "tokenizer.json", "eos_ids": list(runner.eos_ids)}})


def run_junit(fixtures: Path, build: Path) -> subprocess.CompletedProcess:
    cp = ":".join(str(j) for j in JARS)
    sources = [str(p) for p in sorted((ANDROID / "core" / "src").rglob("*.java"))]
    sources.append(str(ANDROID / "app" / "src" / "main" / "java" / "dev" / "edgespec" / "app" / "ExecuTorchModel.java"))
    javac = subprocess.run(["javac", "-Xlint:all", "-Werror", "-d", str(build), "-cp", cp, *sources], capture_output=True, text=True)
    assert javac.returncode == 0, javac.stdout + javac.stderr
    tests = sorted(p.stem for p in (ANDROID / "core" / "src" / "test" / "java").rglob("*Test.java"))
    return subprocess.run(
        ["java", f"-Dedgespec.fixtures={fixtures}", "-cp", f"{build}:{cp}", "org.junit.runner.JUnitCore", *[f"dev.edgespec.core.{t}" for t in tests]],
        capture_output=True, text=True, timeout=600,
    )


@pytest.mark.integration
def test_java_core_reproduces_the_python_runtime(fp32_bundle, tmp_path):
    _java_ok()
    record_fixtures(fp32_bundle, tmp_path / "fixtures")
    res = run_junit(tmp_path / "fixtures", tmp_path / "build")
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    m = re.search(r"OK \((\d+) tests\)", res.stdout)
    assert m and int(m.group(1)) >= 9, res.stdout[-2000:]


def test_program_contract_mirrors_the_python_constants():
    from edgespec import bundle
    from edgespec.export import constants as C

    java = (ANDROID / "core/src/main/java/dev/edgespec/core/ProgramContract.java").read_text()
    strings = dict(re.findall(r'public static final String (\w+) = "([^"]+)";', java))
    python = {k: v for k, v in vars(C).items() if k.isupper() and isinstance(v, str)}
    assert strings == python
    assert int(re.search(r"SCHEMA_VERSION = (\d+);", java).group(1)) == bundle.SCHEMA_VERSION
