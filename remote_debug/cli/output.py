"""Printing for humans (rich) and machines (``--json``): one place, so every command behaves alike."""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape

from remote_debug.contract.spec import IDE
from remote_debug.laptop.wire import events as ev
from remote_debug.laptop.wire.events import plural

console = Console(stderr=False, highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def error_line(message: str) -> None:
    # One line, always: multi-line messages would break the "one actionable line" promise.
    first = " ".join(str(message).split()) or "failed"
    print(f"remote-debug: error: {first}", file=sys.stderr, flush=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


@contextlib.contextmanager
def progress(what: str, *, enabled: bool = True, every: float = 10.0, out: Console | None = None) -> Iterator[None]:
    """Show that ``what`` (e.g. "stopping job X") is still going while the block runs, on stderr.

    On a terminal: a spinner with the seconds so far.  Elsewhere (a log, CI, the extension's output
    channel) a spinner is invisible, so: a line at the start and one every ``every`` seconds.
    ``enabled=False`` (``--json``): nothing, the caller's JSON is the whole answer.
    """
    out = out or err_console
    if not enabled:
        yield
        return
    started = time.monotonic()
    done = threading.Event()

    def elapsed() -> str:
        return plural(round(time.monotonic() - started), "second")

    with contextlib.ExitStack() as stack:
        say: Callable[[], None]
        if out.is_terminal:
            status = stack.enter_context(out.status(f"{escape(what)}..."))
            period = 1.0

            def say() -> None:
                status.update(f"{escape(what)}... {elapsed()}")
        else:
            out.print(f"remote-debug: {what}...", markup=False, highlight=False)
            period = every

            def say() -> None:
                out.print(f"remote-debug: still {what} ({elapsed()} so far)", markup=False, highlight=False)

        def tick() -> None:
            while not done.wait(period):
                say()

        ticker = threading.Thread(target=tick, daemon=True, name="progress")
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()


# --- attach/demo events: one human line per kind (the JSON line is the event itself) -------------------

_E = TypeVar("_E", bound=ev.Event)
# event class -> its human line; events not listed are not worth a line
_DESCRIBE: dict[type[ev.Event], Callable[[Any], str]] = {}


def _line(cls: type[_E]) -> Callable[[Callable[[_E], str]], Callable[[_E], str]]:
    def register(describe: Callable[[_E], str]) -> Callable[[_E], str]:
        _DESCRIBE[cls] = describe
        return describe

    return register


@_line(ev.Launched)
def _launched(e: ev.Launched) -> str:
    return f"launched job {e.job} ({e.nodes} x {e.nproc_per_node} ranks); workspace {e.workspace}"


@_line(ev.RankAttached)
def _rank_attached(e: ev.RankAttached) -> str:
    return f"rank {e.rank}: debugger attached"


@_line(ev.JobStatusEvent)
def _job_status(e: ev.JobStatusEvent) -> str:
    detail = f": {e.message}" if e.message else ""
    return f"job {e.job}: {e.status} / {e.secondary_status}{detail}"


@_line(ev.Waiting)
def _waiting(e: ev.Waiting) -> str:
    so_far = f" ({plural(round(e.seconds), 'second')} so far)" if e.seconds else ""
    detail = f": looking for {e.detail}" if e.detail else ""
    return f"waiting for {e.what} to start: {', '.join(e.nodes) or 'none listed yet'}{so_far}{detail}"


@_line(ev.SshConfig)
def _ssh_config(e: ev.SshConfig) -> str:
    return f"ssh entries written ({', '.join(e.aliases)}): try `ssh {e.aliases[0]}`"


@_line(ev.NodeConnected)
def _node_connected(e: ev.NodeConnected) -> str:
    return f"connected to {e.alias}"


@_line(ev.RankReady)
def _rank_ready(e: ev.RankReady) -> str:
    if e.ide == IDE.PYCHARM:
        return (
            f"rank {e.rank} on {e.node}: its localhost:{e.remote_port} leads to "
            f"PyCharm's debug server at 127.0.0.1:{e.local_port}"
        )
    return f"rank {e.rank} on {e.node}: debugger at 127.0.0.1:{e.local_port}"


@_line(ev.RankUnavailable)
def _rank_unavailable(e: ev.RankUnavailable) -> str:
    return f"rank {e.rank} on {e.node} has no debugger ({e.state}: {e.error or ''})"


@_line(ev.LaunchJson)
def _launch_json(e: ev.LaunchJson) -> str:
    return f"VS Code: {e.path} has '{e.compound}'"


@_line(ev.Ready)
def _ready(e: ev.Ready) -> str:
    return f"ready: ranks {e.ranks}"


@_line(ev.Stopped)
def _stopped(e: ev.Stopped) -> str:
    return f"rank {e.rank} stopped at {e.file}:{e.line} ({e.reason}): {e.variables}"


@_line(ev.RankDetached)
def _rank_detached(e: ev.RankDetached) -> str:
    return f"rank {e.rank} detached" + (f": {e.error}" if e.error else "")


@_line(ev.Reconnected)
def _reconnected(e: ev.Reconnected) -> str:
    return f"reconnected to {e.node}"


@_line(ev.TunnelDown)
def _tunnel_down(e: ev.TunnelDown) -> str:
    return f"tunnel to {e.node} is down, retrying: {e.error}"


@_line(ev.WarningEvent)
def _warning(e: ev.WarningEvent) -> str:
    return f"warning: {e.message}"


@_line(ev.PycharmBuild)
def _pycharm_build(e: ev.PycharmBuild) -> str:
    others = f"; also found: {', '.join(e.others)}" if e.others else ""
    have = f", pydevd-pycharm {e.installed} installed" if e.installed else ""
    return f"PyCharm build {e.build} from {e.source}{have}{others}"


@_line(ev.PycharmConfig)
def _pycharm_config(e: ev.PycharmConfig) -> str:
    steps = "".join(f"\n  {i}. {step}" for i, step in enumerate(e.steps, start=1))
    return f"PyCharm run configuration '{e.config_name}' (port {e.port}) written to {e.path}{steps}"


@_line(ev.RankConnected)
def _rank_connected(e: ev.RankConnected) -> str:
    return f"rank {e.rank} on {e.node}: connected to PyCharm's debug server"


@_line(ev.IdeNotListening)
def _ide_not_listening(e: ev.IdeNotListening) -> str:
    return f"rank {e.rank} on {e.node} is waiting: {e.message}"


@_line(ev.RankFailed)
def _rank_failed(e: ev.RankFailed) -> str:
    held = (
        "; held for a post-mortem: a debugger attached to it stops at the exception, and it exits with "
        "this failure when you continue or detach (or when the hold ends)"
        if e.held
        else ""
    )
    tb = str(e.traceback or "").rstrip()
    body = "\n" + "\n".join("    " + line for line in tb.splitlines()) if tb else ""
    return f"rank {e.rank} on {e.node} failed: {e.error}{held}{body}"


@_line(ev.Detached)
def _detached(e: ev.Detached) -> str:
    why = "Ctrl-C" if e.reason == ev.DetachReason.INTERRUPTED else "every rank had its stops"
    return f"detached ({why}): job {e.job} keeps running"


@_line(ev.JobEnded)
def _job_ended(e: ev.JobEnded) -> str:
    reason = f" ({e.failure_reason})" if e.failure_reason else ""
    return f"job ended: {e.status}, exit code {e.exit_code}{reason}"


@_line(ev.RankRestarted)
def _rank_restarted(e: ev.RankRestarted) -> str:
    return f"rank {e.rank} on {e.node} restarted (run {e.run}, pid {e.pid}): attaching to the new process"


@_line(ev.RunStarted)
def _run_started(e: ev.RunStarted) -> str:
    what = shlex.join(e.command) if e.command else "the job's entry"
    port = f", rendezvous port {e.master_port}" if e.master_port else ""
    return f"run {e.run} of job {e.job}: {what} on {', '.join(e.nodes)}{port}"


@_line(ev.RunEnded)
def _run_ended(e: ev.RunEnded) -> str:
    how = "stopped (Ctrl-C)" if e.interrupted else f"ended, exit code {e.exit_code}"
    return f"run {e.run} {how}; the nodes stay up (remote-debug release {e.job} ends them)"


def describe_event(event: ev.Event) -> str | None:
    """A human line for an attach/demo event (None: not worth a line)."""
    describe = _DESCRIBE.get(type(event))
    return describe(event) if describe is not None else None


def wait_printer() -> ev.Emit:
    """For a command that prints no event stream (ssh, stacks, ssh-config, run, sync): the lines of a wait - the
    job's status while it starts, what it waits for and where - on stderr, so that nothing waits silently (and
    stdout stays the command's own, ``--json`` included)."""

    def emit(event: ev.Event) -> None:
        if isinstance(event, (ev.Waiting, ev.JobStatusEvent)):
            err_console.print(f"remote-debug: {describe_event(event)}", markup=False, highlight=False)

    return emit


def event_printer(as_json: bool) -> ev.Emit:
    """An emit for attach/demo: the event's JSON line on stdout (``--json``), else its human line on stderr."""

    def emit(event: ev.Event) -> None:
        if as_json:
            print_json(event.to_json())
            return
        line = describe_event(event)
        if line:
            err_console.print(f"[bold cyan]remote-debug[/]: {escape(line)}", markup=True, highlight=False)

    return emit
