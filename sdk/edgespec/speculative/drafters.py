"""The drafters a speculative program can carry, and their weights files.

`drafter.kind` in the recipe names one: ``streams`` (Speculative Streaming: stream rows
through the top MSA layers, `StreamsModel`), ``medusa`` (Medusa-1 heads on the final hidden
state, `MedusaModel`), ``hydra`` (heads that also see the token before their target,
`HydraModel`) or ``eagle`` (a draft decoder layer of its own over fused features of the
whole context, `EagleModel`). All are a `Drafter`: the same training interface
(`forward_train`, `lower_hidden`) and the same drafting interface of
`edgespec.speculative.step.SpecProgram` (`prefill`, `draft`), so one trainer, one replay and
one program serve all four; what they share is in `edgespec.speculative.common`.

A weights file (`save_drafter`) records the drafter and the architecture it was trained
with; a recipe that names it must agree on those fields (`load_drafter`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from edgespec.config import DrafterConfig, RecipeDeprecation
from edgespec.errors import EdgespecError
from edgespec.models.llama import Transformer
from edgespec.speculative.eagle import EagleLayer, EagleModel
from edgespec.speculative.medusa import HydraHeads, HydraModel, MedusaHeads, MedusaModel
from edgespec.speculative.streams import StreamParams, StreamsModel


@dataclass(frozen=True)
class Verified:
    """What one step (`edgespec.speculative.step.SpecProgram.step`) verified and accepted, as
    a drafter's `draft` reads it. R: tree rows, D: the tree's depth, F: the feature width."""

    feats: torch.Tensor  # [R, F] the drafter's features of every tree row (`taps`)
    h: torch.Tensor  # [R, d] final-norm hidden states of the tree rows
    path: torch.Tensor  # [D + 1] tree rows of the accepted path, root first (valid up to n)
    n: torch.Tensor  # [1] tokens accepted (>= 1)
    tokens: torch.Tensor  # [D + 1] tokens emitted (valid up to n); tokens[i] follows path[i]
    root: torch.Tensor  # [1] the root's token (emitted by the call before, at position pos)
    input_pos: torch.Tensor  # [1] pos as a tensor
    pos: int  # position of the root (a symbolic int in export)
    start_pos: int  # pos + n: where the bonus token (tokens[n - 1]) goes next call
    last: torch.Tensor  # [1] path[n - 1], the last accepted tree row
    bonus: torch.Tensor  # [1] tokens[n - 1]


class Drafter(Protocol):
    """A drafting model over a frozen base model, as the trainer (`train_drafter`), the replay
    (`tune.future_ranks`) and `SpecProgram` use it."""

    base: Transformer
    params: nn.Module | None  # the trained parameters, their class declaring its `quant_policy` (None: nothing drafted, e.g. prompt lookup)
    cfg: DrafterConfig | None  # its architecture (draft_depth, mode, n_layers, ...)
    first: int  # layer L0: the first base layer drafting rows run through (n_layers: none)
    taps: tuple[int, ...]  # layers whose inputs (n_layers: the top output) make its features
    draft_layers: int  # decoder layers a drafting row runs through (tune's cost model)
    chains_only: bool  # drafts continue the top-1 before them: chains (top-k at the last depth only)

    def lower_hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """Features of tokens [B, T]: the inputs of the `taps` layers, concatenated (frozen: the feature cache)."""
        ...

    def forward_train(
        self, tokens: torch.Tensor, h0: torch.Tensor | None = None, start: int | torch.Tensor = 0, length: int | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Teacher forcing: (main final hidden [B, T, d] or None when the base is untouched
        and not run, drafting rows' lm-head inputs [B, L, g, d])."""
        ...

    def main_lora(self, i: int) -> nn.ModuleDict | None:
        """Adapters of layer i on main rows (None: the untouched base layer)."""
        ...

    def prefill(self, feats: torch.Tensor, tokens: torch.Tensor, input_pos: torch.Tensor, start_pos) -> None:
        """State of its own for prompt rows tokens [T] at start_pos.. with features feats [T, F]
        (the program's `forward`; a no-op for drafters that keep none)."""
        ...

    def draft(self, v: Verified, depth: int, head: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor | None:
        """The next draft [depth, k] after what a step accepted, through the drafting `head`
        (None: nothing drafted)."""
        ...


# the fields a weights file fixes, per drafter; the tree (and the path) are decoding choices
ARCHITECTURE = {
    "streams": ("kind", "mode", "draft_depth", "n_layers", "lora_rank", "f_rank"),
    "medusa": ("kind", "draft_depth", "n_layers"),  # n_layers: where training cached its features
    "hydra": ("kind", "draft_depth", "n_layers"),
    "eagle": ("kind", "draft_depth"),
}


_BUILD = {
    "streams": lambda base, cfg: StreamsModel(base, StreamParams(base, cfg)),
    "medusa": lambda base, cfg: MedusaModel(base, MedusaHeads(base.args.dim, cfg.draft_depth), cfg.n_layers),
    "hydra": lambda base, cfg: HydraModel(base, HydraHeads(base.args.dim, cfg.draft_depth), cfg.n_layers),
    "eagle": lambda base, cfg: EagleModel(base, EagleLayer(base), cfg),
}


def new_drafter(base: Transformer, cfg: DrafterConfig) -> Drafter:
    """Untrained drafting parameters of `cfg.kind` over the frozen base model."""
    return _BUILD[cfg.kind](base, cfg)


def architecture(cfg: DrafterConfig) -> dict:
    return {k: getattr(cfg, k) for k in ARCHITECTURE[cfg.kind]}


def read_architecture(blob: dict) -> tuple[dict, bool]:
    """The architecture a weights file was trained with, in today's field names, and whether
    the file is of an earlier form (before 2026-12-02 the record is ``streams`` with the kind in
    ``drafter``; before 0.2 ``msa_config``; before heads it holds streams). The draft depth
    was ``gamma`` before 2026-12-06: a file of that form is read as it is, without a note (the
    weights shipped with edgespec are of it)."""
    if "drafter" in blob:
        arch, legacy = dict(blob["drafter"]), False
    else:
        arch, legacy = dict(blob["streams"] if "streams" in blob else blob["msa_config"]), True
        arch["kind"] = arch.pop("drafter", "streams")
    if "gamma" in arch:
        arch["draft_depth"] = arch.pop("gamma")
    return arch, legacy


def save_drafter(path, params: nn.Module, cfg: DrafterConfig, draft_ids: torch.Tensor | None = None) -> None:
    """Write a drafter's weights + their architecture (atomic), and the draft vocabulary
    (`draft_ids`) it was trained over or, in a bundle, its program drafts through."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    store = getattr(params, "store_dtype", None)  # a drafter may keep its file in a narrower float type
    state = {k: v.detach().to(store if store is not None and v.is_floating_point() else v.dtype).clone() for k, v in params.state_dict().items()}
    blob = {"drafter": architecture(cfg), "state_dict": state}
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


_PACKAGED = Path(__file__).resolve().parent.parent / "weights"  # drafter weights shipped with edgespec


def _weights_path(path) -> Path:
    path = Path(path)
    packaged = _PACKAGED / path.name
    if not path.is_file() and path.parent == Path(".") and packaged.is_file():
        path = packaged  # a file name alone may name weights shipped with edgespec
    if not path.is_file():
        raise EdgespecError(f"drafter weights '{path}' not found (train them with `edgespec train`, or name a file shipped in edgespec/weights)")
    return path


def warm_start_(params: nn.Module, path, cfg: DrafterConfig) -> tuple[list[str], list[str]]:
    """Copy into `params` (in place) every parameter of the weights file `path` with the same
    name and shape (`train.init`: e.g. a plain fine-tune's adapters under a Shared run's new
    stream entry). Returns (names copied, names left as initialized). The file must hold a
    drafter of the same kind, and at least one parameter must fit; else EdgespecError."""
    path = _weights_path(path)
    try:
        blob = torch.load(path, weights_only=True)
        arch, _ = read_architecture(blob)
        state = blob["state_dict"]
    except Exception as e:
        raise EdgespecError(f"train.init: '{path}' is not a drafter weights file of edgespec: {e}") from None
    if arch.get("kind") != cfg.kind:
        raise EdgespecError(f"train.init: '{path}' holds a {arch.get('kind')} drafter, the recipe trains {cfg.kind}")
    own = params.state_dict()
    fits = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    if not fits:
        raise EdgespecError(f"train.init: no parameter of '{path}' fits this drafter (names or shapes differ: {dict(arch)} against the recipe's)")
    with torch.no_grad():
        for k, v in fits.items():
            own[k].copy_(v.to(own[k].dtype))
    return sorted(fits), sorted(set(own) - set(fits))


def load_drafter(path, base: Transformer, expect: DrafterConfig | None = None) -> Drafter:
    """The drafting model of a weights file written by `save_drafter` (or `edgespec train`)
    over this base model, its parameters frozen.

    `path` is a file, or the bare name of a weights file shipped in `edgespec/weights`.
    expect: the recipe's drafter section; the file must have been trained with the same
    drafter kind and architecture, else an error names what differs. A file of an earlier
    form (not one shipped with edgespec) loads with one `RecipeDeprecation` note."""
    path = _weights_path(path)
    try:
        blob = torch.load(path, weights_only=True)
        arch, legacy = read_architecture(blob)
    except Exception as e:
        raise EdgespecError(f"drafter weights '{path}' are not a weights file of edgespec: {e}") from None
    if legacy and path.parent != _PACKAGED:
        import warnings

        warnings.warn(
            f"drafter weights '{path}' are in an earlier form; `edgespec train` writes today's (they load as they are)", RecipeDeprecation, stacklevel=2
        )
    if expect is not None:
        differ = {k: (getattr(expect, k), arch.get(k)) for k in ARCHITECTURE[expect.kind] if getattr(expect, k) != arch.get(k)}
        if differ:
            said = ", ".join(f"drafter.{k}: recipe {r!r}, file {f!r}" for k, (r, f) in differ.items())
            raise EdgespecError(f"drafter weights '{path}' were trained with another architecture ({said}); set the recipe to match or retrain")
        cfg = expect
    else:
        cfg = DrafterConfig(**arch, tree=(1,) * arch["draft_depth"])
    try:
        model = new_drafter(base, cfg)
        model.params.load_state_dict(blob["state_dict"])
    except Exception as e:
        raise EdgespecError(f"drafter weights '{path}' do not fit this model: {e}") from None
    model.params.requires_grad_(False)
    return model
