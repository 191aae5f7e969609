"""Self-distillation data: the target's own greedy answers to many prompts.

Lossless streams learn to predict what the base model will say, so the training targets
are the base model's own generations. Output is JSONL, one object per prompt:
{"id", "task", "prompt_ids", "response_ids"}; lines are appended, flushed and fsynced, and
a re-run skips ids already present, so a stopped run resumes where it was.

`distill_shards` is the batched form (the eager model as teacher, `edgespec.models.batched_decode`):
shards of prompts with the teacher's top-K probabilities beside its tokens.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from edgespec.config import DistillConfig
from edgespec.corpus.prompts import Prompt
from edgespec.output_dir import claim_dir, written_names

SHARD_NAMES = written_names("shard-*.pt", "shard-*.tmp")  # what a shard directory may hold

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


def shard_name(i: int) -> str:
    return f"shard-{i:05d}.pt"


def distill_shards(
    model,
    prompts: list[tuple[str, str, list[int]]],
    out_dir: str | Path,
    *,
    batch: int,
    max_new_tokens: int,
    eos_ids: tuple[int, ...],
    top_k: int = 8,
    shard_size: int = 1024,
    sort_window: int = 8,
    part: tuple[int, int] = (0, 1),
    on_tokens: Callable[[int], None] = lambda n: None,
) -> dict:
    """Self-distillation with the eager batched teacher (`edgespec.models.batched_decode`, the model
    prepared by `as_teacher_`): (id, task, prompt ids) -> shards of `shard_size` prompts in
    out_dir, each written atomically with its rows' prompt ids, greedy response ids (EOS
    appended when the model stopped) and top-`top_k` ids [R, K] int32 / probabilities [R, K]
    fp16 per response position. Within each window of `sort_window` shards (in the given
    order) prompts are ordered by length: similar lengths share a shard, so its cache is as
    short as its longest prompt allows, while the shards finished first are still a sample of
    the whole mix. A shard already on disk is kept, so a stopped run resumes at the next
    shard. part (i, n): only the shards whose index is i mod n (one of n parallel workers).
    Returns counts."""
    import torch

    from edgespec.errors import EdgespecError
    from edgespec.models.batched_decode import common_prefix, generate_stream

    out = claim_dir(out_dir, SHARD_NAMES, "distill's shard directory")
    window = shard_size * sort_window
    order = [p for w in range(0, len(prompts), window) for p in sorted(prompts[w : w + window], key=lambda p: (len(p[2]), p[0]))]
    shards = [order[i : i + shard_size] for i in range(0, len(order), shard_size)]
    stats = {"shards": len(shards), "skipped_shards": 0, "new_sequences": 0, "new_response_tokens": 0}
    for i, shard in enumerate(shards):
        if i % part[1] != part[0]:
            continue
        path = out / shard_name(i)
        if path.is_file():
            have = torch.load(path, weights_only=True)["ids"]
            if have != [p[0] for p in shard]:
                raise EdgespecError(f"{path} holds other prompts than this run plans (another prompt set or shard size); use a new output directory")
            stats["skipped_shards"] += 1
            continue
        rows: dict[str, object] = {}
        longest = max(len(p[2]) for p in shard)
        stream = generate_stream(
            model,
            ((p[0], p[2]) for p in shard),
            batch=batch,
            max_new_tokens=max_new_tokens,
            eos_ids=eos_ids,
            max_len=longest + max_new_tokens,
            prefix=common_prefix(p[2] for p in shard),
            top_k=top_k,
        )
        for key, r in stream:
            rows[key] = r
            on_tokens(len(r.response_ids))
        blob = {
            "ids": [p[0] for p in shard],
            "tasks": [p[1] for p in shard],
            "prompt_ids": [p[2] for p in shard],
            "response_ids": [rows[p[0]].response_ids for p in shard],
            "stopped": [rows[p[0]].stopped for p in shard],
            "topk_ids": [rows[p[0]].topk_ids for p in shard],
            "topk_p": [rows[p[0]].topk_p for p in shard],
        }
        tmp = path.with_suffix(".tmp")
        torch.save(blob, tmp)
        tmp.replace(path)
        stats["new_sequences"] += len(shard)
        stats["new_response_tokens"] += sum(len(x) for x in blob["response_ids"])
    return stats


def _shard_worker(source: str, max_len: int, threads: int, rows, out_dir: str, part: tuple[int, int], kwargs: dict, queue) -> None:
    """One process of `distill_shards_parallel`: its own teacher, `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    from edgespec.models.batched_decode import as_teacher_
    from edgespec.models.load import build_model, read_source

    model = as_teacher_(build_model(read_source(source, max_len)), torch.bfloat16)
    stats = distill_shards(model, rows, out_dir, part=part, on_tokens=queue.put, **kwargs)
    queue.put(("done", part[0], stats))


def worker_threads(workers: int) -> int:
    """Threads of each of `workers` processes: an equal share of the CPUs this process may use
    (its affinity mask and cgroup quota, edgespec.host.usable_cpus), at least one."""
    from edgespec.host import usable_cpus

    return max(1, usable_cpus() // workers)


def distill_shards_parallel(
    source: str,
    max_len: int,
    rows: list[tuple[str, str, list[int]]],
    out_dir: str | Path,
    *,
    workers: int,
    on_tokens: Callable[[int], None] = lambda n: None,
    **kwargs,
) -> dict:
    """`distill_shards` in `workers` processes (shard i goes to worker i mod workers), each
    with its own copy of the teacher `source` and an equal share of the CPUs (`worker_threads`): on a small
    CPU, one-thread workers decode more tokens per second in total than one process with
    every thread (its small-batch matmuls do not scale). Same shards, same files as one
    process; stopped and resumed the same way."""
    import multiprocessing as mp
    import queue as queue_mod

    from edgespec.errors import EdgespecError

    threads = worker_threads(workers)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [
        ctx.Process(target=_shard_worker, args=(source, max_len, threads, rows, str(out_dir), (w, workers), kwargs, q), daemon=True) for w in range(workers)
    ]
    for p in procs:
        p.start()
    done: dict[int, dict] = {}
    try:
        while len(done) < workers:
            try:
                msg = q.get(timeout=5)
            except queue_mod.Empty:
                dead = [w for w, p in enumerate(procs) if not p.is_alive() and w not in done and p.exitcode != 0]
                if dead:
                    raise EdgespecError(
                        f"distillation worker {dead[0]} stopped (exit code {procs[dead[0]].exitcode}); rerun the same command to resume"
                    ) from None
                continue
            if isinstance(msg, tuple):
                done[msg[1]] = msg[2]
            else:
                on_tokens(msg)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()
    stats = {"shards": next(iter(done.values()))["shards"], "workers": workers, "threads_per_worker": threads}
    for key in ("skipped_shards", "new_sequences", "new_response_tokens"):
        stats[key] = sum(d[key] for d in done.values())
    return stats


def selected_prompts(cfg: DistillConfig) -> list[Prompt]:
    """The training prompts a distillation run answers: `cfg.prompts` of `cfg.suites` (all
    when empty) from the `cfg.split` slice, mixed across suites."""
    from edgespec.corpus.prompts import PROMPT_SOURCES, mixed_prompts
    from edgespec.errors import EdgespecError

    names = cfg.suites or tuple(PROMPT_SOURCES)
    unknown = [s for s in names if s not in PROMPT_SOURCES]
    if unknown:
        raise EdgespecError(f"unknown suite(s) {unknown}; known: {', '.join(PROMPT_SOURCES)}")
    return mixed_prompts(cfg.split, cfg.prompts, names)


def distill_from_model(
    source: str, prompts: list[Prompt], out_dir: str | Path, cfg: DistillConfig, chat_template: bool, on_tokens: Callable[[int], None] = lambda n: None
) -> dict:
    """Self-distillation shards from the eager model `source` (a recipe's model.source) as
    teacher: prompts encoded as the recipe says (`chat_template`), those longer than
    `cfg.max_prompt_tokens` skipped, then `distill_shards` (or its `cfg.workers`-process form).
    Returns its counts with the skipped prompts, the time and the response tokens per minute."""
    import time

    import torch

    from edgespec.models.batched_decode import as_teacher_
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.models.tokenizer import encode_prompt

    claim_dir(out_dir, SHARD_NAMES, "distill's shard directory")  # before the model loads
    max_len = cfg.max_prompt_tokens + cfg.max_new_tokens
    src = read_source(source, max_len)
    tokenizer = tokenizer_of(src)
    rows = [(p.id, p.task, encode_prompt(tokenizer, p.text, chat_template)) for p in prompts]
    kept = [r for r in rows if len(r[2]) <= cfg.max_prompt_tokens]
    kwargs = {"batch": cfg.batch, "max_new_tokens": cfg.max_new_tokens, "eos_ids": tuple(src.eos_ids), "top_k": cfg.top_k, "shard_size": cfg.shard_size}
    t0 = time.perf_counter()
    if cfg.workers > 1:
        stats = distill_shards_parallel(source, max_len, kept, out_dir, workers=cfg.workers, on_tokens=on_tokens, **kwargs)
    else:
        stats = distill_shards(as_teacher_(build_model(src), torch.bfloat16), kept, out_dir, on_tokens=on_tokens, **kwargs)
    seconds = time.perf_counter() - t0
    return stats | {
        "skipped_long_prompts": len(rows) - len(kept),
        "seconds": round(seconds, 1),
        "response_tokens_per_min": round(stats["new_response_tokens"] / seconds * 60) if stats["new_response_tokens"] else None,
    }


def read_shards(out_dir: str | Path) -> Iterable[dict]:
    """Rows {id, task, prompt_ids, response_ids, topk_ids, topk_p} of every shard in out_dir."""
    import torch

    for path in sorted(Path(out_dir).glob("shard-*.pt")):
        blob = torch.load(path, weights_only=True)
        for j, id_ in enumerate(blob["ids"]):
            yield {k: blob[k][j] for k in ("prompt_ids", "response_ids", "topk_ids", "topk_p")} | {"id": id_, "task": blob["tasks"][j]}
