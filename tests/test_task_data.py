"""The task fine-tune's gold data (edgespec.corpus.task_data) and its scoring (BLEU, bootstrap
intervals, task_scores in edgespec.harness.metrics)."""

import math
import random
import re
from collections import Counter

import pytest

import edgespec.harness.metrics as M
from edgespec.errors import EdgespecError

# --- BLEU and intervals (hermetic) ------------------------------------------------------------


def test_bleu_hand_computed():
    # "the cat sat on the mat" vs "the cat is on the mat", 6 tokens each (BP = 1): clipped
    # matches 5/6, 3/5, 1/4 and 0/3 -> smoothed 1/(2 * 3); (5/6 * 3/5 * 1/4 * 1/6)^(1/4) = 48^(-1/4)
    assert M.bleu(["the cat sat on the mat"], ["the cat is on the mat"]) == pytest.approx(48**-0.25, abs=1e-12)
    # every precision 1, 5 of 6 reference tokens: BP = exp(1 - 6/5)
    assert M.bleu(["the cat sat on the"], ["the cat sat on the mat"]) == pytest.approx(math.exp(-0.2), abs=1e-12)
    # corpus level: statistics are summed before the precisions are taken
    assert M.bleu(["a b c d", "x"], ["a b c d", "y"]) == pytest.approx((4 / 5 * 3 / 3 * 2 / 2 * 1 / 1) ** 0.25 * 1.0, abs=1e-12)
    assert M.bleu(["Hallo, Welt."], ["Hallo, Welt."]) == 1.0
    assert M.bleu_tokens("Hallo, Welt. 3.5 x-y 1-2") == ["Hallo", ",", "Welt", ".", "3.5", "x-y", "1", "-", "2"]
    assert M.bleu(["ab"], ["cd"]) == 0.0 and M.bleu([""], ["a b"]) == 0.0 and M.bleu(["a b"], ["a b c d e"]) == 0.0


def test_bleu_matches_sacrebleu():
    from sacrebleu.metrics import BLEU

    rng = random.Random(0)
    words = "the cat sat on a mat Bibliothek für SVG-Dateien zur Darstellung, bibliothèque de ( ) 3.5 x . 1-2 &amp;".split()
    text = lambda: " ".join(rng.choices(words, k=rng.randint(0, 14)))  # noqa: E731
    for _ in range(200):
        n = rng.randint(1, 6)
        hyps, refs = [text() for _ in range(n)], [text() or "x" for _ in range(n)]
        assert M.bleu(hyps, refs) == pytest.approx(BLEU().corpus_score(hyps, [refs]).score / 100, abs=1e-9), (hyps, refs)


def test_bootstrap_interval():
    values = [1.0] * 30 + [0.0] * 70
    mean, lo, hi = M.bootstrap_interval(values)
    assert mean == 0.3 and lo < 0.3 < hi and (lo, hi) == M.bootstrap_interval(values)[1:]  # fixed seed
    assert 0.19 < lo < 0.23 and 0.37 < hi < 0.41  # the normal approximation: 0.3 -/+ 1.96 * 0.046
    # 10 clusters of identical items: the interval of 10 independent items, wider
    _, clo, chi = M.bootstrap_interval(values, groups=[i // 10 for i in range(100)])
    assert chi - clo > 1.5 * (hi - lo)
    assert M.bootstrap_interval([1.0] * 5) == (1.0, 1.0, 1.0)


# --- the datasets (read apt's Translation files, Chinook, SmolLM2's tokenizer) -------------------


@pytest.fixture(scope="module")
def T():
    from edgespec.corpus import task_data

    return task_data


def _english(ex) -> str:
    return ex.prompt.split("\n\n", 1)[1]


@pytest.mark.slow
def test_translation_splits_are_disjoint(T):
    train, held, dev = (T.task_examples("translation_de", s) for s in ("train", "heldout", "dev"))
    assert len(dev) >= 100 and not {x.group for x in dev} & {x.group for x in train}  # a dev split of unseen families
    assert len(held) >= 200 and len(train) >= 2000
    assert T.split_overlap("translation_de") == {"source": 0, "prompt": 0, "reference": 0, "group": 0}
    md5 = lambda xs: {x.source.removeprefix("debian/") for x in xs}  # noqa: E731
    assert not md5(train) & md5(held) and len(md5(held)) == len(held)
    assert not {_english(x) for x in train} & {_english(x) for x in held}
    # no shared sentence either (families), and one held-out description per family
    sentences = lambda xs: {s for x in xs for s in T.long_sentences(_english(x))}  # noqa: E731
    assert not sentences(train) & sentences(held)
    assert len({x.group for x in held}) == len(held)


@pytest.mark.slow
def test_translation_leaves_the_validation_slice_out(T):
    from edgespec.corpus.validation_sets import debian_descriptions, split_of

    en, de = debian_descriptions("en"), debian_descriptions("de")
    validation_texts = {long for (pkg, _), (_, long) in en.items() if split_of(pkg) == "validation"}
    by_md5: dict[str, set[str]] = {}
    for pkg, md5 in de:
        by_md5.setdefault(md5, set()).add(pkg)
    for split in T.TASK_SPLITS:
        for x in T.task_examples("translation_de", split):
            md5 = x.source.removeprefix("debian/")
            slice_ = "train" if split == "dev" else split  # dev families are drawn from the train slice
            assert {split_of(p) for p in by_md5[md5] if (p, md5) in en} == {slice_}, x.id  # the stream prompts' slices
            assert _english(x) not in validation_texts
            assert x.reference == de[(min(by_md5[md5]), md5)][1]
    # nor any validation suite prompt's text: its long descriptions (summarization) and synopses (translation)
    from edgespec.harness.suites import SUITES

    shown = " ".join(e.prompt for name in ("summarization", "translation") for e in SUITES[name].build(200, 0))
    for x in T.task_examples("translation_de", "heldout") + T.task_examples("translation_de", "train", 500):
        assert _english(x) not in shown


@pytest.mark.slow
def test_translation_answers_within_token_bounds(T):
    count = T.count_tokens()
    lo, hi = T.ANSWER_TOKENS
    for split in T.TASK_SPLITS:
        assert all(lo <= count(x.reference) <= hi for x in T.task_examples("translation_de", split))


@pytest.mark.slow
def test_sql_templates_and_splits(T):
    names = [t.name for t in T.SQL_TEMPLATES]
    assert len(names) >= 40 and len(set(names)) == len(names)
    assert all(len(t.questions) >= 3 for t in T.SQL_TEMPLATES)
    held = {n for n in names if T.template_split(n) == "heldout"}
    dev = {n for n in names if T.template_split(n) == "dev"}
    assert 0.15 * len(names) <= len(held) <= 0.35 * len(names) and 0.04 * len(names) <= len(dev) <= 0.2 * len(names)
    train_ex, dev_ex, held_ex, fill_ex = (T.task_examples("sql_chinook", s) for s in T.TASK_SPLITS)
    assert len(held_ex) >= 200 and len(train_ex) >= 2000 and len(dev_ex) >= 100 and len(fill_ex) >= 150
    # the paper's protocol: new fillings of training templates, 3 of each with >= 10 fillings
    assert {x.group for x in fill_ex} <= {x.group for x in train_ex} and len({x.group for x in fill_ex}) >= 50
    assert max(Counter(x.group for x in fill_ex).values()) == T.SQL_HELD_FILLINGS
    assert {x.group.removeprefix("template/") for x in held_ex} == held
    assert {x.group.removeprefix("template/") for x in dev_ex} == dev
    groups = [{x.group for x in xs} for xs in (train_ex, dev_ex, held_ex)]
    assert not groups[0] & groups[1] and not groups[0] & groups[2] and not groups[1] & groups[2]
    assert T.split_overlap("sql_chinook") == {"source": 0, "prompt": 0, "reference": 0, "group": 0}
    # every table of the schema is asked about
    from edgespec.corpus.sqldb import SCHEMA

    tables = re.findall(r"CREATE TABLE (\w+)", SCHEMA)
    assert all(any(re.search(rf"\b{t}\b", tpl.sql) for tpl in T.SQL_TEMPLATES) for t in tables)


@pytest.mark.slow
def test_every_sql_reference_executes_non_empty(T):
    from edgespec.corpus.sqldb import execution_match, extract_sql, run_query

    for t in T.SQL_TEMPLATES:
        got = T.fillings(t)
        assert len(got) >= min(3, len(t.questions) if not t.pools else 3), t.name
        for question, sql in got[:5]:
            rows = run_query(sql)
            assert 0 < len(rows) <= T.SQL_MAX_ROWS and rows != [(0,)] and rows != [(None,)], (t.name, question)
            assert execution_match(extract_sql(f"```sql\n{sql};\n```"), sql)
    for x in T.task_examples("sql_chinook", "heldout"):
        assert T._answerable(run_query(x.reference)), x.id


@pytest.mark.slow
def test_sql_top_answers_are_unique(T):
    """ORDER BY ... LIMIT k references: the k-th and (k+1)-th rows differ in the sort key, so
    the answer does not depend on how ties are broken."""
    from edgespec.corpus.sqldb import run_query

    for t in T.SQL_TEMPLATES:
        for _, sql in T.fillings(t)[:30] if "LIMIT" in t.sql else ():
            key, k = re.search(r"ORDER BY (.*) (?:ASC|DESC) LIMIT (\d+)$", sql).groups()
            rows = run_query(re.sub(r"^SELECT .*? FROM", f"SELECT {key} FROM", sql).replace(f"LIMIT {k}", f"LIMIT {int(k) + 1}"))
            assert len(rows) <= int(k) or rows[int(k) - 1] != rows[int(k)], sql


@pytest.mark.slow
def test_sql_questions_are_not_the_validation_suites(T):
    from edgespec.corpus.validation_sets import sql

    validation = {e.source for e in sql(512, 0)}
    assert not validation & {x.source for s in T.TASK_SPLITS for x in T.task_examples("sql_chinook", s)}
    assert all(x.prompt.startswith("SQLite database:\nCREATE TABLE") for x in T.task_examples("sql_chinook", "heldout", 5))


@pytest.mark.slow
def test_sql_prompts_show_the_tables_their_reference_reads(T):
    """As in sql-create-context (the paper's SqlContext): each question comes with the CREATE
    TABLE statements of the tables its reference reads, every column of each."""
    from edgespec.corpus.sqldb import SCHEMA, SUITE_SCHEMA, tables_read

    whole = dict(re.findall(r"CREATE TABLE (\w+) (.*);", SCHEMA))
    assert len(whole) == 11
    for x in T.task_examples("sql_chinook", "train", 300) + T.task_examples("sql_chinook", "heldout", 100):
        shown = dict(re.findall(r"CREATE TABLE (\w+) (.*);", x.prompt))
        assert tuple(shown) == tables_read(x.reference) and shown and all(whole[t] == cols for t, cols in shown.items()), x.id
    assert tables_read("SELECT a FROM track JOIN album ON 1 WHERE x IN (SELECT y FROM genre)") == ("album", "genre", "track")
    # the validation suite's prompt is what it was: 6 tables, a subset of the database's columns
    suite = dict(re.findall(r"CREATE TABLE (\w+) \((.*)\);", SUITE_SCHEMA))
    assert list(suite) == ["artist", "album", "genre", "track", "customer", "invoice"]
    assert all(set(cols.split(", ")) <= set(whole[t][1:-1].split(", ")) for t, cols in suite.items())


@pytest.mark.slow
def test_deterministic_for_a_seed(T):
    for task in T.FINETUNE_TASKS:
        a = T.task_examples(task, "heldout", 50, seed=3)
        assert a == T.task_examples(task, "heldout", 50, seed=3)
        assert a[:20] == T.task_examples(task, "heldout", 20, seed=3)  # a larger n only adds
        assert a != T.task_examples(task, "heldout", 50, seed=4)
        assert sorted(x.id for x in T.task_examples(task, "train", seed=1)) == sorted(x.id for x in T.task_examples(task, "train", seed=2))
    assert T._sql_splits() == T._sql_splits() == T._split_cache("sql_chinook")  # a fresh build is the same
    assert T._translation_splits() == T._split_cache("translation_de")
    with pytest.raises(EdgespecError, match="unknown task"):
        T.task_examples("poetry", "train")
    with pytest.raises(EdgespecError, match="unknown split"):
        T.task_examples("sql_chinook", "validation")


@pytest.mark.slow
def test_task_scores(T):
    for task in T.FINETUNE_TASKS:
        ex = T.task_examples(task, "heldout", 40)
        gold = M.task_scores(ex, [x.reference for x in ex], samples=200)
        assert list(gold) == list(T.FINETUNE_TASKS[task].metrics) and all(v == pytest.approx((1.0, 1.0, 1.0)) for v in gold.values())
        wrong = M.task_scores(ex, [ex[(i + 1) % len(ex)].reference for i in range(len(ex))], samples=200)
        assert all(lo <= s <= hi and s < 0.5 for s, lo, hi in wrong.values()), wrong
    with pytest.raises(ValueError):
        M.task_scores(ex, [])


@pytest.mark.slow
def test_training_reads_a_tasks_train_split_by_name():
    """train.data: task:NAME trains on the task's gold train split, prompts in the chat template."""
    from edgespec.corpus.task_data import task_examples
    from edgespec.models.load import read_source, tokenizer_of
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.speculative.train_data import load_examples

    tok = tokenizer_of(read_source("smollm2-135m-instruct", 512))
    got = load_examples("task:sql_chinook", tok, 400, chat_template=True)  # the longest train pair: 396 tokens
    gold = task_examples("sql_chinook", "train")
    assert len(got) == len(gold)
    first = encode_prompt(tok, gold[0].prompt, True)
    assert got[0].n_prompt == len(first) and got[0].tokens == first + tok.encode(gold[0].reference) + [tok.eos_ids[0]]  # it learns to stop
    with pytest.raises(EdgespecError, match="unknown task"):
        load_examples("task:nope", tok, 400, chat_template=True)
    # the dev split, scored at each checkpoint (train.dev_items): its first n items
    dev = load_examples("task:sql_chinook", tok, 416, chat_template=True, split="dev", n=5)
    assert [e.tokens[e.n_prompt :] for e in dev] == [tok.encode(x.reference) + [tok.eos_ids[0]] for x in task_examples("sql_chinook", "dev", 5)]


def test_a_task_suite_names_its_held_out_split():
    """task:NAME is the held-out split (units never trained on); task:NAME:heldout_fillings the
    new fillings of the training templates; another split is an error naming the known ones."""
    from edgespec.config import load_recipe
    from edgespec.config.lm_sections import parse_task_suite

    assert parse_task_suite("task:sql_chinook") == ("sql_chinook", "heldout")
    assert parse_task_suite("task:sql_chinook:heldout_fillings") == ("sql_chinook", "heldout_fillings")
    with pytest.raises(EdgespecError, match="unknown held-out split 'train'"):
        parse_task_suite("task:sql_chinook:train")
    assert load_recipe(None, ["validate.suites=[task:sql_chinook:heldout_fillings, task:sql_chinook]"]).validate.suites[0].endswith("fillings")
    with pytest.raises(EdgespecError, match=r"validate.suites\[0\]'.*heldout_fillings"):
        load_recipe(None, ["validate.suites=[task:sql_chinook:train]"])


def test_sql_templates_are_read_from_their_data_file(tmp_path):
    """The templates and pools are data (corpus/data/sql_chinook.yaml), read into typed records."""
    import edgespec.corpus.task_data as T

    f = tmp_path / "t.yaml"
    f.write_text(
        "pools:\n  genre:\n    slots: [genre]\n    query: SELECT name FROM genre\n"
        "templates:\n- name: count\n  questions: ['How many {genre}?']\n  sql: \"SELECT COUNT(*) FROM genre WHERE name = '{genre}'\"\n  pools: [genre]\n"
        "- name: all\n  questions: [List genres.]\n  sql: SELECT name FROM genre\n"
    )
    pools, templates = T._read_sql_data(f)
    assert pools == {"genre": (("genre",), "SELECT name FROM genre")}
    assert templates == (
        T.SqlTemplate("count", ("How many {genre}?",), "SELECT COUNT(*) FROM genre WHERE name = '{genre}'", ("genre",)),
        T.SqlTemplate("all", ("List genres.",), "SELECT name FROM genre"),
    )
    assert T.SQL_DATA.is_file() and len(T.SQL_TEMPLATES) >= 100 and all(p in T.SQL_POOLS for t in T.SQL_TEMPLATES for p in t.pools)


@pytest.mark.slow
def test_a_task_program_is_tuned_on_its_tasks_dev_items(T):
    """`edgespec tune` measures acceptance on what the bundle will decode: a task fine-tune's
    bundle on its task's dev items (never trained on), any other bundle on the built-in suites'
    held-out prompts."""
    from edgespec.harness.tune import tuning_prompts

    task = tuning_prompts("task:sql_chinook", 5)
    assert task == [x.prompt for x in T.task_examples("sql_chinook", "dev", 5)]
    assert not set(task) & {x.prompt for x in T.task_examples("sql_chinook", "train")}
    general = tuning_prompts("data/distill/train.jsonl", 5)
    assert len(general) == 5 and not set(general) & set(task)
