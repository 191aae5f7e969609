"""Reading YAML text the way recipes are read (files and the VALUE of ``FIELD=VALUE``), and a
parser's message on one line."""

from __future__ import annotations

import functools
from typing import Any


def one_line(e: object) -> str:
    """A parser's message (YAML's span several lines) as one line for an `error:` line."""
    return " ".join(str(e).split())


@functools.cache
def _yaml_loader() -> type:
    """yaml.SafeLoader that also reads ``1e-3`` as a number (YAML 1.1 wants ``1.0e-3``)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))
    return Loader


def parse_yaml(text: str) -> Any:
    """`text` read as YAML (safe types only; ``1e-3`` is a number)."""
    import yaml

    return yaml.load(text, Loader=_yaml_loader())
