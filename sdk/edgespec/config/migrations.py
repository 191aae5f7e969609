"""Recipes of earlier versions: renamed sections and fields, removed fields, and the
`RecipeDeprecation` note that says what to write instead."""

from __future__ import annotations

from edgespec.config.records import require
from edgespec.errors import EdgespecNote


class RecipeDeprecation(EdgespecNote):
    """A recipe written in an older form was read; the message says what to write instead (a
    note: the CLI prints it as one `note:` line, also in commands that hide runtime logs)."""


_RENAMED_SECTIONS: dict[str, tuple[str, dict[str, str]]] = {"streams": ("drafter", {"drafter": "kind"})}
"""old section -> (new section, {old field: new field}) for recipes of earlier versions."""
_RENAMED_FIELDS: dict[tuple[str, str], str] = {("drafter", "gamma"): "draft_depth", ("train", "stream_weights"): "depth_weights"}
"""(section, old field) -> new field, sections in today's names, for recipes of earlier
versions (2026-12-06: the streams drafter's names for what every drafter has)."""
_REMOVED_FIELDS = {("export", "backend"): "export.backend was never read (the recipe's quant.kernel decides what a program computes with); remove it"}
RENAMED_VALUES: dict[tuple[str, str], dict[str, str]] = {("export", "step_attention"): {"block": "custom_sdpa"}}
"""(section, field) -> {old value: new value} for recipes of earlier versions (`block` attention
is ExecuTorch's `llama::custom_sdpa` for all rows, not edgespec's block kernel)."""


def renamed_path(path: list[str]) -> list[str]:
    """A dotted field path of an earlier recipe version in today's names (one RecipeDeprecation note)."""
    import warnings

    renamed = list(path)
    if renamed and renamed[0] in _RENAMED_SECTIONS:
        renamed[0], fields = _RENAMED_SECTIONS[path[0]]
        if len(renamed) > 1:
            renamed[1] = fields.get(renamed[1], renamed[1])
    if len(renamed) > 1:
        renamed[1] = _RENAMED_FIELDS.get((renamed[0], renamed[1]), renamed[1])
    if renamed != path:
        warnings.warn(f"recipe field '{'.'.join(path)}' is now '{'.'.join(renamed)}'", RecipeDeprecation, stacklevel=4)
    return renamed


def upgrade_recipe_data(data: dict, note: bool = True) -> dict:
    """Recipe data of an earlier version in today's shape (a copy): renamed sections and fields
    are moved, removed fields dropped; with `note`, one `RecipeDeprecation` warning says what
    to change in the file."""
    import warnings

    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    notes = []
    for old, (new, fields) in _RENAMED_SECTIONS.items():
        if isinstance(data.get(old), dict) and new not in data:
            section = data.pop(old)
            data[new] = {fields.get(k, k): v for k, v in section.items()}
            renamed = ", ".join(f"{old}.{k} -> {new}.{v}" for k, v in fields.items() if k in section)
            notes.append(f"the '{old}:' section is now '{new}:'" + (f" ({renamed})" if renamed else ""))
    for (section, old), new in _RENAMED_FIELDS.items():
        fields = data.get(section)
        if isinstance(fields, dict) and old in fields:
            require(new not in fields, f"{section}.{old}", f"is the earlier name of {section}.{new}, which the recipe sets too: keep {new} only")
            data[section] = {(new if k == old else k): v for k, v in fields.items()}
            notes.append(f"{section}.{old} is now {section}.{new}")
    for (section, name), why in _REMOVED_FIELDS.items():
        if isinstance(data.get(section), dict) and name in data[section]:
            del data[section][name]
            notes.append(why)
    for (section, name), values in RENAMED_VALUES.items():
        old = data[section].get(name) if isinstance(data.get(section), dict) else None
        if isinstance(old, str) and old in values:
            data[section][name] = values[old]
            notes.append(f"{section}.{name}: {old} is now {values[old]}")
    if notes and note:
        warnings.warn("recipe in an older form: " + "; ".join(notes), RecipeDeprecation, stacklevel=3)
    return data
