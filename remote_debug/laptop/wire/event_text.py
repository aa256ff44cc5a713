"""The human line of every event, worded once.

The CLI prints it (``attach``/``run``/``sync`` without ``--json``), and adds it to each ``--json`` line as
``"text"`` (:func:`with_text`), which the VS Code extension shows instead of wording the event again (an older
CLI sends no ``text``: the extension then words the event plainly itself).  ``tests/local/test_wire_documents.py``
fails when an event has no wording here.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any, TypeVar

from remote_debug.contract.spec import RankDebugger, held_with_phrase
from remote_debug.laptop.wire import events as ev
from remote_debug.laptop.wire.events import TEXT_KEY, plural

_E = TypeVar("_E", bound=ev.Event)
# event class -> its wording
WORDING: dict[type[ev.Event], Callable[[Any], str]] = {}

# The events the CLI's human stream prints no line for (its JSON lines still have their text): a lazy rank's
# listener, pause-safe's detail and the headless summary are noise there (attach prints its own report), and
# `sync`/`run` print synced and run-output lines themselves.
QUIET: frozenset[type[ev.Event]] = frozenset({ev.RankListening, ev.PauseSafe, ev.Summary, ev.Synced, ev.RunOutput})


def event_text(event: ev.Event) -> str:
    """The event's human line (more lines only where the event carries a traceback or steps)."""
    return WORDING[type(event)](event)


def with_text(event: ev.Event) -> dict[str, Any]:
    """What ``--json`` prints for the event: its fields and its human line."""
    return {**event.to_json(), TEXT_KEY: event_text(event)}


def _line(cls: type[_E]) -> Callable[[Callable[[_E], str]], Callable[[_E], str]]:
    def register(describe: Callable[[_E], str]) -> Callable[[_E], str]:
        WORDING[cls] = describe
        return describe

    return register


@_line(ev.Launched)
def _launched(e: ev.Launched) -> str:
    return f"launched job {e.job} ({e.nodes} x {e.nproc_per_node} ranks); workspace {e.workspace}"


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
    try_it = f": try `ssh {e.aliases[0]}`" if e.aliases else ""
    return f"ssh entries written ({', '.join(e.aliases)}){try_it}"


@_line(ev.NodeConnected)
def _node_connected(e: ev.NodeConnected) -> str:
    return f"connected to {e.alias}"


@_line(ev.PycharmBuild)
def _pycharm_build(e: ev.PycharmBuild) -> str:
    others = f"; also found: {', '.join(e.others)}" if e.others else ""
    have = f", pydevd-pycharm {e.installed} installed" if e.installed else ""
    return f"PyCharm build {e.build} from {e.source}{have}{others}"


@_line(ev.PycharmConfig)
def _pycharm_config(e: ev.PycharmConfig) -> str:
    steps = "".join(f"\n  {i}. {step}" for i, step in enumerate(e.steps, start=1))
    return f"PyCharm run configuration '{e.config_name}' (port {e.port}) written to {e.path}{steps}"


@_line(ev.RankListening)
def _rank_listening(e: ev.RankListening) -> str:
    detail = f" ({e.detail})" if e.detail else ""
    return f"rank {e.rank} on {e.node}: debugger listening on its port {e.remote_port}{detail}"


@_line(ev.RankReady)
def _rank_ready(e: ev.RankReady) -> str:
    if e.ide == RankDebugger.PYDEVD:
        return (
            f"rank {e.rank} on {e.node}: its localhost:{e.remote_port} leads to "
            f"PyCharm's debug server at 127.0.0.1:{e.local_port}"
        )
    return f"rank {e.rank} on {e.node}: debugger at 127.0.0.1:{e.local_port}"


@_line(ev.RankUnavailable)
def _rank_unavailable(e: ev.RankUnavailable) -> str:
    return f"rank {e.rank} on {e.node} has no debugger ({e.state}: {e.error or ''})"


@_line(ev.PauseSafe)
def _pause_safe(e: ev.PauseSafe) -> str:
    detail = f" ({e.detail})" if e.detail else ""
    return f"rank {e.rank} on {e.node}: pause-safe{detail}"


@_line(ev.LaunchJson)
def _launch_json(e: ev.LaunchJson) -> str:
    return f"VS Code: {e.path} has '{e.compound}'"


@_line(ev.Ready)
def _ready(e: ev.Ready) -> str:
    return f"ready: ranks {e.ranks}"


@_line(ev.RankConnected)
def _rank_connected(e: ev.RankConnected) -> str:
    return f"rank {e.rank} on {e.node}: connected to PyCharm's debug server"


@_line(ev.IdeNotListening)
def _ide_not_listening(e: ev.IdeNotListening) -> str:
    return f"rank {e.rank} on {e.node} is waiting: {e.message}"


@_line(ev.RankAttached)
def _rank_attached(e: ev.RankAttached) -> str:
    return f"rank {e.rank}: debugger attached"


@_line(ev.Stopped)
def _stopped(e: ev.Stopped) -> str:
    return f"rank {e.rank} stopped at {e.file}:{e.line} ({e.reason}): {e.variables}"


@_line(ev.LogpointHit)
def logpoint_line(e: ev.LogpointHit) -> str:
    """``[rank 2] loss=0.31``: what the logpoint printed, tagged with its rank."""
    return f"[rank {e.rank}] {e.message}"


@_line(ev.RankPrinted)
def rank_printed_line(e: ev.RankPrinted) -> str:
    """``[rank 2] epoch 3``: what the rank printed, tagged with its rank."""
    return f"[rank {e.rank}] {e.line}"


@_line(ev.RankDetached)
def _rank_detached(e: ev.RankDetached) -> str:
    return f"rank {e.rank} detached" + (f": {e.error}" if e.error else "")


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
    cause = " (root cause)" if e.root_cause else ""
    return f"rank {e.rank} on {e.node} failed{cause}: {e.error}{held}{body}"


@_line(ev.RankHeld)
def _rank_held(e: ev.RankHeld) -> str:
    return (
        f"rank {e.rank} on {e.node} {held_with_phrase(e.held_for)}: paused where it was (a thread in a collective "
        f"pauses when it returns to Python), it ends with the job when rank {e.held_for}'s hold ends"
    )


@_line(ev.RankRestarted)
def _rank_restarted(e: ev.RankRestarted) -> str:
    return f"rank {e.rank} on {e.node} restarted (run {e.run}, pid {e.pid}): attaching to the new process"


@_line(ev.Reconnected)
def _reconnected(e: ev.Reconnected) -> str:
    return f"reconnected to {e.node}"


@_line(ev.TunnelDown)
def _tunnel_down(e: ev.TunnelDown) -> str:
    return f"tunnel to {e.node} is down, retrying: {e.error}"


@_line(ev.WarningEvent)
def _warning(e: ev.WarningEvent) -> str:
    return f"warning: {e.message}"


@_line(ev.BreakpointsMissed)
def _breakpoints_missed(e: ev.BreakpointsMissed) -> str:
    were = "was" if len(e.breakpoints) == 1 else "were"
    where = f"in {ev.format_rank_list(e.ranks)}" if e.ranks else "(no rank was debugged)"
    return f"no rank stopped at a breakpoint: {', '.join(e.breakpoints)} {were} never hit {where}"


@_line(ev.Detached)
def _detached(e: ev.Detached) -> str:
    why = "Ctrl-C" if e.reason == ev.DetachReason.INTERRUPTED else "every rank had its stops"
    return f"detached ({why}): job {e.job} keeps running"


@_line(ev.JobEnded)
def _job_ended(e: ev.JobEnded) -> str:
    reason = f" ({e.failure_reason})" if e.failure_reason else ""
    return f"job ended: {e.status}, exit code {e.exit_code}{reason}"


@_line(ev.Summary)
def _summary(e: ev.Summary) -> str:
    return f"summary of job {e.job}: {plural(len(e.ranks), 'rank')}, exit code {e.exit_code}"


_UNITS = ("kB", "MB", "GB", "TB")


def size_text(n: int) -> str:
    """``512 B``, ``12.4 kB``, ``3.0 MB``: decimal units, as file managers show them."""
    if n < 1000:
        return f"{n} B"
    value = float(n)
    for unit in _UNITS:
        value /= 1000
        if value < 1000 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


@_line(ev.Synced)
def synced_line(e: ev.Synced) -> str:
    """``synced 3 files (12.4 kB) to 2 nodes in 0.41 s (rsync)``: per node when every node got the same
    (the usual case), else each node's part in brackets."""
    nodes = e.nodes
    methods = ", ".join(sorted({n.method for n in nodes}))
    counts = {(n.files, n.bytes) for n in nodes}
    if len(counts) <= 1:
        files, size = next(iter(counts), (0, 0))
        what = f"{plural(files, 'file')} ({size_text(size)})"
    else:
        parts = "; ".join(f"{n.node}: {plural(n.files, 'file')}, {size_text(n.bytes)}" for n in nodes)
        what = f"{plural(e.files, 'file')} ({size_text(e.bytes)}: {parts})"
    return f"synced {what} to {plural(len(nodes), 'node')} in {e.seconds:.2f} s ({methods})"


@_line(ev.RunStarted)
def _run_started(e: ev.RunStarted) -> str:
    what = shlex.join(e.command) if e.command else "the job's entry"
    port = f", rendezvous port {e.master_port}" if e.master_port else ""
    return f"run {e.run} of job {e.job}: {what} on {', '.join(e.nodes)}{port}"


@_line(ev.RunOutput)
def run_output_line(e: ev.RunOutput) -> str:
    """``[algo-1] [rank 1] loss 0.3``; the launcher's own lines ``[algo-1] ...``."""
    return f"[{e.node}]" + (f" [rank {e.rank}]" if e.rank is not None else "") + f" {e.line}"


@_line(ev.RunEnded)
def _run_ended(e: ev.RunEnded) -> str:
    how = "stopped (Ctrl-C)" if e.interrupted else f"ended, exit code {e.exit_code}"
    return f"run {e.run} {how}; the nodes stay up (remote-debug release {e.job} ends them)"


@_line(ev.AllStop)
def _all_stop(e: ev.AllStop) -> str:
    if not e.pausing:
        return f"rank {e.rank} stopped ({e.reason}); every other rank is stopped already"
    return f"rank {e.rank} stopped ({e.reason}): pausing {ev.format_rank_list(e.pausing)} (all-stop)"


@_line(ev.AllPaused)
def _all_paused(e: ev.AllPaused) -> str:
    after = "Pause All" if e.rank is None else f"rank {e.rank} stopped"
    return f"all {plural(len(e.ranks), 'rank')} paused, {e.seconds:.2f} s after {after}"


@_line(ev.RankWaiting)
def _rank_waiting(e: ev.RankWaiting) -> str:
    doing = "paused" if e.action == ev.GroupAction.PAUSE else "finished its step"
    return (
        f"rank {e.rank} has not {doing} after {e.seconds:.1f} s: it is in native code (a collective waiting for "
        "paused ranks, or I/O) and stops when it returns to Python"
    )


@_line(ev.GroupActed)
def _group_acted(e: ev.GroupActed) -> str:
    what = {
        ev.GroupAction.CONTINUE: "Continue All",
        ev.GroupAction.PAUSE: "Pause All",
        ev.GroupAction.STEP: "Step Over All",
        ev.GroupAction.DETACH: "Detach All",
    }[e.action]
    ranks = ev.format_rank_list(e.ranks) if e.ranks else "no rank (none is in that state)"
    return f"{what} ({e.origin}): {ranks}"
