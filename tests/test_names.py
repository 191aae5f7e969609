"""One name, one thing: no public name (module, class, function, constant) of sdk/edgespec is
defined in two places, so a name found in a traceback or a grep means one thing.

Exempt: the interface every task module implements (edgespec.tasks: the same name for the same
role), and the click commands of edgespec.cli, named after the commands they are."""

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "sdk" / "edgespec"
TASK_INTERFACE = {"DESCRIPTION", "RECIPE", "STAGES", "build_bundle_files", "run_validation", "summarize_validation"}
TASK_INTERFACE |= {"write_validation_report", "render_validation"}
TASK_INTERFACE |= {"export_summary", "describe", "verify"}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)


def _public_names(path: Path) -> list[str]:
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_")]


def _exempt(module: str, name: str) -> bool:
    if module.startswith("edgespec.tasks.") and name in TASK_INTERFACE:
        return True
    return module.startswith("edgespec.cli.") and module != "edgespec.cli.terminal"


def test_no_public_name_is_defined_twice():
    where = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        for name in _public_names(path):
            if not _exempt(_module(path), name):
                where[name].append(_module(path))
    twice = {name: mods for name, mods in where.items() if len(mods) > 1}
    assert not twice, "rename one of each: " + "; ".join(f"{n} in {', '.join(m)}" for n, m in sorted(twice.items()))


def test_no_two_modules_share_a_name():
    where = defaultdict(list)
    for path in ROOT.rglob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            where[path.stem].append(_module(path))
    for path in ROOT.rglob("__init__.py"):
        where[path.parent.name].append(_module(path.parent / "x")[:-2])
    twice = {n: m for n, m in where.items() if len(m) > 1}
    assert not twice, "rename one of each: " + "; ".join(f"{n}: {', '.join(sorted(m))}" for n, m in sorted(twice.items()))
