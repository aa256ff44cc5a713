"""``remote-debug stacks JOB``: the current Python stack of every rank on every node."""

from __future__ import annotations

from typing import Annotated

import typer

from remote_debug import spec
from remote_debug.cli.application import app, flag, positive_seconds
from remote_debug.cli.output import print_json
from remote_debug.local.connection import JobConnection
from remote_debug.local.stacks import collect_stacks, format_stacks


@app.command()
def stacks(
    job: Annotated[str, typer.Argument(help="Job name (or SageMaker training-job ARN).")],
    ranks: Annotated[str, typer.Option("--ranks", help="all, or e.g. 0,2.")] = "all",
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="How long to wait for the nodes to be reachable.",
            callback=positive_seconds,
        ),
    ] = 30.0,
    as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False,
    all_threads: Annotated[bool, flag("--all-threads", help="Also the debugger's own threads.")] = False,
) -> None:
    """Where is it hung? Every rank's Python stacks, without ptrace and without tracing."""
    report = collect_stacks(JobConnection.open(job), spec.parse_ranks(ranks), timeout=timeout, all_threads=all_threads)
    if as_json:
        print_json(report)
    else:
        typer.echo(format_stacks(report))
