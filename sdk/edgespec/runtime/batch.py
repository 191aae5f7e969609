"""Batch generation over a JSONL file, as an asynchronous pipeline (FastSeq's host-side overlap).

    reader thread:  read + parse lines, skip finished ids, tokenize  ─┐ bounded queue
    main thread:    decode with the program (one program, one thread) ─┤ bounded queue
    writer thread:  detokenize, append one JSON line, flush + fsync   ─┘

Resumable: ids already in the output are skipped (a line without an id has the SHA-256 of its
prompt as id, so an edited input resumes what each line asks for), and a torn last line (not
JSON: a killed writer) is cut off before appending, so a crash loses no finished line and
duplicates none. A line that cannot be generated (not JSON, no string "prompt", text that is
not valid UTF-8, a prompt too long for the program) is reported and recorded in the output as
{"id", "line", "error"} (its id, else the SHA-256 of the line), so a rerun moves past it; it
never stops the batch. Delete an error row to try its line again.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgespec.errors import EdgespecError
from edgespec.models.tokenizer import check_text

_DONE = object()
_TORN = object()  # a line that is not JSON


@dataclass
class BatchStats:
    total_lines: int = 0
    skipped_done: int = 0
    generated: int = 0
    new_tokens: int = 0
    reused_tokens: int = 0
    prompt_tokens: int = 0
    errors: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {
            "lines": self.total_lines,
            "already_done": self.skipped_done,
            "generated": self.generated,
            "errors": len(self.errors),
            "new_tokens": self.new_tokens,
            "prompt_tokens": self.prompt_tokens,
            "reused_prefix_tokens": self.reused_tokens,
            "seconds": round(self.seconds, 3),
            "prompts_per_s": round(self.generated / self.seconds, 3) if self.seconds > 0 else 0.0,
        }


def finished_ids(output: Path) -> set[str]:
    """Ids of the complete lines of an output file. A torn last line (not JSON) is cut off the
    file; a whole one without its newline (an edited file) gets one."""
    if not output.exists():
        return set()
    data = output.read_bytes()
    end = data.rfind(b"\n") + 1
    rows = [_json(line) for line in data[:end].splitlines()]
    if end < len(data):
        last = _json(data[end:])
        with open(output, "r+b") as f:
            if last is _TORN:  # the writer died mid-line: drop the fragment
                f.truncate(end)
            else:
                f.seek(0, os.SEEK_END)
                f.write(b"\n")
                rows.append(last)
            f.flush()
            os.fsync(f.fileno())
    return {str(r["id"]) for r in rows if isinstance(r, dict) and "id" in r}


def _json(line: bytes):
    """The JSON value of a line, or _TORN."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):  # JSONDecodeError, bytes that are not UTF-8; nesting too deep
        return _TORN


def _sha256_key(text: str) -> str:
    """The id of a line without one: 'sha256:' and 16 hex digits of its text (any code points)."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _given_id(obj) -> str | None:
    """The id a parsed input line gives (as text), None if none; EdgespecError if it is not text."""
    if not isinstance(obj, dict) or obj.get("id") is None:
        return None
    return check_text(str(obj["id"]), "the id")


def _prompt(obj) -> str:
    """The prompt of a parsed input line, else ValueError or EdgespecError (not valid text)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or not obj["prompt"].strip():
        raise ValueError("expected a JSON object with a non-empty string 'prompt'")
    return check_text(obj["prompt"])


def run_batch(
    decode: Callable[..., object],
    encode: Callable[[str], list[int]],
    decode_text: Callable[[list[int]], str],
    input_path: str | Path,
    output_path: str | Path,
    *,
    gen_kwargs: dict,
    pipelined: bool = True,
    queue_size: int = 16,
    on_item: Callable[[BatchStats], None] = lambda s: None,
    together: tuple[Callable, int, int] | None = None,
) -> BatchStats:
    """Generate for every pending line of `input_path`, appending to `output_path`.

    decode(prompt_ids, **gen_kwargs) -> GenerationResult; encode(text) -> ids;
    decode_text(ids) -> text. pipelined=False runs the same steps one after another (the
    baseline the pipeline is measured against). together = (decode_rows, slots, call_rows):
    decode up to `slots` prompts at once through a program's batched method
    (edgespec.runtime.batch_decode) instead of `decode` one prompt at a time; results are
    written as sequences end."""
    inp, out = Path(input_path), Path(output_path)
    if not inp.is_file():
        raise EdgespecError(f"input file '{inp}' not found")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        done = finished_ids(out)
        sink = open(out, "a", encoding="utf-8")
    except OSError as e:
        raise EdgespecError(f"cannot write output '{out}': {e.strerror}") from None
    stats = BatchStats(skipped_done=0)
    t0 = time.perf_counter()

    def items():  # (id, prompt, ids) or an error dict, for every line not done yet
        seen = set(done)
        with open(inp, encoding="utf-8", errors="surrogateescape") as f:  # bytes that are not UTF-8: caught by check_text
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                stats.total_lines += 1
                key = None
                try:
                    obj = json.loads(line)
                    key = _given_id(obj)
                    prompt = _prompt(obj)
                    named, key = key is not None, key or _sha256_key(prompt)
                except (ValueError, RecursionError, EdgespecError) as e:  # RecursionError: JSON nested too deep
                    key = key or _sha256_key(line)
                    if key not in done:
                        yield {"line": n, "id": key, "error": f"malformed input: {e}"}
                    else:
                        stats.skipped_done += 1
                    continue
                if key in seen:
                    stats.skipped_done += key in done
                    if key not in done:
                        why = "duplicate id in the input" if named else "the same prompt as an earlier line without an id"
                        yield {"line": n, "id": key, "error": f"{why} (first one kept)"}
                    continue
                seen.add(key)
                yield n, key, prompt, encode(prompt)

    def generate(item):
        if isinstance(item, dict):
            return item
        n, key, prompt, ids = item
        try:
            res = decode(ids, **gen_kwargs)
        except EdgespecError as e:  # e.g. a prompt longer than the program's context
            return {"line": n, "id": key, "error": str(e)}
        return key, prompt, res

    def one_at_a_time(source):
        return map(generate, source)

    def all_together(source):  # several items in flight: results as their sequences end
        from edgespec.runtime.batch_decode import decode_batch

        decode_rows, slots, call_rows = together
        unreadable: list[dict] = []  # error rows met while pulling prompts, passed through

        def requests():
            for item in source:
                if isinstance(item, dict):
                    unreadable.append(item)
                    continue
                n, key, prompt, ids = item
                yield (n, key, prompt), ids, {}

        options = {k: v for k, v in gen_kwargs.items() if k != "cache"}  # with a cache: each slot reuses its own prefix
        batches = decode_batch(decode_rows, requests(), slots=slots, call_rows=call_rows, reuse_prefix="cache" in gen_kwargs, **options)
        for (n, key, prompt), res in batches:
            yield from unreadable
            unreadable.clear()
            yield {"line": n, "id": key, "error": str(res)} if isinstance(res, EdgespecError) else (key, prompt, res)
        yield from unreadable

    work = one_at_a_time if together is None else all_together

    written = set(done)

    def record(row: dict) -> None:
        sink.write(json.dumps(row, ensure_ascii=False) + "\n")
        sink.flush()
        os.fsync(sink.fileno())  # a finished line survives a crash
        written.add(row["id"])

    def write(result) -> None:
        if isinstance(result, dict):
            stats.errors.append(result)
            if result["id"] not in written:  # not a duplicate of a line already in the output
                record({"id": result["id"], "line": result["line"], "error": result["error"]})
        else:
            key, prompt, res = result
            row = {
                "id": key,
                "prompt": prompt,
                "completion": decode_text(res.completion_ids),
                "new_tokens": len(res.completion_ids),
                "stopped_by_eos": res.stopped_by_eos,
                "decode_tokens_per_s": round(res.decode_tokens_per_s, 2),
                "tokens_per_call": round(res.mean_tokens_per_call, 3),
                "reused_prefix_tokens": res.reused_prefix,
            }
            record(row)
            stats.generated += 1
            stats.new_tokens += len(res.completion_ids)
            stats.prompt_tokens += len(res.prompt_ids)
            stats.reused_tokens += res.reused_prefix
        on_item(stats)

    try:
        if not pipelined:
            for result in work(items()):
                write(result)
        else:
            _pipeline(items(), work, write, queue_size)
    finally:
        sink.close()
        stats.seconds = time.perf_counter() - t0
    return stats


def _pipeline(source, work, sink, size: int) -> None:
    """source (reader thread) -> work (this thread: an iterator of results from an iterator
    of items) -> sink (writer thread), bounded queues; an exception in any stage stops the
    others and is raised here."""
    q_in: queue.Queue = queue.Queue(size)
    q_out: queue.Queue = queue.Queue(size)
    failure: list[BaseException] = []
    stop = threading.Event()

    def put(q, x) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in source:
                if not put(q_in, item):
                    return
        except BaseException as e:  # noqa: BLE001  handed to the main thread
            failure.append(e)
            stop.set()
        finally:
            put(q_in, _DONE) if not stop.is_set() else None

    def write() -> None:
        try:
            while True:
                r = q_out.get()
                if r is _DONE:
                    return
                sink(r)
        except BaseException as e:  # noqa: BLE001
            failure.append(e)
            stop.set()

    reader = threading.Thread(target=read, name="batch-reader", daemon=True)
    writer = threading.Thread(target=write, name="batch-writer", daemon=True)

    def received():
        while not stop.is_set():
            try:
                item = q_in.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is _DONE:
                return
            yield item

    reader.start()
    writer.start()
    try:
        for result in work(received()):
            if not put(q_out, result):
                break
    finally:
        # the writer drains what was decoded (a crash loses no finished line), then stops
        while writer.is_alive():
            try:
                q_out.put(_DONE, timeout=0.1)
                break
            except queue.Full:
                continue
        writer.join()
        stop.set()
        reader.join(timeout=5)
    if failure:
        raise failure[0]
