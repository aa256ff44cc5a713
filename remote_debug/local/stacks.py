"""``remote-debug stacks JOB``: every rank's current Python stacks, for "where is it hung?".

Each rank's control channel (a thread of the rank, so it answers while the main thread is blocked
in a collective) reports ``sys._current_frames()``: no ptrace, no tracer installed, nothing left
behind.  Reached through one SSH connection per node, like ``attach``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from remote_debug import spec
from remote_debug.local.attach import endpoint_for, require_running, wait_for_manifests, write_ssh_entries
from remote_debug.local.backends.base import Backend
from remote_debug.local.errors import UserError
from remote_debug.local.paths import StatePaths
from remote_debug.local.tunnels import NodeTunnel


def collect_stacks(
    backend: Backend,
    job: str,
    ranks: spec.RankSelection = None,
    paths: StatePaths | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """``{"job", "ranks": [{"rank", "node", "pid", "threads": [{"name", "frames": [{"file", "line",
    "function"}]}], "error"}]}``, ranks in order; a rank that cannot answer has an ``error``."""
    paths = paths or StatePaths.default()
    require_running(backend, job)
    manifests = wait_for_manifests(backend, job, timeout, lambda _event: None)
    selected = [
        (node, r)
        for node, m in manifests.items()
        for r in m.ranks
        if (ranks is None or r.rank in ranks) and (r.state != "skipped" or r.control_port)
    ]
    if ranks is not None:
        unknown = sorted(set(ranks) - {r.rank for _node, r in selected})
        if unknown:
            raise UserError(f"ranks {unknown} of job {job} have not reported (or are not debugged)")
    # only now: bad input (unknown ranks) must not leave ssh entries behind
    entries = write_ssh_entries(job, manifests, paths, edit_user_config=False, emit=lambda _event: None)
    tunnels = {e.node: NodeTunnel(endpoint_for(e, paths)) for e in entries}
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(selected)))) as pool:
            results = list(pool.map(lambda item: _rank_stacks(tunnels[item[0]], *item), selected))
    finally:
        for tunnel in tunnels.values():
            tunnel.close()
    return {"job": job, "ranks": sorted(results, key=lambda r: int(r["rank"]))}


def _rank_stacks(tunnel: NodeTunnel, node: str, r: spec.RankEndpoint) -> dict[str, Any]:
    out: dict[str, Any] = {"rank": r.rank, "node": node, "pid": r.pid, "threads": [], "error": None}
    if not r.control_port:
        out["error"] = f"rank {r.rank} has no control channel ({r.ide} rank, or started by an older hook)"
        return out
    if r.state in ("finished", "failed"):
        out["error"] = f"rank {r.rank} has {r.state}"
        return out
    try:
        reply = tunnel.request(r.control_port, {"op": "stacks"})
    except (OSError, UserError) as exc:
        out["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return out
    out["threads"] = [
        {
            "name": str(t.get("name", "")),
            "frames": [
                {"file": str(f.get("file", "")), "line": int(f.get("line", 0)), "function": str(f.get("function", ""))}
                for f in t.get("frames", [])
            ],
        }
        for t in reply.get("threads", [])
    ]
    return out


def format_stacks(report: dict[str, Any]) -> str:
    """Human-readable, like a Python traceback per thread (innermost frame last)."""
    lines: list[str] = []
    for r in report["ranks"]:
        lines.append(f"rank {r['rank']} ({r['node']}, pid {r['pid']})")
        if r.get("error"):
            lines.append(f"  unavailable: {r['error']}")
        for t in r["threads"]:
            lines.append(f"  thread {t['name']}:")
            for f in t["frames"]:
                lines.append(f"    File \"{f['file']}\", line {f['line']}, in {f['function']}")
        lines.append("")
    return "\n".join(lines).rstrip("\n")
