"""``remote-debug jobs``: list debuggable jobs."""

from __future__ import annotations

import time
from typing import Annotated

from rich.table import Table

from remote_debug.cli.app import app, flag
from remote_debug.cli.output import console, error_line, print_json
from remote_debug.local.backends import all_backends
from remote_debug.local.errors import UserError


@app.command()
def jobs(as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False) -> None:
    """List debuggable jobs, local and (when AWS is configured) SageMaker, with their status."""
    found = []
    for backend in all_backends():
        try:
            found += backend.list_jobs()
        except UserError as exc:  # AWS unreachable or not allowed: still list the local jobs
            if not backend.capabilities.remote:  # this machine's own jobs: a real error
                raise
            error_line(f"{backend.name} jobs not listed: {exc}")
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
            str(j.nproc_per_node or "?"),  # SageMaker: unknown until a rank reports
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.created)),
        )
    console.print(table)
