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

# One or more characters of every Unicode general category, all long assigned, so that every
# Unicode version (Python's unicodedata, the tokenizer's tables) gives them this category. Cs
# (surrogates) is left out: a lone surrogate has no UTF-8 encoding. Cn uses noncharacters,
# which no Unicode version assigns (an unassigned code point may get a category later).
# Cc includes U+0004, U+0006, U+0013, U+0014, U+0016 and U+001D, whose bytes SmolLM2's
# vocabulary lacks: the Python tokenizer drops them, and the Java one must too.
GENERAL_CATEGORIES = {
    "Lu": "AΩЖ\U0001d400",
    "Ll": "aßж\U0001d41a",
    "Lt": "\u01c5\u1f88",
    "Lm": "\u02b0\u30fc\u3005",
    "Lo": "あא中\u0e01\U00020000",
    "Mn": "\u0301\u0316\u05b7\ufe0f",
    "Mc": "\u0903\u0bbe",
    "Me": "\u20dd\u20e3",
    "Nd": "7٣\uff17\U0001d7d8",
    "Nl": "\u216b\u3007\U00010140",
    "No": "\u00bd\u00b2\u2460",
    "Pc": "_\u203f",
    "Pd": "-\u2014\u301c",
    "Ps": "(\u300c",
    "Pe": ")\u300d",
    "Pi": "\u00ab\u201c",
    "Pf": "\u00bb\u201d",
    "Po": "!\u00bf\u3001",
    "Sm": "+\u2211",
    "Sc": "$\u20ac",
    "Sk": "^\u00b4\U0001f3fd",
    "So": "\u00a9\u2603",
    "Zs": " \u00a0\u1680\u2009\u202f\u205f\u3000",
    "Zl": "\u2028",
    "Zp": "\u2029",
    "Cc": "\x00\x04\x06\x07\x13\x14\x16\x1b\x1d\x7f\x85\x9f",
    "Cf": "\u00ad\u200b\u200d\u2060\ufeff",
    "Co": "\ue000\uf8ff\U000f0000",
    "Cn": "\ufdd0\uffff\U0010ffff",
}

# Unicode whitespace (NBSP, thin space, ideographic space, line/paragraph separators, NEL, ...)
# is `\s` for the Python tokenizer's regex engine but not for OpenJDK's by default; a run that
# mixes it with ASCII spaces, tabs, CR and LF splits differently if the two disagree.
CORPUS += [
    "Bonjour\u00a0! Prix\u00a0: 10\u00a0€, «\u00a0citation\u00a0»",
    "x \u00a0 \u00a0\u00a0  y\u00a0\u00a0.\u00a0",
    "thin\u2009space, 1\u2009000\u2009000 and a narrow\u202fno-break",
    "日本\u3000語\u3000\u3000テキスト\u3000。\u3000",
    "line\u2028separator \u2028\u2028 x\u2029paragraph",
    "next\u0085line \u0085.y \u0085\u0085 z",
    "\t \t\n\r\n \r\r\n\n\t  x\t\t\ny\r \n",
    "a\r\n\r\n  b\n\n\n\tc \t \n",
    " \u00a0\t\u2009\n\u3000\r\u2028\u0085\u1680\u205f\u2029 end",
    "\u00a0\u00a0\u00a0",
    "   \u3000\u3000   ",
    # a space then one of them then a word: a different split, and different ids, in OpenJDK's ASCII `\s`
    *[f"x {w}y, x {w}.y\r\n{w}{w}" for w in "\u00a0\u1680\u2009\u202f\u205f\u3000\u2028\u2029\u0085"],
    # combining marks and emoji ZWJ sequences
    "Z\u0351\u036b\u0343a\u0300\u0316 e\u0301\u0302 क्षि \u1100\u1161\u11a8",
    "👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 👩🏽\u200d💻 1\ufe0f\u20e3 🇫🇷🇯🇵 ❤\ufe0f",
    "emoji after digits 2024👍🏽 and 7\u20e3\u20dd",
    # letters and digits newer than OpenJDK 17's Unicode 13 (Telugu, Arabic, Kawi, Cyrillic
    # modifier letters) and digits Rust's char::is_numeric knows but the regex's \p{N} does not
    "తె\u0c5dలు عرب\u0870\u0871ي x\U00011f04\U00011f05y \U00011f50\U00011f51 \U0001e030 a\U00011de0\U00011de1b \U00016ff4",
    *[f"x{c}y {c} {c}{c}.{c}\n{c}7'{c}s" for c in GENERAL_CATEGORIES.values()],
    " ".join(GENERAL_CATEGORIES.values()),
    "".join(GENERAL_CATEGORIES.values()),
]


UNICODE_CLASSES_JAVA = ANDROID / "core" / "src" / "main" / "java" / "dev" / "edgespec" / "core" / "UnicodeClasses.java"


def python_tokenizer_classes() -> dict[str, list[tuple[int, int]]]:
    """The character classes of the Python tokenizer's pre-tokenizers, measured on the installed
    `tokenizers` (its Oniguruma regex and Rust tables carry their own, newer Unicode version):
    code point ranges of \\p{L}, \\p{N} and \\s in the ByteLevel regex, and of what the Digits
    pre-tokenizer isolates (Rust's char::is_numeric). Each code point c is classified by how
    "a" + c, "1" + c and "!" + c split, in one pre-tokenizer call per class and 32768 code points."""
    from tokenizers import pre_tokenizers as pt

    byte_level = pt.ByteLevel(add_prefix_space=False, use_regex=True)
    digits = pt.Digits(individual_digits=True)
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    found: dict[str, list[int]] = {"LETTER": [], "NUMBER": [], "WHITE_SPACE": [], "NUMERIC": []}

    def pieces(pre, head: str, chunk: list[int]) -> set[tuple[int, int]]:  # offsets of the pieces of head + c + "\n", every c
        return {o for _, o in pre.pre_tokenize_str("".join(f"{head}{chr(c)}\n" for c in chunk))}

    for lo in range(0, len(cps), 1 << 15):
        chunk = cps[lo : lo + (1 << 15)]
        letter, number, other, numeric = (pieces(pre, head, chunk) for pre, head in ((byte_level, "a"), (byte_level, "1"), (byte_level, "!"), (digits, "a")))
        for k, c in enumerate(chunk):
            at = 3 * k
            is_letter, is_number = (at, at + 2) in letter, (at, at + 2) in number
            found["LETTER"] += [c] * is_letter
            found["NUMBER"] += [c] * is_number
            # "!" + c is one piece when c is neither \s, \p{L} nor \p{N}
            found["WHITE_SPACE"] += [c] * ((at, at + 1) in other and not is_letter and not is_number)
            found["NUMERIC"] += [c] * ((at + 1, at + 2) in numeric)
    ranges: dict[str, list[tuple[int, int]]] = {}
    for name, members in found.items():
        rs: list[list[int]] = []
        for c in members:
            if rs and rs[-1][1] == c - 1:
                rs[-1][1] = c
            else:
                rs.append([c, c])
        ranges[name] = [(a, b) for a, b in rs]
    return ranges


def render_unicode_classes(ranges: dict[str, list[tuple[int, int]]]) -> str:
    """UnicodeClasses.java holding `ranges` (see python_tokenizer_classes)."""
    doc = {
        "LETTER": "\\p{L} of the ByteLevel regex.",
        "NUMBER": "\\p{N} of the ByteLevel regex.",
        "WHITE_SPACE": "\\s of the ByteLevel regex: Unicode White_Space (NBSP, U+2009, U+3000, U+2028, NEL, ...).",
        "NUMERIC": "What the Digits pre-tokenizer isolates: Rust's char::is_numeric (Nd, Nl, No).",
    }
    fields = []
    for name, rs in ranges.items():
        words = [f"{a:x}" if a == b else f"{a:x}-{b:x}" for a, b in rs]
        lines, line = [], ""
        for w in words:
            if len(line) + len(w) + 1 > 88:
                lines.append(line)
                line = ""
            line += w + " "
        lines.append(line)
        body = "\n".join(f'          + "{ln}"' for ln in lines)
        fields.append(f'  /** {doc[name]} */\n  static final int[] {name} =\n      parse(\n          ""\n{body});\n')
    return (
        "package dev.edgespec.core;\n\n"
        "/**\n"
        " * The character classes of the Python tokenizer's pre-tokenizers as code point ranges, so that\n"
        " * the Java split does not depend on the platform's Unicode version (OpenJDK 17 has Unicode 13,\n"
        " * Android its ICU's; the Python {@code tokenizers} library's Oniguruma regex and Rust tables are\n"
        " * newer). GENERATED from the installed {@code tokenizers} by\n"
        " * {@code python tests/test_android_core.py --write-unicode-classes}; do not edit. The tests\n"
        " * check it against the Python side.\n"
        " */\n"
        "final class UnicodeClasses {\n"
        "  private UnicodeClasses() {}\n\n" + "\n".join(fields) + "\n"
        "  /** Whether code point cp lies in one of the sorted, disjoint [start, end] pairs of ranges. */\n"
        "  static boolean contains(int[] ranges, int cp) {\n"
        "    int lo = 0, hi = ranges.length / 2 - 1;\n"
        "    while (lo <= hi) {\n"
        "      int mid = (lo + hi) >>> 1;\n"
        "      if (cp < ranges[2 * mid]) hi = mid - 1;\n"
        "      else if (cp > ranges[2 * mid + 1]) lo = mid + 1;\n"
        "      else return true;\n"
        "    }\n"
        "    return false;\n"
        "  }\n\n"
        '  /** "41-5a 61 ..." (hex code points and ranges) as [start, end] pairs. */\n'
        "  private static int[] parse(String text) {\n"
        '    String[] words = text.trim().split(" ");\n'
        "    int[] out = new int[2 * words.length];\n"
        "    for (int k = 0; k < words.length; k++) {\n"
        "      int dash = words[k].indexOf('-');\n"
        "      out[2 * k] = Integer.parseInt(dash < 0 ? words[k] : words[k].substring(0, dash), 16);\n"
        "      out[2 * k + 1] = Integer.parseInt(dash < 0 ? words[k] : words[k].substring(dash + 1), 16);\n"
        "    }\n"
        "    return out;\n"
        "  }\n"
        "}\n"
    )


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
        self.calls.append(
            {
                "method": "forward",
                "tokens": tokens[0].tolist(),
                "pos": int(start_pos),
                "logits_top": [[int(i), float(v)] for v, i in zip(top.values, top.indices)],
            }
        )
        return logits

    def spec_step(self, last, draft, pos, temperature, uniforms, gumbel):
        toks, nxt = self.r.spec_step(last, draft, pos, temperature, uniforms, gumbel)
        self.calls.append(
            {
                "method": "spec_step",
                "last": int(last),
                "draft": draft.flatten().tolist(),
                "pos": int(pos),
                "out_tokens": list(toks),
                "next_draft": nxt.flatten().tolist(),
            }
        )
        return toks, nxt


def record_tokenizer_fixtures(tokenizer, tokenizer_json: Path, out: Path) -> None:
    """tokenizer.json, the Python encodings of CORPUS and the chat template's output (TokenizerTest)."""
    out.mkdir(parents=True, exist_ok=True)
    from tokenizers import Tokenizer as HFTokenizer

    shutil.copy(tokenizer_json, out / "tokenizer.json")
    pre = HFTokenizer.from_file(str(tokenizer_json)).pre_tokenizer
    cases = [
        {
            "text": t,
            "pieces": [p for p, _ in pre.pre_tokenize_str(t)],  # special tokens not split off, as in preTokenizedWords
            "ids": tokenizer.encode(t),
            "decoded": tokenizer.decode(tokenizer.encode(t)),
            "decoded_all": tokenizer.decode(tokenizer.encode(t), skip_special=False),
        }
        for t in CORPUS
    ]
    (out / "tokenizer_cases.json").write_text(json.dumps(cases, ensure_ascii=False))
    users = ["What is the capital of France?", "Écris un haïku 🌸", "Line one\nline two", "Bonjour\u00a0! 日本\u3000語\u2028x"]
    (out / "chat_cases.json").write_text(json.dumps([{"user": u, "text": tokenizer.apply_chat_template(u)} for u in users], ensure_ascii=False))


def record_fixtures(bundle: Path, out: Path, max_new_tokens: int = 24) -> None:
    import dataclasses

    from edgespec.bundle import read_manifest, write_manifest
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.generate import generate
    from edgespec.runtime.session import open_bundle

    out.mkdir(parents=True, exist_ok=True)
    manifest, tokenizer, runner = open_bundle(bundle)
    record_tokenizer_fixtures(tokenizer, bundle / "tokenizer.json", out)

    meta = {"max_seq_len": runner.max_seq_len, "vocab_size": runner.vocab_size, "eos_ids": list(runner.eos_ids)}
    if runner.has_spec:
        meta |= {"depth": runner.depth, "topk": runner.topk, "tree_size": runner.tree_size}
    prompts = ["What is the capital of France?", "Count from one to ten.", "Write a Python function that adds two numbers."]
    looked_up = 0
    # spec_lookup: the hybrid draft (suffix matches of >= 2 tokens first), as bundles decode by default
    lookups = {"spec": 0, "spec_lookup": 2}
    for i, text in enumerate(prompts):
        ids = encode_prompt(tokenizer, text, True)
        for kind in ("spec", "spec_lookup", "ar") if runner.has_spec else ("ar",):
            rec = Recorder(runner)
            kw = dict(max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
            res = generate(rec.forward, ids, **kw, spec=rec, lookup=lookups[kind]) if kind in lookups else generate(rec.forward, ids, **kw)
            fx = {
                "kind": kind,
                "lookup": lookups.get(kind),
                "prompt": ids,
                "max_new_tokens": max_new_tokens,
                "meta": meta,
                "calls": rec.calls,
                "completion": res.completion_ids,
                "stopped_by_eos": res.stopped_by_eos,
                "tokens_per_call": res.tokens_per_call,
            }
            (out / f"replay_{kind}_{i}.json").write_text(json.dumps(fx))
            steps = [c for c in rec.calls if c["method"] == "spec_step"]
            looked_up += kind == "spec_lookup" and any(a["next_draft"] != b["draft"] for a, b in zip(steps, steps[1:]))
    assert not runner.has_spec or looked_up, "no spec_lookup fixture has a call whose draft the suffix match changed"

    # a small checksummed bundle written by the Python bundle code
    b = out / "bundle"
    b.mkdir()
    (b / "model.pte").write_bytes(bytes(range(256)) * 64)
    shutil.copy(bundle / "tokenizer.json", b / "tokenizer.json")
    m = read_manifest(bundle)
    spec = dataclasses.replace(m.speculative, lookup=2) if m.speculative is not None else None
    write_manifest(b, dataclasses.replace(m, methods=("forward", "spec_step"), reports=(), validation=None, speculative=spec))


APP_JVM_TESTS = ANDROID / "app" / "src" / "jvmTest" / "java"  # the app's adapter against the Module stub
JUNIT_CLASSES = {  # simple name -> class name, every *Test of core and of the app's JVM tests
    p.stem: ".".join(p.relative_to(root).with_suffix("").parts)
    for root in (ANDROID / "core" / "src" / "test" / "java", APP_JVM_TESTS)
    for p in sorted(root.rglob("*Test.java"))
}


def run_junit(fixtures: Path, build: Path, tests: list[str] | None = None) -> subprocess.CompletedProcess:
    """Compile android/core (+ the app's ExecuTorch adapter) and run `tests` (default: every *Test)."""
    cp = ":".join(str(j) for j in JARS)
    sources = [str(p) for p in sorted((ANDROID / "core" / "src").rglob("*.java"))]
    sources.append(str(ANDROID / "app" / "src" / "main" / "java" / "dev" / "edgespec" / "app" / "ExecuTorchModel.java"))
    sources += [str(p) for p in sorted(APP_JVM_TESTS.rglob("*.java"))]
    javac = subprocess.run(["javac", "-Xlint:all", "-Werror", "-d", str(build), "-cp", cp, *sources], capture_output=True, text=True)
    assert javac.returncode == 0, javac.stdout + javac.stderr
    if tests is None:
        tests = sorted(JUNIT_CLASSES)
    return subprocess.run(
        ["java", f"-Dedgespec.fixtures={fixtures}", "-cp", f"{build}:{cp}", "org.junit.runner.JUnitCore", *[JUNIT_CLASSES[t] for t in tests]],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_java_core_reproduces_the_python_runtime(fp32_bundle, tmp_path):
    _java_ok()
    record_fixtures(fp32_bundle, tmp_path / "fixtures")
    res = run_junit(tmp_path / "fixtures", tmp_path / "build", [t for t in JUNIT_CLASSES if t != "BatchDecoderTest"])  # (its own test: a batched program)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    m = re.search(r"OK \((\d+) tests\)", res.stdout)
    assert m and int(m.group(1)) >= 11, res.stdout[-2000:]


def test_the_corpus_covers_every_general_category_and_unicode_whitespace():
    import unicodedata

    assert all(unicodedata.category(c) == cat for cat, chars in GENERAL_CATEGORIES.items() for c in chars)
    seen = {unicodedata.category(c) for text in CORPUS for c in text}
    every = {a + b for a, bs in (("L", "ultmo"), ("M", "nce"), ("N", "dlo"), ("P", "cdseifo"), ("S", "mcko"), ("Z", "slp"), ("C", "cfon")) for b in bs}
    assert seen == every  # all but Cs
    # no-break, ogham, thin, narrow no-break, math and ideographic spaces; line and paragraph separators; NEL
    assert set("\u00a0\u1680\u2009\u202f\u205f\u3000\u2028\u2029\u0085\t\r\n") <= set("".join(CORPUS))


@pytest.mark.slow
def test_java_tokenizer_matches_python_on_the_unicode_corpus(tmp_path):
    """TokenizerTest alone, on the real SmolLM2 tokenizer (no .pte needed): every CORPUS string
    must encode to the same ids and decode to the same text in Java as in Python."""
    _java_ok()
    from edgespec.models.load import read_source, tokenizer_of

    src = read_source("smollm2-135m-instruct", 256)
    (tmp_path / "tokenizer.json").write_text(src.tokenizer_json)
    record_tokenizer_fixtures(tokenizer_of(src), tmp_path / "tokenizer.json", tmp_path / "fixtures")
    res = run_junit(tmp_path / "fixtures", tmp_path / "build", ["TokenizerTest"])
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert re.search(r"OK \(2 tests\)", res.stdout), res.stdout[-2000:]


def test_java_adaptive_speculation_decides_as_the_python_policy(tmp_path):
    """AdaptiveSpeculationTest alone (no model, no .pte): the scenarios of tests/test_adaptive.py,
    with the same expected decisions."""
    _java_ok()
    res = run_junit(tmp_path / "fixtures", tmp_path / "build", ["AdaptiveSpeculationTest"])
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert re.search(r"OK \(7 tests\)", res.stdout), res.stdout[-2000:]


def test_program_contract_mirrors_the_python_constants():
    from edgespec import bundle
    from edgespec.export import constants as C

    java = (ANDROID / "core/src/main/java/dev/edgespec/core/ProgramContract.java").read_text()
    strings = dict(re.findall(r'public static final String (\w+) = "([^"]+)";', java))
    python = {k: v for k, v in vars(C).items() if k.isupper() and isinstance(v, str)}
    assert strings == python
    assert int(re.search(r"SCHEMA_VERSION = (\d+);", java).group(1)) == bundle.SCHEMA_VERSION


def test_java_app_explains_a_program_its_runtime_cannot_load(tmp_path):
    """ExecuTorchModelTest alone (no model, no .pte): the app's adapter over the Module stub
    turns a failed load into the bundle's missing operators and the two ways forward."""
    _java_ok()
    res = run_junit(tmp_path / "fixtures", tmp_path / "build", ["ExecuTorchModelTest"])
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert re.search(r"OK \(4 tests\)", res.stdout), res.stdout[-2000:]


def record_batched_fixture(bundle: Path, out: Path) -> None:
    """replay_batched.json: edgespec.runtime.batch_decode over a real batched program's
    decode_rows (greedy; prompts of mixed lengths, two sharing a prefix so a slot reuses it),
    every call's inputs and the top logits of its emitted rows, and the completions."""
    import torch

    from edgespec.runtime.batch_decode import decode_batch
    from edgespec.runtime.session import open_bundle

    _, _, runner = open_bundle(bundle)
    calls = []

    def decode_rows(tokens, slots, positions, emit):
        logits = runner.decode_rows(tokens, slots, positions, emit)
        tops = [[[int(i), float(row[i])] for i in torch.topk(row, 8).indices] for row in logits]
        calls.append({"tokens": tokens[0].tolist(), "slots": slots.tolist(), "positions": positions.tolist(), "emit": emit.tolist(), "logits_top": tops})
        return logits

    base = [ord(c) for c in "the same long shared beginning "]
    prompts = [
        [ord(c) for c in "hello"],
        base + [ord("a")],
        [ord(c) for c in "a much longer prompt than a call can carry at once"],
        base + [ord("b")],
        [7],
        [ord(c) for c in "xyz"],
    ]
    slots, call_rows, max_new = 2, runner.call_tokens + runner.batch_slots, 9
    requests = [(i, p, {}) for i, p in enumerate(prompts)]
    done = dict(
        decode_batch(decode_rows, requests, slots=slots, call_rows=call_rows, max_new_tokens=max_new, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
    )
    meta = {"max_seq_len": runner.max_seq_len, "vocab_size": runner.vocab_size, "eos_ids": list(runner.eos_ids), "batch_slots": runner.batch_slots}
    fixture = {"meta": meta, "prompts": prompts, "slots": slots, "call_rows": call_rows, "max_new_tokens": max_new, "calls": calls}
    fixture["completions"] = [done[i].completion_ids for i in range(len(prompts))]
    out.mkdir(parents=True, exist_ok=True)
    (out / "replay_batched.json").write_text(json.dumps(fixture))


def test_java_batch_decoder_follows_the_python_schedule(tiny_batched_bundle, tmp_path):
    """BatchDecoderTest alone: the Android core's batched decoder replays a trace recorded from
    the Python scheduler on a real batched program, call for call, to the same completions."""
    _java_ok()
    record_batched_fixture(tiny_batched_bundle, tmp_path / "fixtures")
    res = run_junit(tmp_path / "fixtures", tmp_path / "build", ["BatchDecoderTest"])
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert re.search(r"OK \(1 test\)", res.stdout), res.stdout[-2000:]


def test_java_stock_namespaces_mirror_the_manifest():
    from edgespec.manifest import STOCK_NAMESPACES

    java = (ANDROID / "core/src/main/java/dev/edgespec/core/RuntimeNeeds.java").read_text()
    listed = re.search(r"STOCK_NAMESPACES =\s*Collections\.unmodifiableList\(Arrays\.asList\(([^)]*)\)", java).group(1)
    assert tuple(re.findall(r'"([^"]+)"', listed)) == STOCK_NAMESPACES


@pytest.mark.slow  # a minute: every code point through four pre-tokenizer passes
def test_java_unicode_classes_are_the_python_tokenizers():
    """UnicodeClasses.java equals what the installed `tokenizers` does; after a `tokenizers`
    upgrade that changes them: python tests/test_android_core.py --write-unicode-classes"""
    ranges = python_tokenizer_classes()
    assert ranges["WHITE_SPACE"] == [
        (0x09, 0x0D),
        (0x20, 0x20),
        (0x85, 0x85),
        (0xA0, 0xA0),
        (0x1680, 0x1680),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        (0x202F, 0x202F),
        (0x205F, 0x205F),
        (0x3000, 0x3000),
    ]
    assert UNICODE_CLASSES_JAVA.read_text() == render_unicode_classes(ranges), "run: python tests/test_android_core.py --write-unicode-classes"


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write-unicode-classes"]:
        UNICODE_CLASSES_JAVA.write_text(render_unicode_classes(python_tokenizer_classes()))
        print(f"wrote {UNICODE_CLASSES_JAVA}")
    else:
        sys.exit("usage: python tests/test_android_core.py --write-unicode-classes")
