"""What ``remote-debug adopt --list`` offers: this user's running Python jobs, one entry per process tree.

A launcher (a process whose children are ranks: torchrun, mpirun) is one entry with its rank count; a
rank whose parent is no launcher is one; any other Python process of ours that is not under one of those
is a single-process candidate, as in VS Code's own "attach to process" pick.  Our own processes (this
CLI, jobs launched by remote-debug, their helpers) are named by their job or left out.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from remote_debug.container.node.adopt import checks
from remote_debug.container.node.adopt.procs import (
    ProcError,
    children_map,
    cwd,
    descendants,
    find_ranks,
    proc_info,
    python_version,
    rank_of,
    read_environ,
)
from remote_debug.container.node.bootstrap import is_helper
from remote_debug.contract import spec

HELPER_NAMES = ("remote-debug", "debugpy", "pydevd", "code-server", "pip")


@dataclass(frozen=True)
class Candidate:
    pid: int
    command: str
    cwd: str
    kind: str  # "launcher" | "rank" | "process"
    ranks: int
    python: str | None
    adoptable: bool
    reason: str | None
    job: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ours(argv: tuple[str, ...]) -> bool:
    return is_helper(argv) or any(name in arg for arg in argv[:3] for name in HELPER_NAMES)


def list_candidates(adopted: dict[int, str]) -> list[Candidate]:
    """Candidates among this uid's processes (no other uid's is read: root sees them all); ``adopted``: root pid
    -> job of jobs adopted already."""
    children = children_map()
    me = os.getpid()
    # never ourselves, our own children, or our ancestors (the shell, an IDE, a test runner that started us)
    skip = {me, *_ancestors(me), *descendants(me, children)}
    out: list[Candidate] = []
    covered: set[int] = set()
    pids = sorted(p for kids in children.values() for p in kids)
    for pid in pids:
        if pid in skip or pid in covered:
            continue
        try:
            info = proc_info(pid)
            if info.uid != os.geteuid():
                continue
            env = read_environ(pid)
        except ProcError:
            continue
        version = python_version(pid)
        kids = children.get(pid, [])
        kid_ranks = []
        for kid in kids:
            try:
                # another user's child is no rank of ours (adopt refuses it), and root could read it: skip it
                # before reading anything it chose (its environment, its executable)
                if proc_info(kid).uid != os.geteuid():
                    continue
                kid_env = read_environ(kid)
            except ProcError:
                continue
            if python_version(kid) and rank_of(kid, kid_env, ()) is not None:
                kid_ranks.append(kid)
        if kid_ranks:
            kind = "launcher"
        elif version and rank_of(pid, env, info.argv) is not None:
            kind = "rank"
        elif version and not _ours(info.argv):
            kind = "process"
        else:
            continue
        if kind != "process":
            # a launcher's or a rank's tree is that job; a plain Python process may well have started another job
            # (a wrapper script running torchrun), which is then offered on its own
            covered.update(descendants(pid, children))
        out.append(_candidate(pid, info.argv, env, kind, version, adopted, children))
    order = {"launcher": 0, "rank": 1, "process": 2}
    return sorted(out, key=lambda c: (order[c.kind], -c.pid))


def _ancestors(pid: int) -> list[int]:
    found: list[int] = []
    while pid > 1 and len(found) < 64:
        try:
            pid = proc_info(pid).ppid
        except ProcError:
            break
        found.append(pid)
    return found


def _candidate(
    pid: int,
    argv: tuple[str, ...],
    env: dict[str, str],
    kind: str,
    version: tuple[int, int] | None,
    adopted: dict[int, str],
    children: dict[int, list[int]],
) -> Candidate:
    job = adopted.get(pid) or env.get(spec.ENV_JOB)
    reason: str | None = None
    ranks = 0
    try:
        found = find_ranks(pid, children)
        ranks = len(found)
        checks.check_all(found)
    except (ProcError, checks.AdoptRefused) as exc:
        reason = str(exc)
    if job is not None:
        reason = f"already debuggable as job {job}"
    return Candidate(
        pid=pid,
        command=" ".join(argv)[:300],
        cwd=cwd(pid) or "",
        kind=kind,
        ranks=ranks,
        python=f"{version[0]}.{version[1]}" if version else None,
        adoptable=reason is None,
        reason=reason,
        job=job,
    )
