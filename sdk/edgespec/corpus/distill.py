"""Self-distillation data: the target's own greedy answers to many prompts.

Lossless streams learn to predict what the base model will say, so the training targets
are the base model's own generations. Output is JSONL, one object per prompt:
{"id", "task", "prompt_ids", "response_ids"}; lines are appended, flushed and fsynced, and
a re-run skips ids already present, so a stopped run resumes where it was.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from edgespec.corpus.prompts import Prompt

# prompt ids -> (response ids, stopped at EOS); e.g. greedy `edgespec.runtime.generate.generate`
Respond = Callable[[list[int]], tuple[list[int], bool]]


def done_ids(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    ids = set()
    with open(path) as f:
        for line in f:
            try:
                ids.add(json.loads(line)["id"])
            except (json.JSONDecodeError, KeyError):
                continue  # a torn last line from a crash: regenerated on resume
    return ids


def distill(
    respond: Respond,
    encode: Callable[[str], list[int]],
    prompts: Iterable[Prompt],
    out_path: str | Path,
    *,
    max_seq_len: int,
    eos_ids: tuple[int, ...],
    on_done: Callable[[int], None] = lambda n: None,
) -> dict:
    """The model's responses (`respond`) to prompts not yet in out_path; returns counts."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    have = done_ids(out_path)
    n_new = n_tokens = 0
    if out_path.is_file() and out_path.stat().st_size:
        with open(out_path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
        if torn:  # a crash mid-line: end it, so the next record starts on a line of its own
            with open(out_path, "a") as f:
                f.write("\n")
    with open(out_path, "a") as f:
        for p in prompts:
            if p.id in have:
                continue
            ids = encode(p.text)
            if len(ids) + 8 >= max_seq_len:
                continue
            completion, stopped = respond(ids)
            resp = completion + ([eos_ids[0]] if stopped else [])
            f.write(json.dumps({"id": p.id, "task": p.task, "prompt_ids": ids, "response_ids": resp}) + "\n")
            f.flush()
            os.fsync(f.fileno())
            n_new += 1
            n_tokens += len(resp)
            on_done(len(resp))
    return {"new_sequences": n_new, "new_response_tokens": n_tokens, "skipped_existing": len(have)}
