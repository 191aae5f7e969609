"""Validation suites: the built-in task datasets (`edgespec.corpus.validation_sets`: data that installed
packages ship, with their metrics) and user suites from JSONL files.

A user suite is a JSONL file: `prompt`, `reference`, optional `context`, `metric`.
"""

from __future__ import annotations

from pathlib import Path

from edgespec.config.lm_sections import TASK_SUITE_PREFIX, parse_task_suite
from edgespec.corpus.example import Example
from edgespec.corpus.validation_sets import SUITES, Suite
from edgespec.errors import EdgespecError

__all__ = ["SUITES", "Example", "Suite", "load_suite", "suite_source", "task_suite", "user_suite"]


def user_suite(path: str | Path, n: int | None = None) -> list[Example]:
    """Examples from a JSONL file: `prompt`, `reference`, optional `context` (prepended to the
    prompt), `metric` (one of edgespec.harness.metrics.METRICS; default rouge_l), `max_new_tokens`."""
    from edgespec.corpus.prompts import iter_jsonl
    from edgespec.harness.metrics import METRICS

    name = Path(path).stem
    out = []
    for line, obj in iter_jsonl(path):
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or not isinstance(obj.get("reference"), str):
            raise EdgespecError(f"{path}:{line}: expected a JSON object with string fields 'prompt' and 'reference'")
        metric = obj.get("metric", "rouge_l")
        if metric not in METRICS:
            raise EdgespecError(f"{path}:{line}: unknown metric {metric!r} (known: {', '.join(METRICS)})")
        prompt = f"Context:\n{obj['context']}\n\n{obj['prompt']}" if obj.get("context") else obj["prompt"]
        out.append(Example(f"{name}/{obj.get('id', line)}", name, prompt, obj["reference"], metric, int(obj.get("max_new_tokens", 64))))
    if not out:
        raise EdgespecError(f"user suite '{path}' has no examples")
    return out[:n] if n else out


def task_suite(name: str, n: int, seed: int = 0) -> list[Example]:
    """A held-out split of a fine-tune task (edgespec.corpus.task_data; suite `name`:
    ``task:NAME[:SPLIT]``, `parse_task_suite`) as a suite: its first n items shuffled by seed,
    the task's answer budget, each example's split unit (template or family) in
    `extra["group"]` (its intervals resample whole groups)."""
    from edgespec.corpus.task_data import FINETUNE_TASKS, task_examples

    task, split = parse_task_suite(name)
    items = task_examples(task, split, n, seed)  # EdgespecError naming the known tasks
    if not items:
        raise EdgespecError(f"suite '{name}': task '{task}' has no {split} split")
    budget = FINETUNE_TASKS[task].max_new_tokens
    return [Example(x.id, name, x.prompt, x.reference, x.metric, budget, {"group": x.group}, x.source) for x in items]


def load_suite(name: str, n: int, seed: int = 0) -> list[Example]:
    """A built-in suite by name, a fine-tune task's held-out split (``task:NAME[:SPLIT]``), or a
    user JSONL file (a name ending in .jsonl)."""
    if name.endswith(".jsonl"):
        return user_suite(name, n)
    if name.startswith(TASK_SUITE_PREFIX):
        return task_suite(name, n, seed)
    if name not in SUITES:
        raise EdgespecError(f"unknown suite {name!r}; built in: {', '.join(SUITES)}, or a .jsonl file")
    examples = SUITES[name].build(n, seed)
    if not examples:
        raise EdgespecError(f"suite {name!r} produced no examples")
    return examples


def suite_source(name: str) -> str:
    """Where a suite's data comes from, in words (the report's `source`)."""
    if name.startswith(TASK_SUITE_PREFIX):
        from edgespec.corpus.task_data import FINETUNE_TASKS

        task, split = parse_task_suite(name)
        what = "new fillings of the training templates" if split == "heldout_fillings" else "held-out split"
        return f"{FINETUNE_TASKS[task].source}: {what}"
    return SUITES[name].source if name in SUITES else "user JSONL"
