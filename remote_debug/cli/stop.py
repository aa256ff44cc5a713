"""``remote-debug stop JOB``: stop a job the way SageMaker does (SIGTERM, SIGKILL after a grace period)."""

from __future__ import annotations

from typing import Annotated

import typer

from remote_debug.cli.app import app, flag
from remote_debug.cli.output import console, print_json
from remote_debug.local.backends import backend_for, job_ref


@app.command()
def stop(
    job: Annotated[str, typer.Argument(help="Job name (or SageMaker training-job ARN).")],
    as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False,
) -> None:
    """Stop a running job and wait until it has stopped."""
    ref = job_ref(job)
    info = backend_for(ref).stop(ref.name)
    if as_json:
        print_json(info.to_json())
        return
    console.print(f"job {info.name}: {info.status}")
