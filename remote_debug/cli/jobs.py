"""``remote-debug jobs``: list debuggable jobs."""

from __future__ import annotations

import time

import typer
from rich.table import Table

from remote_debug.cli.app import app
from remote_debug.cli.output import console, print_json
from remote_debug.local.backends import all_backends


@app.command()
def jobs(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List jobs and their state (SageMaker-style status / secondary status)."""
    found = [job for backend in all_backends() for job in backend.list_jobs()]
    if as_json:
        print_json([j.to_json() for j in found])
        return
    if not found:
        console.print("no jobs yet: start one with  remote-debug launch --local -- python train.py")
        return
    table = Table("job", "backend", "status", "secondary", "nodes", "ranks/node", "created")
    for j in found:
        table.add_row(
            j.name,
            j.backend,
            j.status,
            j.secondary_status,
            str(len(j.nodes)),
            str(j.nproc_per_node),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.created)),
        )
    console.print(table)
