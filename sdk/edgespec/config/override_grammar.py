"""``FIELD=VALUE`` overrides (the CLI's recipe arguments): a dotted recipe field and a YAML value,
merged into recipe data before it is checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from edgespec.config.lm_sections import Recipe
from edgespec.config.migrations import renamed_path
from edgespec.config.records import field_types, from_dict, require
from edgespec.config.yaml_syntax import one_line, parse_yaml
from edgespec.errors import EdgespecError


def _field_type(path: Sequence[str], root: type = Recipe) -> Any:
    """The annotated type of a dotted field of a `root` recipe, or None where there is no such field."""
    tp: Any = root
    for name in path:
        if not dataclasses.is_dataclass(tp):
            return None
        tp = field_types(tp).get(name)
    return tp


def _override_value(text: str, raw: str, tp: Any) -> Any:
    """VALUE of FIELD=VALUE as YAML; a string field takes the text as is where YAML reads a
    scalar of another type (``name=2024``, ``drafter.weights=`` for empty)."""
    import yaml

    try:
        value = parse_yaml(raw)
    except yaml.YAMLError as e:
        if tp is str:
            return raw
        raise EdgespecError(f"override {text!r}: the value is not valid YAML ({one_line(getattr(e, 'problem', None) or e)})") from None
    if tp is str and (value is None or isinstance(value, (bool, int, float))):
        return raw
    return value


def _merge(into: dict, key: str, value: Any) -> None:
    if isinstance(value, dict) and isinstance(into.get(key), dict):
        for k, v in value.items():
            _merge(into[key], k, v)
    else:
        into[key] = value


def merge_overrides(data: dict, overrides: Sequence[str], root: type = Recipe) -> dict:
    """``data`` (recipe as plain data, changed in place) with every ``a.b=value`` set; a later
    override of the same field wins. Checking is left to `from_dict`."""
    for text in overrides:
        key, eq, raw = text.partition("=")
        path = renamed_path(key.strip().split("."))
        if not eq or not all(path):
            raise EdgespecError(f"override '{text}': expected FIELD=VALUE with a dotted recipe field, e.g. quant.scheme=fp32")
        for i in range(1, len(path)):
            tp, head = _field_type(path[:i], root), ".".join(path[:i])
            if tp is not None and not dataclasses.is_dataclass(tp):
                raise EdgespecError(f"recipe field '{key.strip()}': unknown field ('{head}' is a value, not a section)")
        node = data
        for i, name in enumerate(path[:-1]):
            node = node.setdefault(name, {})
            require(isinstance(node, dict), ".".join(path[: i + 1]), f"must be a mapping, got {type(node).__name__}")
        _merge(node, path[-1], _override_value(text, raw, _field_type(path, root)))
    return data


def apply_overrides(recipe: Recipe, overrides: Sequence[str]) -> Recipe:
    """``recipe`` with ``FIELD=VALUE`` overrides (e.g. ``quant.scheme=fp32``), checked as a file is."""
    cls = type(recipe)
    return from_dict(cls, merge_overrides(recipe.to_dict(), overrides, cls)) if overrides else recipe
