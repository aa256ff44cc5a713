"""``remote-debug stacks JOB``: every rank's current Python stacks, for "where is it hung?".

Each rank's control channel (a thread of the rank, so it answers while the main thread is blocked
in a collective) reports ``sys._current_frames()``: no ptrace, no tracer installed, nothing left
behind.  Reached through one SSH connection per node, like ``attach``.  A rank of a job on this
machine whose channel does not answer (a C call holding the GIL starves its thread) is read with
py-spy instead, marked so.  The report's shape: :class:`remote_debug.laptop.wire.documents.StacksReport`.

``stacks --no-hook`` reads every rank with py-spy alone (:mod:`remote_debug.container.node.pyspy`): a job
of this machine (its ranks' pids from their rank documents, else found under its node processes), or
any process tree (``--pid``: a torchrun launcher or one rank).  No ssh, no control channel, so it works
for jobs started without our hook too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from remote_debug.container.node import pyspy
from remote_debug.container.node.adopt.procs import ProcError, find_ranks, proc_info, rank_of, read_environ
from remote_debug.contract import spec
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.connection.rank_control import fan_out
from remote_debug.laptop.core.backend import Backend
from remote_debug.laptop.core.errors import JobNotRunningError, UserError
from remote_debug.laptop.core.jobinfo import TERMINAL, JobInfo, MachineJobDetails
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.machine.job_dir import read_job_file
from remote_debug.laptop.platforms import backend_for, job_ref
from remote_debug.laptop.wire.documents import RankStacks, StacksReport, StackThread

PYSPY = "py-spy"
CONTROL = "control"
SETTLE_SECONDS = 2.0  # --no-hook on a job still starting: the ranks found stop changing for this long
_OVER = (spec.RankState.FINISHED, spec.RankState.FAILED)


def collect_stacks(
    connection: JobConnection, ranks: spec.RankSelection = None, timeout: float = 30.0, *, all_threads: bool = False
) -> StacksReport:
    """Every selected rank's threads (:class:`StacksReport`), ranks in order - after a failure the root
    cause first (``spec.failure_order``), marked ``root_cause``; a rank held with it, ``held_for``;
    a rank that cannot answer has an ``error``.  The debugger's own threads (debugpy's, ours) only with
    ``all_threads``; a rank held for a post-mortem shows where it raised, with the exception line."""
    info = connection.require_running()
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
    report: StacksReport = {
        "job": connection.job,
        "ranks": _in_failure_order(results, [r for m in manifests.values() for r in m.ranks]),
    }
    if info.code_dirs:
        report["code_dirs"] = dict(info.code_dirs)
    return report


def _in_failure_order(results: list[RankStacks], documents: Sequence[spec.RankEndpoint]) -> list[RankStacks]:
    """``results`` in rank order, or after a failure the root cause first (marked), then the others that
    failed, then the rest; a rank held with a failed one says which (``documents``: every rank's)."""
    cause = spec.root_cause(documents)
    order = {(r.rank, r.pid): i for i, r in enumerate(spec.failure_order(documents))}
    for doc in documents:
        for out in results:
            if (out["rank"], out["pid"]) != (doc.rank, doc.pid):
                continue
            if doc.world_size > 1 and cause is not None and (cause.rank, cause.pid) == (doc.rank, doc.pid):
                out["root_cause"] = True
            if doc.held_for is not None:
                out["held_for"] = doc.held_for
    return sorted(results, key=lambda r: (order.get((r["rank"], r["pid"]), len(order)), r["rank"], r["pid"] or 0))


def _rank_stacks(connection: JobConnection, node: str, r: spec.RankEndpoint, *, all_threads: bool) -> RankStacks:
    out: RankStacks = {
        "rank": r.rank,
        "node": node,
        "pid": r.pid,
        "state": str(r.state),
        "hold_seconds_left": r.hold_seconds_left(time.time()),
        "source": CONTROL,
        "threads": [],
        "error": None,
    }
    if r.state in _OVER:  # first: a rank that died without a last word has no control channel either
        out["error"] = f"rank {r.rank} has {r.state}"
        return out
    if not r.control_port:
        out["error"] = f"rank {r.rank} has no control channel ({r.ide} rank, or started by an older hook)"
        return out
    try:
        reply = connection.control(node).stacks_reply(r, all_threads=all_threads)
    except (OSError, UserError) as exc:
        out["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # The rank's pid means something here only when its processes run on this machine (no pid
        # namespace between us and a local job's ranks); a SageMaker rank's pid is the instance's.
        if connection.backend.capabilities.runs_here and r.pid:
            _pyspy_instead(out, r, all_threads=all_threads)
        return out
    out["threads"] = [_thread(asdict(t)) for t in reply.threads]
    if reply.collectives is not None:
        out["collectives"] = [
            {
                "group": g.group,
                "desc": g.desc,
                "ranks": g.ranks,
                "last_entered": g.last_entered,
                "last_completed": g.last_completed,
                "op": g.op,
            }
            for g in reply.collectives
        ]
    return out


def _thread(t: dict[str, Any]) -> StackThread:
    """A control channel's ThreadStack (as a dict) as the report has it."""
    return {"name": t["name"], "frames": t["frames"], "exception": t["exception"], "internal": t["internal"]}


def _pyspy_instead(out: RankStacks, r: spec.RankEndpoint, *, all_threads: bool) -> None:
    """The stack of a rank whose control channel did not answer, from py-spy (``out`` updated)."""
    control_error = out["error"] or ""
    why = _not_that_rank(r.pid, r.rank)
    if why:
        out["error"] = f"{control_error} (and not read with py-spy: {why})"
        return
    try:
        process = pyspy.dump(r.pid)
    except pyspy.PyspyError as exc:
        out["error"] = f"{control_error} (and not read with py-spy: {exc})"
        return
    _add_pyspy_fields(out, process, all_threads=all_threads)
    out["control_error"] = control_error
    out["error"] = None


def _not_that_rank(pid: int, rank: int) -> str | None:
    """Why ``pid`` is not (or no longer) the process of ``rank`` (None: it is, or cannot be told).

    A rank document's pid outlives its process (a SIGKILLed rank never updates it), and the kernel reuses
    pids: the process must still carry that rank's variables before we read it as that rank."""
    try:
        info = proc_info(pid)
        found = rank_of(pid, read_environ(pid), info.argv)
    except ProcError as exc:
        return str(exc)
    if found is not None and found.rank != rank:
        return f"pid {pid} is now another process"
    return None


# --- stacks --no-hook -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankTarget:
    """One rank to read with py-spy: its number, where, its pid; ``error`` when it cannot be read."""

    rank: int
    node: str | None
    pid: int
    state: str | None = None  # the rank document's state, when there is one
    error: str | None = None


def collect_pid_stacks(pid: int, ranks: spec.RankSelection = None, *, all_threads: bool = False) -> StacksReport:
    """``stacks --no-hook --pid PID``: the ranks of the process tree at ``pid`` (a launcher or one rank),
    each read with py-spy: ``{"pid", "job": None, "source": "py-spy", "ranks": [...]}``."""
    pyspy.find_pyspy()  # missing: one line before anything else
    problem = pyspy.access_problem(pid)  # gone / another user's: said plainly, not "no ranks found"
    if problem:
        raise UserError(problem)
    try:
        found = find_ranks(pid)
    except ProcError as exc:
        raise UserError(str(exc)) from None
    if not found:
        raise UserError(
            f"no Python ranks under pid {pid} (no Python process with torchrun/MPI rank variables, and pid "
            f"{pid} is not Python itself): give the pid of a rank or of its launcher"
        )
    targets = [RankTarget(r.rank, None, r.pid) for r in found]
    chosen = _select(targets, ranks, f"under pid {pid}")
    return {"pid": pid, "job": None, "source": PYSPY, "ranks": _read_all(chosen, all_threads=all_threads)}


def collect_job_stacks_no_hook(
    job: str,
    ranks: spec.RankSelection = None,
    timeout: float = 30.0,
    *,
    all_threads: bool = False,
    paths: StatePaths | None = None,
) -> StacksReport:
    """``stacks --no-hook JOB`` for a job of this machine: ``{"job", "source": "py-spy", "ranks": [...]}``."""
    ref = job_ref(job)
    # a training-job ARN names a SageMaker job: refused without asking AWS
    backend = None if ref.region is not None else backend_for(ref, paths)
    if backend is None or not backend.capabilities.runs_here:
        raise UserError(
            f"stacks --no-hook is for jobs of this machine (for now): {ref.name} is a SageMaker job, "
            f"use 'remote-debug stacks {ref.name}' (through its hook)"
        )
    pyspy.find_pyspy()
    info = backend.describe(ref.name)
    if info.status in TERMINAL:
        raise JobNotRunningError(f"job {ref.name} is {info.status}: no processes to read")
    expected = ranks if ranks is not None else range(len(info.nodes) * max(1, info.nproc_per_node))
    deadline = time.monotonic() + timeout
    settled_since, last = time.monotonic(), frozenset[tuple[int, int]]()
    while True:
        targets = job_rank_targets(backend, info)
        seen = frozenset((t.rank, t.pid) for t in targets)
        if seen != last:
            settled_since, last = time.monotonic(), seen
        now = time.monotonic()
        if (
            {t.rank for t in targets} >= set(expected)
            or now > deadline
            or (targets and now - settled_since >= SETTLE_SECONDS)
        ):
            break
        time.sleep(0.3)
    if not targets:
        raise UserError(f"no rank processes of job {ref.name} found within {timeout:g} s (still starting?)")
    chosen = _select(targets, ranks, f"of job {ref.name}")
    try:
        documents = [r for m in backend.manifests(ref.name).values() if m is not None for r in m.ranks]
    except spec.ContractError:
        documents = []
    results = _read_all(chosen, all_threads=all_threads)
    report: StacksReport = {"job": ref.name, "source": PYSPY, "ranks": _in_failure_order(results, documents)}
    if info.code_dirs:
        report["code_dirs"] = dict(info.code_dirs)
    return report


def job_rank_targets(backend: Backend, info: JobInfo) -> list[RankTarget]:
    """The ranks of a running job of this machine: from each node's rank documents (the hook's ranks
    say who they are), and for a node whose ranks did not all write one (a job started without our
    hook, or ranks that run with ``python -I``), from the processes under its node process."""
    try:
        manifests = backend.manifests(info.name)
    except spec.ContractError:
        manifests = {}
    node_pids: dict[str, Any] = {}
    machine = info.details_of(MachineJobDetails)
    if machine is not None:
        try:
            node_pids = dict(read_job_file(Path(machine.job_dir)).get("node_pids") or {})
        except spec.ContractError:
            pass
    found: dict[int, RankTarget] = {}
    for node in info.nodes:
        manifest = manifests.get(node)
        documented = manifest.ranks if manifest is not None else []
        for r in documented:
            error = f"rank {r.rank} has {r.state}" if r.state in _OVER else None
            if error is None and not r.pid:
                error = f"rank {r.rank}'s document has no pid"
            found[r.rank] = RankTarget(r.rank, node, r.pid, str(r.state), error)
        node_pid = node_pids.get(node)
        if len(documented) >= max(1, info.nproc_per_node) or not isinstance(node_pid, int):
            continue
        try:
            under = find_ranks(node_pid)
        except ProcError:
            continue  # the node process ended (its job is ending) or is not ours
        for rp in under:
            found.setdefault(rp.rank, RankTarget(rp.rank, node, rp.pid))
    return [found[r] for r in sorted(found)]


def _select(targets: Sequence[RankTarget], ranks: spec.RankSelection, where: str) -> list[RankTarget]:
    if ranks is None:
        return list(targets)
    unknown = sorted(set(ranks) - {t.rank for t in targets})
    if unknown:
        have = ",".join(str(t.rank) for t in targets) or "none"
        raise UserError(f"ranks {unknown} not found {where} (found: {have})")
    return [t for t in targets if t.rank in ranks]


def _read_all(targets: Sequence[RankTarget], *, all_threads: bool) -> list[RankStacks]:
    results = fan_out(list(targets), lambda t: _read_rank(t, all_threads=all_threads))
    return sorted(results, key=lambda r: (r["rank"], r["pid"] or 0))


def _read_rank(target: RankTarget, *, all_threads: bool) -> RankStacks:
    out: RankStacks = {
        "rank": target.rank,
        "node": target.node,
        "pid": target.pid,
        "state": target.state,
        "hold_seconds_left": None,
        "source": PYSPY,
        "threads": [],
        "error": target.error,
    }
    if out["error"] is None and target.state is not None:
        out["error"] = _not_that_rank(target.pid, target.rank)  # a rank document's pid may be stale
    if out["error"] is not None:
        return out
    try:
        process = pyspy.dump(target.pid)
    except pyspy.PyspyError as exc:
        out["error"] = str(exc)
        return out
    _add_pyspy_fields(out, process, all_threads=all_threads)
    return out


def _add_pyspy_fields(out: RankStacks, process: pyspy.ProcessDump, *, all_threads: bool) -> None:
    threads: list[StackThread] = [
        {
            "name": t.name,
            "frames": [{"file": f.file, "line": f.line, "function": f.function} for f in t.frames],
            "exception": None,
            "internal": t.internal,
            "main": t.main,
            "os_id": t.os_id,
            "active": t.active,
            "owns_gil": t.owns_gil,
        }
        for t in process.threads
        if all_threads or not t.internal
    ]
    out["source"] = PYSPY
    out["threads"] = threads
    out["blocked_in_native"] = pyspy.blocked_in_native(process.main_thread)
    out["nonblocking"] = process.nonblocking
    out["dump_seconds"] = round(process.seconds, 4)


# --- output -----------------------------------------------------------------------------------------


def format_stacks(report: StacksReport) -> str:
    """Human-readable, like a Python traceback per thread (innermost frame last): ``stacks --flat``, every rank
    one after another (the default groups them: ``stack_classes.format_classes``)."""
    lines: list[str] = []
    for r in report["ranks"]:
        held = ""
        if r.get("state") == spec.RankState.HELD:
            held_for = r.get("held_for")
            phrase = spec.held_phrase(r.get("hold_seconds_left"))
            held = f": {phrase if held_for is None else spec.held_with_phrase(held_for)}"
        held += " (root cause)" if r.get("root_cause") else ""
        where = ", ".join(str(x) for x in (r.get("node"), r.get("pid") and f"pid {r['pid']}") if x)
        if r.get("source") == PYSPY:
            where += ", from py-spy" + (" without stopping it" if r.get("nonblocking") else "")
        lines.append(f"rank {r['rank']} ({where}){held}")
        if r.get("control_error"):
            lines.append(f"  its control channel did not answer ({r['control_error']}): read with py-spy")
        if r.get("error"):
            lines.append(f"  unavailable: {r['error']}")
        for t in r["threads"]:
            what = " (debugger)" if t.get("internal") else ""
            if t.get("exception"):
                what = " (where it raised; the rank waits for a post-mortem debugger)"
                if r.get("held_for") is not None:
                    what = f" (where it raised, held with rank {r['held_for']}: a consequence of that failure)"
            if t.get("main") and r.get("blocked_in_native"):
                what += " (blocked in native code)"
            lines.append(f"  thread {t['name']}{what}:")
            for f in t["frames"]:
                lines.append(f'    File "{f["file"]}", line {f["line"]}, in {f["function"]}')
            if t.get("exception"):
                lines.append(f"  {t['exception']}")
        lines.append("")
    return "\n".join(lines).rstrip("\n")
