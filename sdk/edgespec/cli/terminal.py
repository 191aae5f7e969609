"""The terminal side of the command line: one-line errors, a quiet terminal, progress bars and
the options and argument shapes several commands share."""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence

import click

from edgespec.errors import EdgespecError, EdgespecNote

_TERMINAL: list = []  # the stream edgespec's own lines go to while runtime logs are hidden


def err():
    """Where edgespec's own progress, notes and `error:` lines go: the terminal's stderr."""
    return _TERMINAL[-1] if _TERMINAL else sys.stderr


def friendly(fn):
    """Run a command so that an EdgespecError (or the machine's OSError) ends it with one
    `error: ...` line and a non-zero exit, and a note (`EdgespecNote`: a cache rebuilt, a recipe's older form) is one `note:` line."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        def note(message, category, *rest, **kw) -> None:
            if issubclass(category, EdgespecNote):  # RecipeDeprecation is one
                click.echo(f"note: {message}", file=err())
            else:
                previous(message, category, *rest, **kw)

        previous = warnings.showwarning
        warnings.showwarning = note
        try:
            return fn(*args, **kwargs)
        except EdgespecError as e:
            # one line, whatever the message quotes (user text may hold line breaks)
            click.echo("error: " + str(e).replace("\r", "\\r").replace("\n", "\\n"), file=err())
            sys.exit(getattr(e, "exit_code", 2))
        except OSError as e:  # the machine's, not the input's: disk full, read-only, permissions
            where = f" ('{e.filename}')" if e.filename else ""
            click.echo(
                f"error: {e.strerror or e}{where}; free the space or fix the path, then run again (outputs are written to temporary names and renamed, so no half-written bundle is left)",
                file=err(),
            )
            sys.exit(1)
        finally:
            warnings.showwarning = previous

    return wrapper


def quiet_runtime_logs() -> None:
    """Keep the terminal to edgespec's own lines for the rest of the command.

    ExecuTorch's runtime logs (cpuinfo, "No temp allocator provided", ...) reach Python's
    `sys.stderr` through its bindings' stream redirection, or file descriptor 2 directly, and
    torch's warnings go through `logging`/`warnings`. Unless `edgespec --verbose`, both
    `sys.stderr` and descriptor 2 point at /dev/null until the command ends; edgespec's own
    lines (`err()`) keep going to the terminal through a duplicate of the original stream.
    """
    import logging
    import os

    ctx = click.get_current_context()
    if ctx.find_root().params.get("verbose") or ctx.meta.get("edgespec.quiet"):
        return
    ctx.meta["edgespec.quiet"] = True
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", category=EdgespecNote)  # edgespec's own notes still reach the terminal
    for name in ("torch", "torchao", "executorch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    saved_stream = sys.stderr
    saved_stream.flush()
    saved_fd = os.dup(2)
    null_fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null_fd, 2)
    os.close(null_fd)
    try:
        real = saved_stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a test runner's in-memory stream
        real = False
    terminal = open(os.dup(saved_fd), "w", buffering=1, encoding=saved_stream.encoding, errors="backslashreplace") if real else saved_stream
    _TERMINAL.append(terminal)
    sys.stderr = open(os.devnull, "w")

    def restore() -> None:
        sys.stderr.close()
        sys.stderr = saved_stream
        _TERMINAL.pop()
        if terminal is not saved_stream:
            terminal.close()
        os.dup2(saved_fd, 2)
        os.close(saved_fd)

    ctx.call_on_close(restore)


THREADS = click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="ExecuTorch threads (0: its default, one per core); set before the program loads.",
)


def set_thread_count(n: int) -> None:
    from edgespec.runtime.runner import set_threads

    set_threads(n)


@contextlib.contextmanager
def phase_bars(name: str) -> Iterator[Callable[[str, int, int], None]]:
    """An on_progress(phase, done, total) callback drawing one transient bar per phase."""
    from tqdm import tqdm

    bars: dict = {}

    def on_progress(phase: str, done: int, total: int) -> None:
        if phase not in bars:
            for b in bars.values():
                b.close()
            bars.clear()
            # initial: a resumed phase starts part way, and its rate counts only this run's steps
            bars[phase] = tqdm(total=total, initial=done, desc=f"{name} [{phase}]", unit="step", file=err(), leave=False)
        bars[phase].n = done
        bars[phase].refresh()

    try:
        yield on_progress
    finally:
        for b in bars.values():
            b.close()


def progress_bar(total: int, desc: str, unit: str, **kw):
    """A tqdm bar on the terminal (edgespec's own stream)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=err(), **kw)


# --- recipe fields on the command line ------------------------------------------------------

RECIPE_ARGS = click.argument("recipe_args", nargs=-1, metavar="[RECIPE] [FIELD=VALUE]...")
OVERRIDES = click.argument("overrides", nargs=-1, metavar="[FIELD=VALUE]...")
OVERRIDES_HELP = """RECIPE is a YAML file (default: the built-in SmolLM2-135M recipe; a first argument with
'=' starts the overrides). FIELD=VALUE sets the recipe field at that dotted path, the value
read as YAML (true/false, numbers such as 1e-3, flow lists [1,1,1]; a string field takes the
text as is) and checked exactly like the file.

\b
Examples:
  edgespec {cmd} recipes/smollm2-135m.yaml {example}
  edgespec {cmd} {example}"""
BUNDLE_OVERRIDES_HELP = """FIELD=VALUE sets a field of the bundle's own recipe (its recipe.yaml) for this run, the
value read as YAML and checked like a recipe file; the options above are aliases of such fields.

\b
Example:
  edgespec {cmd} --bundle bundles/spec {example}"""


def overrides_help(cmd: str, example: str, bundle: bool = False) -> str:
    return (BUNDLE_OVERRIDES_HELP if bundle else OVERRIDES_HELP).format(cmd=cmd, example=example)


def aliases(section: str, **flags) -> list[str]:
    """FIELD=VALUE overrides of `section` for the alias flags that were given (None: not given)."""
    import json

    return [f"{section}.{name}={json.dumps(list(v) if isinstance(v, tuple) else v)}" for name, v in flags.items() if v is not None and v != ()]


def bundle_recipe(manifest, overrides: Sequence[str]):
    """The bundle's recipe with FIELD=VALUE overrides, checked as a recipe file is."""
    from edgespec.config import apply_overrides

    return apply_overrides(manifest.recipe, overrides)
