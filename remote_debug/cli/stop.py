"""``remote-debug stop JOB``: stop a job the way SageMaker does (SIGTERM, SIGKILL after a grace period)."""

from __future__ import annotations

from typing import Annotated

import typer

from remote_debug.cli.application import app, flag
from remote_debug.cli.output import console, print_json, progress
from remote_debug.laptop.platforms import backend_for, job_ref


@app.command()
def stop(
    job: Annotated[str, typer.Argument(help="Job name (or SageMaker training-job ARN).")],
    as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False,
) -> None:
    """Stop a running job and wait until it has stopped."""
    ref = job_ref(job)
    backend = backend_for(ref)
    # a local job gets SIGTERM and up to its grace period (120 seconds, as on SageMaker) to end: without a
    # word meanwhile, the command looks hung
    with progress(f"stopping job {ref.name}, waiting for it to end", enabled=not as_json):
        info = backend.stop(ref.name)
    if as_json:
        print_json(info.to_json())
        return
    if info.running:  # SageMaker: StopTrainingJob was accepted; the instances take a while to go
        console.print(f"job {info.name} is {info.status}: {backend.name} is stopping it", markup=False)
    else:
        console.print(f"job {info.name} has ended: {info.status}", markup=False)
