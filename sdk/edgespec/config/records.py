"""The typed-record machinery of recipes and bundle manifests: frozen dataclasses whose every
construction type-checks and value-checks every field, built from plain data by `from_dict`
(unknown fields rejected); errors name the field's dotted path (``recipe field 'quant.scheme': ...``,
or another kind of field inside `parsing`)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import types
import typing
from typing import Any, ClassVar, Literal, get_args, get_origin

from edgespec.errors import EdgespecError

_FIELD_KIND = contextvars.ContextVar("field_kind", default="recipe field")


@contextlib.contextmanager
def parsing(kind: str):
    """Errors raised while building sections inside this block name their field as
    ``{kind} 'a.b'`` (records other than recipes reuse this machinery: the bundle manifest)."""
    token = _FIELD_KIND.set(kind)
    try:
        yield
    finally:
        _FIELD_KIND.reset(token)


def require(cond: bool, path: str, msg: str) -> None:
    """Raise `EdgespecError` naming the field at dotted `path` (``recipe field 'a.b': msg``) unless `cond`."""
    if not cond:
        raise EdgespecError(f"{_FIELD_KIND.get()} '{path}': {msg}")


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


class Record:
    """A typed record (a recipe section, a manifest record), subclassed as a frozen dataclass.
    Every construction type-checks the fields (ints become floats, lists tuples, mappings
    records) and runs ``_check``; errors name ``PATH.field``."""

    PATH: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for name, tp in field_types(type(self)).items():
            object.__setattr__(self, name, _check_type(getattr(self, name), tp, _join(self.PATH, name)))
        self._check()

    def _check(self) -> None:
        """Value checks beyond the types."""

    def _at(self, name: str) -> str:
        """The dotted path of one of this section's fields."""
        return _join(self.PATH, name)

    def to_dict(self) -> dict[str, Any]:
        """The record as plain data (nested records as dicts), what `from_dict` reads back."""
        return dataclasses.asdict(self)


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The annotated type of each field of the dataclass `cls`, by field name."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _check_type(value: Any, tp: Any, path: str) -> Any:
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return from_dict(tp, value, path)
    if origin is Literal:
        require(value in get_args(tp), path, f"must be one of {list(get_args(tp))}, got {value!r}")
        return value
    if origin is tuple:
        require(isinstance(value, (list, tuple)), path, f"must be a list, got {value!r}")
        (elem, *_rest) = get_args(tp)
        return tuple(_check_type(v, elem, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        require(isinstance(value, dict), path, f"must be an object, got {value!r}")
        key_tp, value_tp = get_args(tp)
        return {_check_type(k, key_tp, f"{path}.<key>"): _check_type(v, value_tp, _join(path, str(k))) for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in get_args(tp):
            return None
        arms = [a for a in get_args(tp) if a is not type(None)]
        for arm in arms[:-1]:  # the first arm the value fits; the last one's error otherwise
            with contextlib.suppress(EdgespecError):
                return _check_type(value, arm, path)
        return _check_type(value, arms[-1], path)
    if tp is Any:
        return value
    if tp is bool:
        require(isinstance(value, bool), path, f"must be true or false, got {value!r}")
    elif tp is int:
        require(isinstance(value, int) and not isinstance(value, bool), path, f"must be an integer, got {value!r}")
    elif tp is float:
        require(isinstance(value, (int, float)) and not isinstance(value, bool), path, f"must be a number, got {value!r}")
        value = float(value)
    elif tp is str:
        require(isinstance(value, str), path, f"must be a string, got {value!r}")
    return value


def from_dict(cls: type, data: Any, path: str | None = None) -> Any:
    """Build the section ``cls`` from plain data, rejecting unknown fields by dotted path."""
    path = getattr(cls, "PATH", "") if path is None else path
    require(isinstance(data, dict), path or "<recipe>", f"must be a mapping, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise EdgespecError(f"{_FIELD_KIND.get()} '{_join(path, str(key))}': unknown field (known: {', '.join(sorted(names))})")
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        require(not required or f.name in data, _join(path, f.name), "is missing")
    return cls(**data)
