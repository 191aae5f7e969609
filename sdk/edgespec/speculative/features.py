"""Frozen features and fingerprints of a training run.

- `FeatureCache`: the input of layer L0 for every training sequence, computed once and
  reused every epoch (a training step then costs only the top layers and the lm head).
- Fingerprints (SHA-256) of what decides a result: the base model's weights, the data's
  content, and for a run (`run_fingerprint`) the drafter and training settings. A checkpoint
  is resumed, and a feature file reused, only when its fingerprint matches.
- `load_saved`: what edgespec's own `torch.save` wrote (tensors, numbers, strings), read with
  weights_only=True: a pickle that would run code is refused, never run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from edgespec.config import TrainConfig
from edgespec.speculative.drafters import Drafter
from edgespec.speculative.train_data import TrainExample


def tensors_digest(module: nn.Module) -> str:
    """SHA-256 over a module's state (names, dtypes, shapes, bytes)."""
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        t = t.detach().contiguous().cpu()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def examples_digest(examples: list[TrainExample]) -> str:
    """SHA-256 of the training sequences' content (tokens and prompt lengths, in order)."""
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([e.n_prompt, e.tokens], separators=(",", ":")).encode())
        for t in (e.topk_ids, e.topk_p):
            if t is not None:
                h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def load_saved(path: Path) -> dict | None:
    """The dict saved at path, or None when the file is damaged, holds anything but a dict, or
    holds more than tensors, numbers and strings (weights_only: such a pickle could run code)."""
    try:
        blob = torch.load(path, weights_only=True)
    except OSError:
        raise
    except Exception:  # UnpicklingError (code), RuntimeError or EOFError (damaged), ...
        return None
    return blob if isinstance(blob, dict) else None


# fields renamed since fingerprints were first recorded, spelled in the fingerprint as they were
# then: a run keeps its fingerprint across the rename (it resumes; recorded fingerprints hold)
_FINGERPRINT_NAMES = {"depth_weights": "stream_weights", "draft_depth": "gamma"}
# training settings added since: in the fingerprint only when set, so earlier runs keep theirs
_ADDED_LATER = ("lr_floor", "entry_lr", "depth_ramp_steps", "init")


def run_fingerprint(model: Drafter, examples: list[TrainExample], hp: TrainConfig, draft_ids: torch.Tensor | None = None) -> str:
    """What decides the trained weights: base model, drafter settings, draft vocabulary, data
    content and the training settings (not where they are written nor how often)."""
    # not where they are written, how often, nor which checkpoint a dev split picks
    defaults = asdict(TrainConfig())
    settings = {
        _FINGERPRINT_NAMES.get(k, k): v
        for k, v in asdict(hp).items()
        if k not in ("data", "out_dir", "checkpoint_every", "dev_items", "dev_data") and (k not in _ADDED_LATER or v != defaults[k])
    }
    if hp.init:  # what the run starts from: the file's content, not its name
        settings["init"] = hashlib.sha256(Path(hp.init).read_bytes()).hexdigest()
    drafter = repr(model.cfg).replace("draft_depth=", f"{_FINGERPRINT_NAMES['draft_depth']}=")
    vocab = None if draft_ids is None else hashlib.sha256(draft_ids.to(torch.int64).numpy().tobytes()).hexdigest()
    blob = {"base": tensors_digest(model.base), "drafter": drafter, "vocab": vocab, "data": examples_digest(examples), "train": settings}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


class FeatureCache:
    """Layer-L0 inputs of every example, computed once (bf16 in memory, optional file).

    Examples are run in batches of similar lengths (right padding: causal attention keeps
    real rows exact) of about `batch_tokens` tokens; bf16 runs the frozen layers under bf16
    autocast (about 3x faster on a CPU with bf16 matrix units; the features are stored in
    bf16 either way). The file is reused only when the base model's weights, the layer L0,
    the precision and the examples' content are the same; otherwise it is rebuilt."""

    def __init__(
        self,
        model: Drafter,
        examples: list[TrainExample],
        path: Path | None = None,
        on_progress: Callable[[int], None] = lambda n: None,
        bf16: bool = False,
        batch_tokens: int = 8192,
    ):
        key = {"base": tensors_digest(model.base), "taps": model.taps, "bf16": bf16, "data": examples_digest(examples)}
        if path is not None and path.is_file():
            blob = load_saved(path) or {}  # unreadable: rebuilt, as for other data
            if blob.get("key") == key:
                self.h = blob["h"]
                return
        h: list[torch.Tensor | None] = [None] * len(examples)
        order = sorted(range(len(examples)), key=lambda i: len(examples[i].tokens))
        i = 0
        while i < len(order):
            n = 1
            while i + n < len(order) and (n + 1) * len(examples[order[i + n]].tokens) <= batch_tokens:
                n += 1
            idx = order[i : i + n]
            T = len(examples[idx[-1]].tokens)  # the longest of the batch (sorted)
            tokens = torch.zeros(n, T, dtype=torch.long)
            for b, k in enumerate(idx):
                tokens[b, : len(examples[k].tokens)] = torch.tensor(examples[k].tokens)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = model.lower_hidden(tokens)
            for b, k in enumerate(idx):
                h[k] = out[b, : len(examples[k].tokens)].to(torch.bfloat16).clone()
                on_progress(1)
            i += n
        self.h = h
        if path is not None:
            tmp = path.with_suffix(".tmp")
            torch.save({"key": key, "h": self.h}, tmp)
            tmp.replace(path)
