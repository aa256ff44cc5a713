"""Printing for humans (rich) and machines (``--json``): one place, so every command behaves alike."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

console = Console(stderr=False, highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def error_line(message: str) -> None:
    # One line, always: multi-line messages would break the "one actionable line" promise.
    first = " ".join(str(message).split()) or "failed"
    print(f"remote-debug: error: {first}", file=sys.stderr, flush=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


Event = dict[str, Any]


def _launched(e: Event) -> str:
    return f"launched job {e['job']} ({e['nodes']} x {e['nproc_per_node']} ranks); workspace {e['workspace']}"


def _job_status(e: Event) -> str:
    detail = f": {e['message']}" if e.get("message") else ""
    return f"job {e['job']}: {e['status']} / {e['secondary_status']}{detail}"


def _rank_ready(e: Event) -> str:
    if e.get("ide") == "pycharm":
        return (
            f"rank {e['rank']} on {e['node']}: its localhost:{e['remote_port']} leads to "
            f"PyCharm's debug server at 127.0.0.1:{e['local_port']}"
        )
    return f"rank {e['rank']} on {e['node']}: debugger at 127.0.0.1:{e['local_port']}"


def _pycharm_build(e: Event) -> str:
    others = f"; also found: {', '.join(e['others'])}" if e.get("others") else ""
    have = f", pydevd-pycharm {e['installed']} installed" if e.get("installed") else ""
    return f"PyCharm build {e['build']} from {e['source']}{have}{others}"


def _pycharm_config(e: Event) -> str:
    steps = "".join(f"\n  {i}. {step}" for i, step in enumerate(e.get("steps", []), start=1))
    return f"PyCharm run configuration '{e['name']}' (port {e['port']}) written to {e['path']}{steps}"


def _rank_failed(e: Event) -> str:
    held = (
        "; held for a post-mortem: a debugger attached to it stops at the exception, and it exits with "
        "this failure when you continue or detach (or when the hold ends)"
        if e.get("held")
        else ""
    )
    tb = str(e.get("traceback") or "").rstrip()
    body = "\n" + "\n".join("    " + line for line in tb.splitlines()) if tb else ""
    return f"rank {e['rank']} on {e['node']} failed: {e.get('error')}{held}{body}"


def _job_ended(e: Event) -> str:
    reason = f" ({e['failure_reason']})" if e.get("failure_reason") else ""
    return f"job ended: {e['status']}, exit code {e.get('exit_code')}{reason}"


# event name -> its human line; events not listed are not worth a line
_DESCRIBE: dict[str, Callable[[Event], str]] = {
    "launched": _launched,
    "rank-attached": lambda e: f"rank {e['rank']}: debugger attached",
    "job-status": _job_status,
    "waiting": lambda e: f"waiting for {e['what']} to start: {', '.join(e.get('nodes', []))}",
    "ssh-config": lambda e: f"ssh entries written ({', '.join(e['aliases'])}): try `ssh {e['aliases'][0]}`",
    "node-connected": lambda e: f"connected to {e['alias']}",
    "rank-ready": _rank_ready,
    "rank-unavailable": lambda e: (
        f"rank {e['rank']} on {e['node']} has no debugger ({e.get('state')}: {e.get('error') or ''})"
    ),
    "launch-json": lambda e: f"VS Code: {e['path']} has '{e['compound']}'",
    "ready": lambda e: f"ready: ranks {e['ranks']}",
    "stopped": lambda e: (
        f"rank {e['rank']} stopped at {e.get('file')}:{e.get('line')} ({e.get('reason')}): {e.get('variables')}"
    ),
    "rank-detached": lambda e: f"rank {e['rank']} detached" + (f": {e['error']}" if e.get("error") else ""),
    "reconnected": lambda e: f"reconnected to {e['node']}",
    "tunnel-down": lambda e: f"tunnel to {e['node']} is down, retrying: {e.get('error')}",
    "warning": lambda e: f"warning: {e['message']}",
    "pycharm-build": _pycharm_build,
    "pycharm-config": _pycharm_config,
    "rank-connected": lambda e: f"rank {e['rank']} on {e['node']}: connected to PyCharm's debug server",
    "ide-not-listening": lambda e: f"rank {e['rank']} on {e['node']} is waiting: {e['message']}",
    "rank-failed": _rank_failed,
    "job-ended": _job_ended,
}


def describe_event(event: Event) -> str | None:
    """A human line for an attach/demo event (None: not worth a line)."""
    describe = _DESCRIBE.get(str(event.get("event")))
    return describe(event) if describe is not None else None


def event_printer(as_json: bool) -> Any:
    def emit(event: dict[str, Any]) -> None:
        if as_json:
            print_json(event)
            return
        line = describe_event(event)
        if line:
            err_console.print(f"[bold cyan]remote-debug[/]: {escape(line)}", markup=True, highlight=False)

    return emit
