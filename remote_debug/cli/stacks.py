"""``remote-debug stacks JOB``: the current Python stack of every rank on every node."""

from __future__ import annotations

from typing import Annotated

import typer

from remote_debug.cli.application import app, flag, positive_seconds
from remote_debug.cli.output import print_json, wait_printer
from remote_debug.contract import spec
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.core.errors import BadInputError
from remote_debug.laptop.diagnose.stack_classes import add_classes, format_classes
from remote_debug.laptop.diagnose.stacks import (
    collect_job_stacks_no_hook,
    collect_pid_stacks,
    collect_stacks,
    format_stacks,
)


@app.command()
def stacks(
    job: Annotated[
        str | None, typer.Argument(help="Job name (or SageMaker training-job ARN); with --pid, none.")
    ] = None,
    ranks: Annotated[str, typer.Option("--ranks", help="all, or e.g. 0,2.")] = "all",
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="How long to wait for the nodes to be reachable (--no-hook: for the ranks to start).",
            callback=positive_seconds,
        ),
    ] = 30.0,
    as_json: Annotated[bool, flag("--json", help="Print JSON: every rank (ranks) and the classes (classes).")] = False,
    flat: Annotated[bool, flag("--flat", help="Every rank's threads one after another, not grouped by stack.")] = False,
    all_threads: Annotated[bool, flag("--all-threads", help="Also the debugger's own threads.")] = False,
    no_hook: Annotated[
        bool,
        flag("--no-hook", help="Read each rank with py-spy, not through the job's hook (jobs of this machine)."),
    ] = False,
    pid: Annotated[
        int | None,
        typer.Option(
            "--pid", min=1, help="With --no-hook: the ranks under this process (a torchrun launcher or one rank)."
        ),
    ] = None,
) -> None:
    """Where is it hung? Every rank's Python stacks, without tracing.

    Ranks with the same stack are grouped ("ranks 0-62 (63): all_reduce ... ← step (train.py:88)"), the odd ones
    first; with PyTorch's Flight Recorder on, the ranks missing from a stuck collective are named.  --flat: each
    rank's threads, one rank after another.

    By default through the job's hook (no ptrace).

    --no-hook: py-spy reads each rank from outside, pausing it only briefly (jobs of this machine; --pid: any process).
    """
    selection = spec.parse_ranks(ranks)
    if pid is not None and job is not None:
        raise BadInputError(f"give a job or --pid, not both: remote-debug stacks --no-hook --pid {pid}")
    if pid is None and job is None:
        raise BadInputError("which job? remote-debug stacks JOB (or: remote-debug stacks --no-hook --pid PID)")
    if pid is not None:
        # --pid is py-spy's by nature (a process tree has no hook to ask): --no-hook is implied
        report = collect_pid_stacks(pid, selection, all_threads=all_threads)
    elif no_hook:
        assert job is not None
        report = collect_job_stacks_no_hook(job, selection, timeout=timeout, all_threads=all_threads)
    else:
        assert job is not None
        connection = JobConnection.open(job, emit=wait_printer())
        report = collect_stacks(connection, selection, timeout=timeout, all_threads=all_threads)
    add_classes(report)
    if as_json:
        print_json(report)
    else:
        typer.echo(format_stacks(report) if flat else format_classes(report))
