"""Recipe files: which recipe class a file's ``task`` picks, reading a YAML recipe (with
overrides and migrations), the CLI's ``[RECIPE] [FIELD=VALUE]...``, and writing a recipe as YAML."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgespec.config.asr_sections import AsrRecipe
from edgespec.config.lm_sections import Recipe
from edgespec.config.migrations import upgrade_recipe_data
from edgespec.config.override_grammar import merge_overrides
from edgespec.config.records import from_dict, require
from edgespec.config.yaml_syntax import one_line, parse_yaml
from edgespec.errors import EdgespecError

RECIPE_KINDS: dict[str, type] = {r.TASK: r for r in (Recipe, AsrRecipe)}
"""The task kinds, in one place: a recipe's ``task`` field picks its class here (absent: a
language-model recipe), and a bundle manifest's ``task`` names the same kinds. The layers
above config hold one entry per kind, each checked against this list when imported
(`check_task_kinds`): edgespec.manifest.MANIFEST_KINDS (the manifest record) and
edgespec.tasks.TASKS (the task module). A new task kind starts here."""


def check_task_kinds(registry: Mapping[str, object], name: str) -> None:
    """Raise ImportError unless `registry` (named `name`, for the message) holds exactly the
    task kinds of RECIPE_KINDS."""
    if set(registry) != set(RECIPE_KINDS):
        raise ImportError(f"{name} holds the task kinds {sorted(registry)}; edgespec.config.RECIPE_KINDS holds {sorted(RECIPE_KINDS)}: one entry per kind")


def _recipe_class(data: dict) -> type:
    task = data.get("task", Recipe.TASK)
    require(task in RECIPE_KINDS, "task", f"must be one of {list(RECIPE_KINDS)}, got {task!r}")
    return RECIPE_KINDS[task]


def load_recipe(path: str | Path | None, overrides: Sequence[str] = ()) -> Recipe:
    """Read a YAML recipe (``None``: the built-in default recipe) and apply ``FIELD=VALUE`` overrides."""
    data: Any = {}
    if path is not None:
        import yaml

        p = Path(path)
        if not p.is_file():
            raise EdgespecError(f"recipe '{p}' not found")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise EdgespecError(f"recipe '{p}' is not UTF-8 text (byte {e.start}: {e.object[e.start : e.start + 1]!r})") from None
        try:
            data = parse_yaml(text) or {}
        except yaml.YAMLError as e:
            raise EdgespecError(f"recipe '{p}' is not valid YAML: {one_line(e)}") from None
        require(isinstance(data, dict), "<recipe>", f"must be a mapping, got {type(data).__name__}")
    data = upgrade_recipe_data(data)
    cls = _recipe_class(data)
    return from_dict(cls, merge_overrides(data, overrides, cls))


def recipe_from_args(args: Sequence[str]) -> Recipe:
    """The CLI's ``[RECIPE] [FIELD=VALUE]...``: the first argument is the recipe file unless it
    holds a ``=`` (and is no file); without one, the built-in default recipe."""
    if args and ("=" not in args[0] or Path(args[0]).is_file()):
        if not Path(args[0]).exists() and Path(args[0]).suffix not in (".yaml", ".yml"):
            raise EdgespecError(f"recipe '{args[0]}' not found (an override is FIELD=VALUE, e.g. quant.scheme=fp32)")
        return load_recipe(args[0], args[1:])
    return load_recipe(None, args)


def recipe_to_yaml(recipe: Recipe | AsrRecipe) -> str:
    """The recipe as YAML text that `load_recipe` reads back to an equal recipe."""
    import yaml

    def plain(x):  # tuples -> lists, so the YAML is plain data
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x

    return yaml.safe_dump(plain(recipe.to_dict()), sort_keys=False)
