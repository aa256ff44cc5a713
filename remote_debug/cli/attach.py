"""``remote-debug attach JOB``: make every selected rank debuggable from the IDE (or headless)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from remote_debug.cli.application import MAX_PORT, PycharmBuild, app, flag, positive_seconds
from remote_debug.cli.output import event_printer
from remote_debug.contract import spec
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions
from remote_debug.laptop.core import interrupts
from remote_debug.laptop.core.errors import EXIT_INTERRUPTED, BadInputError, UserError
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.ide.pycharm import PyCharmOptions
from remote_debug.laptop.platforms import backend_for, job_ref
from remote_debug.laptop.wire.event_text import event_text
from remote_debug.laptop.wire.events import Detached, DetachReason, Emit, Event, LogpointHit, RankPrinted, Summary


def parse_breakpoints(items: list[str], workspace: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for item in items:
        path, sep, line = item.rpartition(":")
        if not sep or not path or not line.isdigit() or int(line) < 1:
            raise UserError(f"bad breakpoint {item!r}: use FILE:LINE, e.g. train.py:42")
        full = (workspace / path).absolute()
        out.setdefault(str(full), []).append(int(line))
    return out


# FILE:LINE:MESSAGE; the first ":<digits>:" ends the file (MESSAGE may hold colons)
_LOGPOINT = re.compile(r"(?P<file>.+?):(?P<line>\d+):(?P<message>.+)", re.DOTALL)


def parse_logpoints(items: list[str], workspace: Path) -> dict[str, list[tuple[int, str]]]:
    """``--log FILE:LINE:MESSAGE`` -> local file -> (line, message); each ``{expr}`` of MESSAGE must be a Python
    expression (a typo would otherwise print pydevd's error at every hit, in every rank)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for item in items:
        match = _LOGPOINT.fullmatch(item)
        if match is None or int(match.group("line")) < 1:
            raise BadInputError(f"bad logpoint {item!r}: use FILE:LINE:MESSAGE, e.g. train.py:42:'loss={{loss}}'")
        message = match.group("message")
        for expression in _interpolations(item, message):
            try:
                compile(expression, "<logpoint>", "eval")
            except SyntaxError as exc:
                raise BadInputError(
                    f"bad logpoint {item!r}: {{{expression}}} is not a Python expression ({exc.msg})"
                ) from None
        full = (workspace / match.group("file")).absolute()
        out.setdefault(str(full), []).append((int(match.group("line")), message))
    return out


def _interpolations(item: str, message: str) -> list[str]:
    """The ``{expr}`` of a logpoint message (braces nest, as pydevd reads them)."""
    found: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(message):
        if char == "{":
            depth += 1
            start = i + 1 if depth == 1 else start
        elif char == "}" and depth:
            depth -= 1
            if not depth and message[start:i].strip():
                found.append(message[start:i].strip())
    if depth:
        raise BadInputError(f"bad logpoint {item!r}: a '{{' without its '}}' (write {{expression}})")
    return found


@app.command()
def attach(
    job: Annotated[str, typer.Argument(help="Job name (or SageMaker training-job ARN).")],
    ide: Annotated[Editor, typer.Option("--ide", help="The IDE you debug from.")] = Editor.VSCODE,
    ranks: Annotated[str, typer.Option("--ranks", help="all, or e.g. 0,2.")] = "all",
    workspace: Annotated[
        Path | None, typer.Option("--workspace", help="Your project dir (default: current dir).")
    ] = None,
    headless: Annotated[bool, flag("--headless", help="Use the built-in DAP client instead of an IDE.")] = False,
    breakpoint_: Annotated[
        list[str] | None, typer.Option("--break", help="FILE:LINE for --headless, repeatable.")
    ] = None,
    log: Annotated[
        list[str] | None,
        typer.Option(
            "--log",
            metavar="FILE:LINE:MESSAGE",
            help="--headless: a logpoint in every rank, repeatable: prints MESSAGE ({expr} interpolated) tagged with "
            "the rank at each hit, without stopping; the attach then stays until the job ends.",
        ),
    ] = None,
    show_output: Annotated[
        bool, flag("--show-output", help="--headless: print what each rank prints while attached, tagged \\[rank N].")
    ] = False,
    steps: Annotated[
        int, typer.Option("--steps", min=0, help="--headless: step over this many lines at each stop.")
    ] = 0,
    max_stops: Annotated[
        int, typer.Option("--max-stops", min=0, help="--headless: stops per rank before running free.")
    ] = 1,
    follow: Annotated[
        bool,
        flag("--follow", help="--headless: after the stops, stay attached until the job ends (default: detach)."),
    ] = False,
    no_ssh_include: Annotated[bool, flag("--no-ssh-include", help="Do not add the Include to ~/.ssh/config.")] = False,
    no_launch_json: Annotated[
        bool, flag("--no-launch-json", help="Do not write .vscode/launch.json (the VS Code extension makes its own).")
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="How long to wait for nodes and ranks to be ready.",
            callback=positive_seconds,
        ),
    ] = 120.0,
    as_json: Annotated[bool, flag("--json", help="Print events as JSON lines.")] = False,
    pycharm_port: Annotated[
        int,
        typer.Option(
            "--pycharm-port",
            min=0,
            max=MAX_PORT,
            help="--ide pycharm: port of PyCharm's debug server here (default: as before, or 12345).",
        ),
    ] = 0,
    pycharm_build: PycharmBuild = None,
    all_stop: Annotated[
        bool | None,
        typer.Option(
            "--all-stop/--non-stop",
            metavar="",
            help="All-stop: when one rank stops, pause every other rank; Continue in any rank continues all "
            "(default with an IDE, VS Code or PyCharm). Non-stop: each rank on its own (default with --headless).",
        ),
    ] = None,
) -> None:
    """Attach to a running job; stays in the foreground, keeps tunnels up, exits when the job ends
    (--headless: once every rank had its stops; Ctrl-C detaches, the job keeps running)."""
    if ide != Editor.PYCHARM and (pycharm_port or pycharm_build):
        raise UserError("--pycharm-port and --pycharm-build need --ide pycharm")
    if follow and not headless:
        raise UserError("--follow needs --headless: an IDE attach always stays until the job ends")
    ws = (workspace or Path.cwd()).absolute()
    plan = None
    if headless:
        plan = HeadlessPlan(
            breakpoints=parse_breakpoints(breakpoint_ or [], ws),
            steps=steps,
            max_stops=max_stops,
            logpoints=parse_logpoints(log or [], ws),
            show_output=show_output,
        )
    elif breakpoint_:
        raise UserError("--break needs --headless (in an IDE, set breakpoints in the editor)")
    elif log:
        raise UserError("--log needs --headless (in VS Code, add a logpoint in the editor: it applies to every rank)")
    elif show_output:
        raise UserError("--show-output needs --headless (VS Code shows each rank's output in its Debug Console)")
    options = AttachOptions(
        ranks=spec.parse_ranks(ranks),
        workspace=ws,
        headless=plan,
        edit_user_ssh_config=not no_ssh_include,
        # headless has no IDE: launch.json may belong to an IDE attach running alongside (its ports)
        write_launch_json=not no_launch_json and not headless,
        ready_timeout=timeout,
        # headless: the stops are what was asked for; the job need not end for the command to
        detach_when_done=headless and not follow,
        ide=ide,
        pycharm=PyCharmOptions(port=pycharm_port, build=pycharm_build),
        # an IDE user debugs one program; a headless script's plan is per rank unless it asks
        all_stop=all_stop if all_stop is not None else not headless,
    )
    emit = _with_rank_lines(event_printer(as_json), as_json)
    # a closed terminal (SIGHUP) or the extension's SIGTERM end the attach like Ctrl-C: its clean-up
    # (launch.json entries naming its ports) runs instead of being skipped
    interrupts.end_attach_on_hangup()
    try:
        ref = job_ref(job)  # a SageMaker training-job ARN works too
        job = ref.name
        result = Attacher(backend_for(ref), job, options, emit).run()
    except KeyboardInterrupt:
        # the usual way to stop attaching: one line, no traceback, no "error"; 130 as for any Ctrl-C,
        # so that a script running attach stops too
        emit(Detached(job=job, reason=DetachReason.INTERRUPTED))
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if as_json and headless:
        emit(Summary(job=job, exit_code=result.job.exit_code, ranks=[r.summary() for r in result.reports]))
    raise typer.Exit(result.exit_code)


def _with_rank_lines(printer: Emit, as_json: bool) -> Emit:
    """Without ``--json``, what the ranks print and their logpoints' lines go to stdout as ``[rank 2] ...``: they
    are the job's data, for a pipe or a grep; the attach's own lines stay on stderr."""
    if as_json:
        return printer

    def emit(event: Event) -> None:
        if isinstance(event, (LogpointHit, RankPrinted)):
            typer.echo(event_text(event))
        else:
            printer(event)

    return emit
