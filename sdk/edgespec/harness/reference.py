"""The fp32 model's greedy answers on the suite prompts: the accuracy gate's yardstick.

The source file's model dequantized to fp32 (for a GGUF, its own quantized blocks as floats:
the model as downloaded; no streams) runs eagerly with the same decode loop as the program.
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
    identity = [__version__, _source_identity(source), max_seq_len, prompts, budgets, list(eos_ids)]
    if adapters is not None:  # a fine-tuned reference: keyed by its adapters' content too
        identity.append(hashlib.sha256(Path(adapters).read_bytes()).hexdigest())
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]
    path = host.cache_dir("reference") / f"{key}.json"
    if path.is_file():
        try:
            return json.loads(path.read_text())["completions"]
        except (json.JSONDecodeError, KeyError):
            pass  # a torn cache file is recomputed
    import torch

    from edgespec.runtime.generate import eager_step, generate

    step = eager_step(model())
    out = []
    with torch.no_grad():
        for ids, budget in zip(prompts, budgets):
            out.append(generate(step, ids, max_new_tokens=budget, max_seq_len=max_seq_len, eos_ids=eos_ids).completion_ids)
            on_done()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"source": source, "completions": out}))
    tmp.replace(path)
    return out
