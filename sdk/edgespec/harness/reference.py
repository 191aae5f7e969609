"""The fp32 model's greedy answers on the suite prompts: the accuracy gate's yardstick.

The source file's model dequantized to fp32 (for a GGUF, its own quantized blocks as floats:
the model as downloaded; no streams) runs eagerly and greedily, several sequences at a time
(continuous batching, `models.batched_decode`), each answer the one it gives alone.
For a Shared-mode program the yardstick is the fine-tuned model it was exported from: the
same base with the drafter file's adapters merged into its weights (`merged_main_model`).
Answers are cached on disk, keyed by the model files and the exact prompts and budgets, so
validating several bundles of one model pays for the reference once.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgespec import __version__, host


def _source_identity(source: str) -> list:
    from edgespec.models.load import embedded_path, is_embedded

    p = embedded_path(source) if is_embedded(source) else Path(source)
    files = sorted(p.rglob("*")) if p.is_dir() else [p]
    return [source, [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()]]


def load_reference(source: str, max_seq_len: int, adapters: Path | None = None):
    """The fp32 base model of `source`, eager, without streams: the yardstick of the score and
    fidelity gates; with `adapters` (a Shared-mode drafter file) the fine-tuned model, its
    main-row adapters merged into the weights."""
    from edgespec.models.load import build_model, read_source

    base = build_model(read_source(source, max_seq_len))
    if adapters is None:
        return base
    from edgespec.speculative.drafters import load_drafter
    from edgespec.speculative.streams import merged_main_model

    return merged_main_model(load_drafter(adapters, base))


REFERENCE_BATCH = 8  # sequences the eager reference decodes at once


def greedy_completions(
    model, prompts: list[list[int]], budgets: list[int], max_seq_len: int, eos_ids: tuple[int, ...], on_done: Callable[[], None] = lambda: None
) -> list[list[int]]:
    """Greedy completion ids (EOS left out, as `generate` gives them) of an eager fp32
    `Transformer` for each prompt, in input order: `REFERENCE_BATCH` sequences at a time by
    continuous batching (`models.batched_decode.generate_stream`, prompts of one budget
    together), or one at a time through `generate` for a model with sliding-window layers
    (the batched cache masks by slot only)."""
    import torch

    if model.args.local_layers:
        from edgespec.runtime.generate import eager_step, generate

        step, out = eager_step(model), []
        with torch.no_grad():
            for ids, budget in zip(prompts, budgets):
                out.append(generate(step, ids, max_new_tokens=budget, max_seq_len=max_seq_len, eos_ids=eos_ids).completion_ids)
                on_done()
        return out
    from edgespec.models.batched_decode import common_prefix, generate_stream, grouped_attention

    done: dict[int, list[int]] = {}
    with grouped_attention(model):  # for the batched steps only: the model serves other passes after
        for budget in sorted(set(budgets)):
            group = [(i, p) for i, (p, b) in enumerate(zip(prompts, budgets)) if b == budget]
            S = min(max(len(p) for _, p in group) + budget, max_seq_len)
            for i, r in generate_stream(
                model, group, batch=REFERENCE_BATCH, max_new_tokens=budget, eos_ids=eos_ids, max_len=S, prefix=common_prefix(p for _, p in group)
            ):
                done[i] = r.response_ids[:-1] if r.stopped else r.response_ids
                on_done()
    return [done[i] for i in range(len(prompts))]


def reference_completions(
    source: str,
    max_seq_len: int,
    prompts: list[list[int]],
    budgets: list[int],
    eos_ids: tuple[int, ...],
    model: Callable[[], Any],
    on_done: Callable[[], None] = lambda: None,
    adapters: Path | None = None,
) -> list[list[int]]:
    """Greedy completion ids of the fp32 base model of `source` for each prompt (budget = max
    new tokens); `model()` gives that model (`load_reference`), called only on a cache miss."""
    identity = [__version__, _source_identity(source), max_seq_len, prompts, budgets, list(eos_ids), f"batched {REFERENCE_BATCH}"]
    if adapters is not None:  # a fine-tuned reference: keyed by its adapters' content too
        identity.append(hashlib.sha256(Path(adapters).read_bytes()).hexdigest())
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]
    path = host.cache_dir("reference") / f"{key}.json"
    if path.is_file():
        try:
            return json.loads(path.read_text())["completions"]
        except (json.JSONDecodeError, KeyError):
            pass  # a torn cache file is recomputed
    out = greedy_completions(model(), prompts, budgets, max_seq_len, eos_ids, on_done)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"source": source, "completions": out}))
    tmp.replace(path)
    return out
