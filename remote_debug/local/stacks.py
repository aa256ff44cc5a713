"""``remote-debug stacks JOB``: every rank's current Python stacks, for "where is it hung?".

Each rank's control channel (a thread of the rank, so it answers while the main thread is blocked
in a collective) reports ``sys._current_frames()``: no ptrace, no tracer installed, nothing left
behind.  Reached through one SSH connection per node, like ``attach``.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from remote_debug import spec
from remote_debug.local.connection import JobConnection
from remote_debug.local.errors import UserError
from remote_debug.local.rank_control import fan_out


def collect_stacks(
    connection: JobConnection, ranks: spec.RankSelection = None, timeout: float = 30.0, *, all_threads: bool = False
) -> dict[str, Any]:
    """``{"job", "ranks": [{"rank", "node", "pid", "state", "hold_seconds_left", "threads": [{"name",
    "frames": [{"file", "line", "function"}], "exception", "internal"}], "error"}]}``, ranks in order;
    a rank that cannot answer has an ``error``.  The debugger's own threads (debugpy's, ours) only with
    ``all_threads``; a rank held for a post-mortem shows where it raised, with the exception line."""
    connection.require_running()
    manifests = connection.wait_for_manifests(timeout)
    selected = [
        (node, r)
        for node, m in manifests.items()
        for r in m.ranks
        if (ranks is None or r.rank in ranks) and (r.state != spec.RankState.SKIPPED or r.control_port)
    ]
    if ranks is not None:
        unknown = sorted(set(ranks) - {r.rank for _node, r in selected})
        if unknown:
            raise UserError(f"ranks {unknown} of job {connection.job} have not reported (or are not debugged)")
    # only now: bad input (unknown ranks) must not leave ssh entries behind
    connection.write_ssh_entries(manifests, edit_user_config=False)
    with connection:
        for node in {node for node, _r in selected}:
            connection.tunnel(node)  # created here, not from the pool's threads
        results = fan_out(selected, lambda item: _rank_stacks(connection, *item, all_threads=all_threads))
    return {"job": connection.job, "ranks": sorted(results, key=lambda r: int(r["rank"]))}


def _rank_stacks(connection: JobConnection, node: str, r: spec.RankEndpoint, *, all_threads: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rank": r.rank, "node": node, "pid": r.pid, "state": str(r.state),
        "hold_seconds_left": r.hold_seconds_left(time.time()), "threads": [], "error": None,
    }
    if not r.control_port:
        out["error"] = f"rank {r.rank} has no control channel ({r.ide} rank, or started by an older hook)"
        return out
    if r.state in (spec.RankState.FINISHED, spec.RankState.FAILED):
        out["error"] = f"rank {r.rank} has {r.state}"
        return out
    try:
        threads = connection.control(node).stacks(r, all_threads=all_threads)
    except (OSError, UserError) as exc:
        out["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return out
    out["threads"] = [asdict(t) for t in threads]
    return out


def format_stacks(report: dict[str, Any]) -> str:
    """Human-readable, like a Python traceback per thread (innermost frame last)."""
    lines: list[str] = []
    for r in report["ranks"]:
        held = f": {spec.held_phrase(r.get('hold_seconds_left'))}" if r.get("state") == spec.RankState.HELD else ""
        lines.append(f"rank {r['rank']} ({r['node']}, pid {r['pid']}){held}")
        if r.get("error"):
            lines.append(f"  unavailable: {r['error']}")
        for t in r["threads"]:
            what = " (debugger)" if t.get("internal") else ""
            if t.get("exception"):
                what = " (where it raised; the rank waits for a post-mortem debugger)"
            lines.append(f"  thread {t['name']}{what}:")
            for f in t["frames"]:
                lines.append(f"    File \"{f['file']}\", line {f['line']}, in {f['function']}")
            if t.get("exception"):
                lines.append(f"  {t['exception']}")
        lines.append("")
    return "\n".join(lines).rstrip("\n")
