"""``remote-debug run JOB [-- CMD]`` and ``remote-debug release JOB``: iterate on a kept-alive job."""

from __future__ import annotations

from typing import Annotated

import typer

from remote_debug.cli.application import app, flag, positive_seconds
from remote_debug.cli.output import event_printer, print_json, wait_printer
from remote_debug.contract import spec
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.core.errors import EXIT_INTERRUPTED, UserError
from remote_debug.laptop.iterate.run import RunDriver
from remote_debug.laptop.iterate.run import release as release_nodes
from remote_debug.laptop.wire.documents import Released
from remote_debug.laptop.wire.event_text import run_output_line, with_text
from remote_debug.laptop.wire.events import RunOutput

TIMEOUT_HELP = "How long to wait for the nodes to be reachable."


# Options may follow the job name (`run JOB --wait 30`); the command comes after `--`, so its own
# options (`-- python -X dev train.py`) are never taken for ours.
@app.command()
def run(
    job: Annotated[str, typer.Argument(help="Job name (launched with --keep-alive).")],
    command: Annotated[
        list[str] | None,
        typer.Argument(help="Command to run on every node instead of the job's entry, after '--'."),
    ] = None,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait",
            min=0,
            max=spec.MAX_WAIT_SECONDS,
            metavar="SECONDS",
            help="How long each new rank waits for a debugger (default: the job's --wait).",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="SECONDS", help=TIMEOUT_HELP, callback=positive_seconds)
    ] = 60.0,
    as_json: Annotated[bool, flag("--json", help="Print JSON lines (run-started, run-output, run-ended).")] = False,
) -> None:
    """Run the job's entry again on every node (same launcher, world size and environment, a fresh
    rendezvous port), with every rank debuggable. A running attach follows the new ranks. Ctrl-C
    stops the run and keeps the nodes. The exit code is the run's."""
    emit = event_printer(as_json)

    def output(line: RunOutput) -> None:
        if as_json:
            print_json(with_text(line))
        else:
            typer.echo(run_output_line(line))

    words = list(command or [])
    if words[:1] == ["--"]:  # a second separator, as the user typed it
        words = words[1:]
    driver = RunDriver(JobConnection.open(job, emit=wait_printer()), emit, output)
    try:
        driver.start(words, wait, timeout)
        ended = driver.wait()
    except KeyboardInterrupt:
        driver.interrupt()
        emit(driver.ended())
        raise typer.Exit(EXIT_INTERRUPTED) from None
    refusal = driver.refusal()
    if refusal is not None:
        raise UserError(refusal)
    emit(ended)
    raise typer.Exit(ended.exit_code)


@app.command()
def release(
    job: Annotated[str, typer.Argument(help="Job name (launched with --keep-alive).")],
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="SECONDS", help=TIMEOUT_HELP, callback=positive_seconds)
    ] = 60.0,
    as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False,
) -> None:
    """End a kept-alive job now: a run still on is stopped, and the job ends with its training
    command's exit code."""
    connection = JobConnection.open(job, emit=wait_printer())
    nodes = release_nodes(connection, timeout)
    if as_json:
        print_json(Released(job=connection.job, released=nodes).to_json())
    else:
        typer.echo(f"released job {connection.job} ({', '.join(nodes)}): its nodes end now")
