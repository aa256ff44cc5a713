"""The typer application every subcommand module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="remote-debug",
    help="Debug live SageMaker training jobs (and SageMaker-shaped local jobs) from VS Code or PyCharm.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
