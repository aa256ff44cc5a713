"""Printing for humans (rich) and machines (``--json``): one place, so every command behaves alike."""

from __future__ import annotations

import json
import sys
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


def describe_event(event: dict[str, Any]) -> str | None:
    """A human line for an attach/demo event (None: not worth a line)."""
    kind = event.get("event")
    if kind == "launched":
        shape = f"{event['nodes']} x {event['nproc_per_node']} ranks"
        return f"launched job {event['job']} ({shape}); workspace {event['workspace']}"
    if kind == "rank-attached":
        return f"rank {event['rank']}: debugger attached"
    if kind == "job-status":
        detail = f": {event['message']}" if event.get("message") else ""
        return f"job {event['job']}: {event['status']} / {event['secondary_status']}{detail}"
    if kind == "waiting":
        return f"waiting for {event['what']} to start: {', '.join(event.get('nodes', []))}"
    if kind == "ssh-config":
        return f"ssh entries written ({', '.join(event['aliases'])}): try `ssh {event['aliases'][0]}`"
    if kind == "node-connected":
        return f"connected to {event['alias']}"
    if kind == "rank-ready" and event.get("ide") == "pycharm":
        return (
            f"rank {event['rank']} on {event['node']}: its localhost:{event['remote_port']} leads to "
            f"PyCharm's debug server at 127.0.0.1:{event['local_port']}"
        )
    if kind == "rank-ready":
        return f"rank {event['rank']} on {event['node']}: debugger at 127.0.0.1:{event['local_port']}"
    if kind == "rank-unavailable":
        why = f"{event.get('state')}: {event.get('error') or ''}"
        return f"rank {event['rank']} on {event['node']} has no debugger ({why})"
    if kind == "launch-json":
        return f"VS Code: {event['path']} has '{event['compound']}'"
    if kind == "ready":
        return f"ready: ranks {event['ranks']}"
    if kind == "stopped":
        where = f"{event.get('file')}:{event.get('line')}"
        return f"rank {event['rank']} stopped at {where} ({event.get('reason')}): {event.get('variables')}"
    if kind == "rank-detached":
        return f"rank {event['rank']} detached" + (f": {event['error']}" if event.get("error") else "")
    if kind == "reconnected":
        return f"reconnected to {event['node']}"
    if kind == "tunnel-down":
        return f"tunnel to {event['node']} is down, retrying: {event.get('error')}"
    if kind == "warning":
        return f"warning: {event['message']}"
    if kind == "pycharm-build":
        others = f"; also found: {', '.join(event['others'])}" if event.get("others") else ""
        have = f", pydevd-pycharm {event['installed']} installed" if event.get("installed") else ""
        return f"PyCharm build {event['build']} from {event['source']}{have}{others}"
    if kind == "pycharm-config":
        steps = "".join(f"\n  {i}. {step}" for i, step in enumerate(event.get("steps", []), start=1))
        return f"PyCharm run configuration '{event['name']}' (port {event['port']}) written to {event['path']}{steps}"
    if kind == "rank-connected":
        return f"rank {event['rank']} on {event['node']}: connected to PyCharm's debug server"
    if kind == "ide-not-listening":
        return f"rank {event['rank']} on {event['node']} is waiting: {event['message']}"
    if kind == "rank-failed":
        held = (
            "; held for a post-mortem: a debugger attached to it stops at the exception, and it exits with "
            "this failure when you continue or detach (or when the hold ends)"
            if event.get("held")
            else ""
        )
        tb = str(event.get("traceback") or "").rstrip()
        body = "\n" + "\n".join("    " + line for line in tb.splitlines()) if tb else ""
        return f"rank {event['rank']} on {event['node']} failed: {event.get('error')}{held}{body}"
    if kind == "job-ended":
        reason = f" ({event['failure_reason']})" if event.get("failure_reason") else ""
        return f"job ended: {event['status']}, exit code {event.get('exit_code')}{reason}"
    return None


def event_printer(as_json: bool) -> Any:
    def emit(event: dict[str, Any]) -> None:
        if as_json:
            print_json(event)
            return
        line = describe_event(event)
        if line:
            err_console.print(f"[bold cyan]remote-debug[/]: {escape(line)}", markup=True, highlight=False)

    return emit
