"""The `edgespec` command line: a thin shell over the library.

Commands that read a recipe take `[RECIPE] [FIELD=VALUE]...`; commands over a bundle take
`--bundle DIR [FIELD=VALUE]...` over the bundle's own recipe (dotted overrides of recipe
fields, parsed and checked in edgespec.config; their flags are aliases of such fields). What a
command does for a task (language model, speech) comes from the bundle's or recipe's task
(edgespec.tasks). Heavy modules (torch, torchao, ExecuTorch) are imported inside the
commands, so `edgespec --help` is instant. Every `EdgespecError` is printed as one line
`error: ...` with exit code 2 (1 when a validation gate failed).

    recipes.py   export, train, normsearch, distill      (a recipe in)
    bundles.py   info, verify, validate, tune, package, unpack   (a bundle in)
    run.py       generate, bench, transcribe              (a bundle's program run)
    terminal.py  errors, quiet terminal, progress bars, shared options
"""

from __future__ import annotations

import click

from edgespec.cli import bundles, recipes, run


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edgespec")
@click.option("-v", "--verbose", is_flag=True, help="Also show ExecuTorch's and torch's own log lines and warnings.")
def main(verbose: bool) -> None:
    """edgespec: export a pretrained LM (or the Conformer speech recognizer of
    recipes/conformer-hama.yaml) to a fast, verified ExecuTorch bundle for phones."""


for _command in (*recipes.COMMANDS, *run.COMMANDS, *bundles.COMMANDS):
    main.add_command(_command)
