"""``remote-debug stacks JOB``: the current Python stack of every rank on every node."""

from __future__ import annotations

import typer

from remote_debug import spec
from remote_debug.cli.app import app
from remote_debug.cli.output import print_json
from remote_debug.local.backends import backend_for, job_name
from remote_debug.local.stacks import collect_stacks, format_stacks


@app.command()
def stacks(
    job: str = typer.Argument(..., help="Job name (or SageMaker training-job ARN)."),
    ranks: str = typer.Option("all", "--ranks", help="all, or e.g. 0,2."),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds to wait for the nodes to be reachable."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Where is it hung? Every rank's Python stacks, without ptrace and without tracing."""
    job = job_name(job)
    report = collect_stacks(backend_for(job), job, spec.parse_ranks(ranks), timeout=timeout)
    if as_json:
        print_json(report)
    else:
        typer.echo(format_stacks(report))
