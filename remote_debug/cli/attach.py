"""``remote-debug attach JOB``: make every selected rank debuggable from the IDE (or headless)."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from remote_debug import spec
from remote_debug.cli.app import app
from remote_debug.cli.output import event_printer, print_json
from remote_debug.local.attach import Attacher, AttachOptions
from remote_debug.local.backends import backend_for, job_name
from remote_debug.local.errors import UserError
from remote_debug.local.headless import HeadlessPlan
from remote_debug.local.pycharm_session import PyCharmOptions


def check_seconds(value: float, option: str) -> float:
    """A wait the user gives us: positive and finite (nan and inf would never time out)."""
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{option} {value:g} is not a number of seconds: use a positive number, e.g. {option} 60")
    return value


def parse_breakpoints(items: list[str], workspace: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for item in items:
        path, sep, line = item.rpartition(":")
        if not sep or not path or not line.isdigit() or int(line) < 1:
            raise UserError(f"bad breakpoint {item!r}: use FILE:LINE, e.g. train.py:42")
        full = (workspace / path).absolute()
        out.setdefault(str(full), []).append(int(line))
    return out


@app.command()
def attach(
    job: str = typer.Argument(..., help="Job name (or SageMaker training-job ARN)."),
    ide: str = typer.Option("vscode", "--ide", help="vscode or pycharm."),
    ranks: str = typer.Option("all", "--ranks", help="all, or e.g. 0,2."),
    workspace: Path = typer.Option(None, "--workspace", help="Your project dir (default: current dir)."),
    headless: bool = typer.Option(False, "--headless", help="Use the built-in DAP client instead of an IDE."),
    breakpoint_: list[str] = typer.Option([], "--break", help="FILE:LINE for --headless, repeatable."),
    steps: int = typer.Option(0, "--steps", help="--headless: step over this many lines at each stop."),
    max_stops: int = typer.Option(1, "--max-stops", help="--headless: stops per rank before running free."),
    no_ssh_include: bool = typer.Option(False, "--no-ssh-include", help="Do not add the Include to ~/.ssh/config."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait for nodes and ranks to be ready."),
    as_json: bool = typer.Option(False, "--json", help="Print events as JSON lines."),
    pycharm_port: int = typer.Option(
        0, "--pycharm-port", help="--ide pycharm: port of PyCharm's debug server here (default: as before, or 12345)."
    ),
    pycharm_build: str = typer.Option(
        None, "--pycharm-build", help="--ide pycharm: your PyCharm build (default: detected); 'any' skips the check."
    ),
) -> None:
    """Attach to a running job; stays in the foreground, keeps tunnels up, exits when the job ends."""
    if ide not in spec.IDES:
        raise UserError(f"unknown IDE {ide!r}: use one of {', '.join(spec.IDES)}")
    if ide != "pycharm" and (pycharm_port or pycharm_build):
        raise UserError("--pycharm-port and --pycharm-build need --ide pycharm")
    spec.check_port(pycharm_port, "--pycharm-port")
    check_seconds(timeout, "--timeout")
    if steps < 0:
        raise UserError(f"--steps {steps} is negative: use 0 (no stepping) or more")
    if max_stops < 0:
        raise UserError(f"--max-stops {max_stops} is negative: use 0 or more stops per rank")
    ws = (workspace or Path.cwd()).absolute()
    plan = None
    if headless:
        plan = HeadlessPlan(breakpoints=parse_breakpoints(breakpoint_, ws), steps=steps, max_stops=max_stops)
    elif breakpoint_:
        raise UserError("--break needs --headless (in an IDE, set breakpoints in the editor)")
    options = AttachOptions(
        ranks=spec.parse_ranks(ranks),
        workspace=ws,
        headless=plan,
        edit_user_ssh_config=not no_ssh_include,
        ready_timeout=timeout,
        ide=ide,
        pycharm=PyCharmOptions(port=pycharm_port, build=pycharm_build),
    )
    emit = event_printer(as_json)
    job = job_name(job)  # a SageMaker training-job ARN works too
    result = Attacher(backend_for(job), job, options, emit).run()
    if as_json and headless:
        print_json(
            {
                "event": "summary",
                "job": job,
                "exit_code": result.job.exit_code,
                "ranks": [r.to_json() for r in result.reports],
            }
        )
    raise typer.Exit(result.exit_code)
