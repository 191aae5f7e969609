"""The package's import structure: no import cycle between modules, and no upward import
between layers. Every `edgespec` import counts, including those inside functions (the lazy
imports that keep `import edgespec` light are still dependencies)."""

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "sdk"

# lowest first; a module may import from its own layer and the layers below it
LAYERS = (
    ("edgespec", "errors", "packages", "host", "output_dir", "config"),  # shared basics ("edgespec" = __init__)
    ("kernels",),  # edgespec's own ExecuTorch kernels (C++), their op schemas and their build
    ("models", "corpus"),  # the decoder, loaders, tokenizer; prompt suites and training data
    ("speculative", "quant", "numerics"),  # model transforms: streams and drafting, torchao, normalizers
    ("export",),  # torch.export and lowering to an ExecuTorch program
    ("manifest", "bundle"),  # the bundle format on disk: its typed records; writing and reading one
    ("runtime",),  # running a program on the host
    ("harness",),  # measuring bundles: suites, metrics, speed, gates, tuning
    ("speech",),  # speech recognition: audio, CTC, recognizer, its suite
    ("tasks",),  # what each task (language model, speech) does in an export, a validation, a verification
    ("cli",),  # the command line
)
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in (ROOT / "edgespec").rglob("*.py")}


def _imports() -> dict[str, set[str]]:
    """Module -> the edgespec modules it imports (resolved to module files where they exist)."""
    modules = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "edgespec":
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "edgespec"]
            else:
                continue
            edges[name].update(t for t in targets if t != name)
    return edges


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "edgespec"


def test_every_package_has_a_layer():
    assert {_package(m) for m in _modules()} <= set(LAYER), "add the new package to LAYERS"


def test_no_upward_import():
    upward = sorted(f"{a} -> {b}" for a, bs in _imports().items() for b in bs if LAYER[_package(b)] > LAYER[_package(a)])
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_no_import_cycle():
    edges = _imports()
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                cycles.append(" -> ".join(stack[stack.index(n) :] + [n]))
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(_modules()):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checker_sees_lazy_imports():
    """The cli imports the tasks only inside a command; the checker must still see it."""
    assert "edgespec.tasks" in _imports()["edgespec.cli.recipes"]
