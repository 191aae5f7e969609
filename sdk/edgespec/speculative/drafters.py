"""The drafters a speculative program can carry, and their weights files.

`streams.drafter` in the recipe names one: ``streams`` (Speculative Streaming: stream rows
through the top MSA layers, `SpecModel`), ``medusa`` (Medusa-1 heads on the final hidden
state, `MedusaModel`) or ``hydra`` (heads that also see the token before their target,
`HydraModel`). All present the same training interface (`forward_train`,
`lower_hidden`) and the same drafting interface of `edgespec.speculative.step.SpecProgram`
(`draft`), so one trainer, one replay and one program serve all three.

A weights file (`save_drafter`) records the drafter and the architecture it was trained
with; a recipe that names it must agree on those fields (`load_drafter`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from edgespec.config import StreamsConfig
from edgespec.errors import EdgespecError
from edgespec.models.llama import Transformer
from edgespec.speculative.medusa import HydraHeads, HydraModel, MedusaHeads, MedusaModel
from edgespec.speculative.streams import SpecModel, StreamParams

# the fields a weights file fixes, per drafter; the tree (and the path) are decoding choices
ARCHITECTURE = {
    "streams": ("drafter", "mode", "gamma", "n_layers", "lora_rank", "f_rank"),
    "medusa": ("drafter", "gamma", "n_layers"),  # n_layers: where training cached its features
    "hydra": ("drafter", "gamma", "n_layers"),
}


_BUILD = {
    "streams": lambda base, cfg: SpecModel(base, StreamParams(base, cfg)),
    "medusa": lambda base, cfg: MedusaModel(base, MedusaHeads(base.args.dim, cfg.gamma), cfg.n_layers),
    "hydra": lambda base, cfg: HydraModel(base, HydraHeads(base.args.dim, cfg.gamma), cfg.n_layers),
}


def new_drafter(base: Transformer, cfg: StreamsConfig) -> SpecModel | MedusaModel | HydraModel:
    """Untrained drafting parameters of `cfg.drafter` over the frozen base model."""
    return _BUILD[cfg.drafter](base, cfg)


def architecture(cfg: StreamsConfig) -> dict:
    return {k: getattr(cfg, k) for k in ARCHITECTURE[cfg.drafter]}


def read_architecture(blob: dict) -> dict:
    """The architecture a weights file was trained with (files before 0.2 call it msa_config;
    files before Medusa heads could ship hold streams)."""
    arch = dict(blob["streams"] if "streams" in blob else blob["msa_config"])
    arch.setdefault("drafter", "streams")
    return arch


def save_drafter(path, params: nn.Module, cfg: StreamsConfig, draft_ids: torch.Tensor | None = None) -> None:
    """Write a drafter's weights + their architecture (atomic), and the draft vocabulary
    (`draft_ids`) it was trained over or, in a bundle, its program drafts through."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    blob = {"streams": architecture(cfg), "state_dict": {k: v.detach().clone() for k, v in params.state_dict().items()}}
    if draft_ids is not None:
        blob["draft_ids"] = draft_ids.clone()
    torch.save(blob, tmp)
    tmp.replace(path)


def saved_draft_ids(path) -> torch.Tensor | None:
    """The draft vocabulary recorded beside drafter weights (bundles and training runs since
    it is recorded), or None."""
    return torch.load(path, weights_only=True).get("draft_ids")


def drafting_vocabulary(path, src, n: int) -> torch.Tensor | None:
    """The draft vocabulary of n tokens (None: n = 0, the full vocabulary) that the drafter in
    weights file `path` drafts through: the one recorded beside its weights (what it was
    trained over) when it has n tokens, else the corpus's (`draft_vocabulary`)."""
    from edgespec.speculative.vocab import draft_vocabulary

    if not n:
        return None
    ids = saved_draft_ids(_weights_path(path))
    return ids if ids is not None and len(ids) == n else draft_vocabulary(src, n)


def _weights_path(path) -> Path:
    path = Path(path)
    packaged = Path(__file__).resolve().parent.parent / "weights" / path.name
    if not path.is_file() and path.parent == Path(".") and packaged.is_file():
        path = packaged  # a file name alone may name weights shipped with edgespec
    if not path.is_file():
        raise EdgespecError(f"drafter weights '{path}' not found (train them with `edgespec train`, or name a file shipped in edgespec/weights)")
    return path


def load_drafter(path, base: Transformer, expect: StreamsConfig | None = None) -> SpecModel | MedusaModel | HydraModel:
    """The drafting model of a weights file written by `save_drafter` (or `edgespec train`)
    over this base model, its parameters frozen.

    `path` is a file, or the bare name of a weights file shipped in `edgespec/weights`.
    expect: the recipe's streams section; the file must have been trained with the same
    drafter and architecture, else an error names what differs."""
    path = _weights_path(path)
    try:
        blob = torch.load(path, weights_only=True)
        arch = read_architecture(blob)
    except Exception as e:
        raise EdgespecError(f"drafter weights '{path}' are not a weights file of edgespec: {e}") from None
    if expect is not None:
        differ = {k: (getattr(expect, k), arch.get(k)) for k in ARCHITECTURE[expect.drafter] if getattr(expect, k) != arch.get(k)}
        if differ:
            said = ", ".join(f"streams.{k}: recipe {r!r}, file {f!r}" for k, (r, f) in differ.items())
            raise EdgespecError(f"drafter weights '{path}' were trained with another architecture ({said}); set the recipe to match or retrain")
        cfg = expect
    else:
        cfg = StreamsConfig(**arch, tree=(1,) * arch["gamma"])
    try:
        model = new_drafter(base, cfg)
        model.params.load_state_dict(blob["state_dict"])
    except Exception as e:
        raise EdgespecError(f"drafter weights '{path}' do not fit this model: {e}") from None
    model.params.requires_grad_(False)
    return model
