"""``remote-debug adopt --pid PID``: a job of this machine started without remote_debug becomes a local job.

After it the job is listed by ``jobs`` (backend "local") and ``attach``, ``stacks``, ``ssh``, ``stop`` work
on it unchanged, because it has what a launched job has: a job dir with job.json, the job's key pair and
spec, a node manifest (the node daemon's sshd, started by the job's supervisor, here
:mod:`remote_debug.laptop.machine.adopted_supervisor`) and a rank document per rank (the agent each rank got, see
:mod:`remote_debug.container.node.adopt`).

Order, so that a refusal leaves nothing behind: every rank of every node is found and checked first
(one line when any cannot be adopted); only then the job dir appears (whole, by a rename), the
supervisor starts, and the agents are queued.  If not one rank took its agent, the job is removed again.
Adopting a pid that an earlier adopt already covers answers with that job (``already``).

Each ``--pid`` is one node, in the order given (algo-1, algo-2, ...): the launcher (or the single
process) of that node.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from remote_debug.container.node.adopt import checks, procs
from remote_debug.container.node.adopt.on_node import AdoptedRank, adopt_node, node_ranks
from remote_debug.container.node.adopt.procs import ProcError, RankProcess, net_namespace, proc_info
from remote_debug.container.node_env import ENV_CODE_DIR
from remote_debug.contract import spec
from remote_debug.laptop.core.errors import BadInputError, UserError
from remote_debug.laptop.core.jobinfo import TERMINAL, JobStatus
from remote_debug.laptop.core.keys import ensure_job_key, job_secret
from remote_debug.laptop.core.paths import StatePaths, private_dir
from remote_debug.laptop.machine.job_dir import (
    NodeLayout,
    node_environment,
    node_names,
    prepare_node,
    read_job_file,
    record_supervisor,
    supervisor_process,
    write_job_file,
)
from remote_debug.oskit import osutil

STOP_GRACE_SECONDS = 30.0


@dataclass
class AdoptOutcome:
    """What ``adopt --json`` prints."""

    job: str
    already: bool
    nodes: list[str]
    ranks: list[AdoptedRank] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def adopted_jobs(paths: StatePaths) -> dict[int, str]:
    """root pid -> job name, for every adopted job of this machine that has not ended."""
    found: dict[int, str] = {}
    if not paths.jobs_dir.is_dir():
        return found
    for job_dir in paths.jobs_dir.iterdir():
        if job_dir.name.startswith("."):
            continue
        try:
            state = read_job_file(job_dir)
        except spec.ContractError:
            continue
        roots = (state.get("adopted") or {}).get("roots") or {}
        if state.get("status") in TERMINAL:
            continue
        for pid in roots.values():
            found[int(pid)] = job_dir.name
    return found


def default_name(pid: int) -> str:
    return f"adopted-{pid}-{time.strftime('%H%M%S')}"


def plan_nodes(
    pids: Sequence[int], paths: StatePaths | None = None
) -> dict[str, tuple[int, list[RankProcess], dict[int, checks.Way]]]:
    """node -> (root pid, its ranks, the way into each), every rank checked; UserError (one line) if not."""
    paths = paths or StatePaths.default()
    if len(set(pids)) != len(pids):
        raise UserError("the same --pid was given twice: give each node's launcher once")
    plans: dict[str, tuple[int, list[RankProcess], dict[int, checks.Way]]] = {}
    covered: set[int] = set()
    for node, pid in zip(node_names(len(pids)), pids, strict=True):
        try:
            proc_info(pid)
            ranks = node_ranks([pid])
            ways = checks.check_all(ranks, sees=paths.jobs_dir)
        except ProcError as exc:
            raise UserError(f"cannot adopt pid {pid}: {exc}") from None
        except checks.AdoptRefused as exc:
            raise UserError(f"cannot adopt pid {pid}: {exc}") from None
        overlap = covered & {r.pid for r in ranks}
        if overlap:
            raise UserError(f"pid {pid}'s ranks are also under another --pid: give each node's launcher once")
        covered |= {r.pid for r in ranks}
        plans[node] = (pid, ranks, ways)
    return plans


def adopt_local(
    pids: Sequence[int],
    name: str | None = None,
    *,
    paths: StatePaths | None = None,
    confirm_seconds: float = 10.0,
    plans: dict[str, tuple[int, list[RankProcess], dict[int, checks.Way]]] | None = None,
) -> AdoptOutcome:
    """Adopt the job whose node launchers are ``pids``; ``plans``: :func:`plan_nodes`' answer, when the caller
    checked first (the CLI does, so that a refusal is its only line)."""
    paths = paths or StatePaths.default()
    known = adopted_jobs(paths)
    if any(pid in known for pid in pids):
        job = next(known[pid] for pid in pids if pid in known)
        return _already(paths, job)
    plans = plans if plans is not None else plan_nodes(pids, paths)
    first = pids[0]
    name = name or default_name(first)
    try:
        spec.check_job_name(name)
    except spec.ContractError as exc:
        raise BadInputError(str(exc)) from None
    if paths.job_dir(name).exists():
        raise UserError(f"job {name} already exists: pick another --name")
    hosts = list(plans)
    key_path, public_key = ensure_job_key(paths, name)
    debug = spec.DebugSpec(
        job_name=name,
        client_public_key=public_key,
        job_secret=job_secret(key_path),
        transport=spec.Transport.LOCAL,
        options=spec.DebugOptions(),
    )
    job_dir = _create_job_dir(paths, name, debug, plans)
    try:
        _start_supervisor(job_dir)
        outcome = AdoptOutcome(job=name, already=False, nodes=hosts)
        for node, (_pid, ranks, ways) in plans.items():
            layout = NodeLayout(job_dir, node)
            rank_env = {
                **debug.to_env(),
                spec.ENV_MANIFEST_DIR: str(layout.manifest_dir),
                spec.ENV_STATE_DIR: str(layout.hook_dir),
            }
            result = adopt_node(node, [], rank_env, ranks=ranks, ways=ways, confirm_seconds=confirm_seconds)
            outcome.ranks.extend(result.ranks)
    except BaseException:
        _remove_job(job_dir)
        raise
    if all(r.state == "failed" for r in outcome.ranks):
        _remove_job(job_dir)
        raise UserError(f"no rank could be adopted: {outcome.ranks[0].note}")
    return outcome


def _already(paths: StatePaths, job: str) -> AdoptOutcome:
    job_dir = paths.job_dir(job)
    state = read_job_file(job_dir)
    nodes = list(state.get("nodes") or [])
    ranks = []
    for node in nodes:
        for doc in spec.read_rank_documents(NodeLayout(job_dir, node).manifest_dir, skip_broken=True):
            ranks.append(AdoptedRank(doc.rank, doc.pid, node, str(doc.state), "adopted before"))
    return AdoptOutcome(job=job, already=True, nodes=nodes, ranks=sorted(ranks, key=lambda r: r.rank))


def _create_job_dir(
    paths: StatePaths,
    name: str,
    debug: spec.DebugSpec,
    plans: dict[str, tuple[int, list[RankProcess], dict[int, checks.Way]]],
) -> Path:
    job_dir = paths.job_dir(name)
    private_dir(paths.root)
    paths.jobs_dir.mkdir(parents=True, exist_ok=True)
    staging = paths.jobs_dir / f".{name}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    hosts = list(plans)
    cpus = os.cpu_count() or 1
    node_plans: dict[str, Any] = {}
    code_dirs: dict[str, str] = {}
    namespaces: dict[str, str] = {}
    try:
        for node, (pid, _ranks, _ways) in plans.items():
            prepare_node(NodeLayout(staging, node), hosts, {}, cpus)
            final = NodeLayout(job_dir, node)
            cwd = procs.cwd(pid) or os.getcwd()
            env = node_environment(final, name, hosts, {}, cpus, debug.to_env())
            # an ssh session lands where the process runs, and the IDE maps that folder
            env.update({ENV_CODE_DIR: cwd, "SM_MODULE_DIR": cwd})
            node_plans[node] = {"root_pid": pid, "env": env}
            code_dirs[node] = cwd
            namespace = net_namespace(pid)
            if namespace is not None:  # a node in a network namespace: its daemon and our relay go in there too
                namespaces[node] = namespace
        state = {
            "name": name,
            "backend": "local",
            "created": time.time(),
            "command": list(proc_info(plans[hosts[0]][0]).argv),
            "source_dir": code_dirs[hosts[0]],
            "nodes": hosts,
            "nproc_per_node": max(len(r) for _p, r, _w in plans.values()),
            "status": JobStatus.IN_PROGRESS,
            "secondary_status": "Training",
            "exit_code": None,
            "failure_reason": None,
            "spec": debug.to_env(),
            "stop_grace_seconds": STOP_GRACE_SECONDS,
            "node_plans": node_plans,
            "code_dirs": code_dirs,
            "isolation": "netns" if namespaces else "loopback",
            "isolation_note": "adopted: the processes' own network",
            # node -> its network namespace (a name, or /proc/PID/ns/net); "netns" stays empty: not ours to delete
            "node_netns": namespaces,
            "node_addresses": {},
            "netns": [],
            "adopted": {
                "roots": {node: plan[0] for node, plan in plans.items()},
                # pid + start time is one process: the supervisor must not watch or signal a reuse of the pid
                "root_starts": {node: osutil.process_start_ticks(plan[0]) for node, plan in plans.items()},
            },
        }
        write_job_file(staging, state)
        os.rename(staging, job_dir)  # the job appears whole or not at all
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return job_dir


def _start_supervisor(job_dir: Path) -> None:
    with open(job_dir / "supervisor.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "remote_debug.laptop.machine.adopted_supervisor", str(job_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    record_supervisor(job_dir, proc.pid)  # pid and start time, read before the reaper can run
    threading.Thread(target=proc.wait, daemon=True).start()  # reaped when adopt runs inside a long-lived process


def _remove_job(job_dir: Path) -> None:
    """Undo a job whose adoption failed: its supervisor (and through it the node daemons), then the dir."""
    supervisor = supervisor_process(job_dir)
    # "forget": end the daemons, leave the adopted processes alone (never a stranger that got its pid)
    if supervisor is not None and supervisor.signal(signal.SIGUSR1):
        deadline = time.monotonic() + 10
        while supervisor.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    shutil.rmtree(job_dir, ignore_errors=True)
