"""A job that exists only in memory, for unit tests of what runs above the Backend seam (the attach loop).

:class:`FakeBackend` is a :class:`~remote_debug.laptop.core.backend.Backend` whose job a test scripts: its
status, its nodes' manifests and ranks (:meth:`FakeBackend.add_rank`, :meth:`FakeBackend.restart_rank`,
:meth:`FakeBackend.end`), and what happens on each ``describe`` (:attr:`FakeBackend.steps`: the attach
loop describes the job once per round, so a step is "what changed by the next round").

:class:`FakeConnection` is a real :class:`JobConnection` over it (describe, waiting for the manifests,
reading them: the real code) whose SSH half is faked: no ssh config is written, no sshd is reached;
:class:`FakeTunnel` hands out local ports and records what was forwarded, :class:`FakeControl` answers
the ranks' control requests and records them.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

from remote_debug.contract import spec
from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.connection.rank_control import Listening, RankControl
from remote_debug.laptop.connection.tunnels import NodeTunnel
from remote_debug.laptop.core.backend import Backend, Capabilities
from remote_debug.laptop.core.errors import UnknownJobError
from remote_debug.laptop.core.jobinfo import JobInfo, JobStatus
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.wire import events

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX"

Step = Callable[["FakeBackend"], object]  # what it returns is ignored


class FakeBackend(Backend):
    """One job, ``job``, on ``nodes`` nodes; every node has published its sshd, no rank has reported yet."""

    name = "fake"
    # runs_here: the attach reads the manifests at its fast local pace (a unit test has no time to lose)
    capabilities = Capabilities(runs_here=True, remote=False)

    def __init__(self, job: str = "train", nodes: int = 1, nproc_per_node: int = 2, code_dir: str = "/code") -> None:
        self.job, self.nproc_per_node = job, nproc_per_node
        self.status = JobStatus.IN_PROGRESS
        self.exit_code: int | None = None
        self.failure_reason: str | None = None
        self.nodes: dict[str, spec.NodeManifest] = {
            f"algo-{n}": spec.NodeManifest(
                job_name=job,
                node=f"algo-{n}",
                hosts=[f"algo-{i}" for i in range(1, nodes + 1)],
                sshd_host=spec.LOOPBACK,
                sshd_port=2222,
                ssh_user="root",
                host_public_key=HOST_KEY,
                code_dir=code_dir,
                state=spec.NodeState.RUNNING,
            )
            for n in range(1, nodes + 1)
        }
        self.steps: list[Step] = []  # one runs at the start of each describe, in order
        self.describes = 0
        self._pids = itertools.count(1000)

    @classmethod
    def create(cls, paths: StatePaths | None = None, *, region: str | None = None) -> FakeBackend:
        return cls()

    # --- the script -------------------------------------------------------------------------------

    def add_rank(
        self,
        rank: int,
        *,
        node: str = "algo-1",
        port: int | None = None,
        state: spec.RankState = spec.RankState.LISTENING,
        ide: spec.RankDebugger = spec.RankDebugger.DEBUGPY,
        control_port: int = 0,
        error: str | None = None,
    ) -> spec.RankEndpoint:
        """A rank process reports itself (replacing any earlier document of that rank)."""
        world = len(self.nodes) * self.nproc_per_node
        endpoint = spec.RankEndpoint(
            rank=rank,
            local_rank=rank % self.nproc_per_node,
            world_size=world,
            port=5700 + rank if port is None else port,
            pid=next(self._pids),
            state=state,
            ide=ide,
            control_port=control_port,
            error=error,
        )
        ranks = [r for r in self.nodes[node].ranks if r.rank != rank]
        self.nodes[node].ranks = sorted([*ranks, endpoint], key=lambda r: r.rank)
        return endpoint

    def rank(self, rank: int) -> spec.RankEndpoint:
        return next(r for m in self.nodes.values() for r in m.ranks if r.rank == rank)

    def restart_rank(self, rank: int, *, port: int) -> spec.RankEndpoint:
        """``remote-debug run``: a new process for the rank (a new pid), listening on ``port``."""
        node = next(n for n, m in self.nodes.items() if any(r.rank == rank for r in m.ranks))
        self.nodes[node].run += 1
        return self.add_rank(rank, node=node, port=port)

    def fail_rank(self, rank: int, error: str) -> None:
        """The rank died of an uncaught exception (its last word in its document)."""
        r = self.rank(rank)
        r.state, r.error, r.port = spec.RankState.FAILED, error, 0
        r.traceback = f"Traceback (most recent call last):\n  ...\n{error}\n"

    def end(self, status: JobStatus = JobStatus.COMPLETED, *, failure_reason: str | None = None) -> None:
        self.status, self.failure_reason = status, failure_reason
        self.exit_code = 0 if status == JobStatus.COMPLETED else 1
        for m in self.nodes.values():
            m.state = spec.NodeState.COMPLETED if status == JobStatus.COMPLETED else spec.NodeState.FAILED

    # --- Backend ----------------------------------------------------------------------------------

    def has_job(self, job: str) -> bool:
        return job == self.job

    def list_jobs(self) -> list[JobInfo]:
        return [self.describe(self.job)]

    def describe(self, job: str) -> JobInfo:
        if job != self.job:
            raise UnknownJobError(f"unknown job {job!r}")
        self.describes += 1
        if self.steps:
            self.steps.pop(0)(self)
        return JobInfo(
            name=job,
            backend=self.name,
            status=self.status,
            secondary_status="Training" if self.status == JobStatus.IN_PROGRESS else str(self.status),
            nodes=sorted(self.nodes),
            nproc_per_node=self.nproc_per_node,
            exit_code=self.exit_code,
            failure_reason=self.failure_reason,
        )

    def manifests(self, job: str) -> dict[str, spec.NodeManifest | None]:
        # copies: the attach keeps what it read, and a later step must not change that behind its back
        return {node: copy.deepcopy(m) for node, m in self.nodes.items()}

    def stop(self, job: str) -> JobInfo:
        self.end(JobStatus.STOPPED)
        return self.describe(job)

    def relay(self, job: str, node: str, port: int, stdin: BinaryIO, stdout: BinaryIO) -> int:
        raise AssertionError("a fake job has no sshd to relay to")


@dataclass
class Forward:
    remote_port: int
    local_port: int
    exclusive: str | None


class FakeTunnel:
    """A node's SSH connection, as the IDE sides use it: forwards get local ports, nothing is opened."""

    _ports = itertools.count(40000)

    def __init__(self, node: str) -> None:
        self.node = node
        self.forwards: dict[int, Forward] = {}  # remote port -> its forward
        self.retargeted: list[tuple[int, int]] = []
        self.alive = True
        self.closed = False

    def forward(self, remote_port: int, *, exclusive: str | None = None, **_: Any) -> int:
        existing = self.forwards.get(remote_port)
        if existing is None:
            existing = self.forwards[remote_port] = Forward(remote_port, next(self._ports), exclusive)
        return existing.local_port

    def retarget(self, old_remote: int, new_remote: int) -> bool:
        self.retargeted.append((old_remote, new_remote))
        moved = self.forwards.pop(old_remote, None)
        if moved is None:
            return False
        self.forwards[new_remote] = Forward(new_remote, moved.local_port, moved.exclusive)
        return True

    def ensure_connected(self) -> bool:
        return False  # never dropped: nothing to reconnect

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeControl:
    """The control channels of a node's ranks: ``listen`` starts a lazy rank's listener on its port + 100."""

    node: str
    requests: list[tuple[str, int]] = field(default_factory=list)  # (op, rank)

    def listen(self, rank: spec.RankEndpoint) -> Listening:
        self.requests.append((spec.ControlOp.LISTEN, rank.rank))
        return Listening(port=rank.port or rank.control_port + 100, detail=None)

    def connect(self, rank: spec.RankEndpoint) -> Listening:
        self.requests.append((spec.ControlOp.CONNECT, rank.rank))
        return Listening(port=rank.port, detail="connecting")

    def pause_safe(self, rank: spec.RankEndpoint) -> str | None:
        self.requests.append((spec.ControlOp.PAUSE_SAFE, rank.rank))
        return "process-group timeout raised"

    def run_on(self, rank: spec.RankEndpoint) -> str | None:
        self.requests.append((spec.ControlOp.RUN_ON, rank.rank))
        return "was waiting"


class FakeConnection(JobConnection):
    """The real JobConnection over a backend, with its SSH half faked (see the module's doc)."""

    def __init__(self, backend: Backend, job: str, paths: StatePaths | None = None, emit: events.Emit = events.ignore):
        super().__init__(backend, job, paths, emit)
        self.fake_tunnels: dict[str, FakeTunnel] = {}
        self.controls: dict[str, FakeControl] = {}
        self.closed = False

    def write_ssh_entries(
        self, manifests: dict[str, spec.NodeManifest], *, edit_user_config: bool
    ) -> list[ssh_config.HostEntry]:
        self.entries = []  # nothing written: no ssh will read it
        return []

    def connect(self) -> dict[str, NodeTunnel]:
        for node in self.manifests():
            self.tunnel(node)
            self.emit(events.NodeConnected(node=node, alias=f"{self.job}-{node}"))
        return self.tunnels

    def tunnel(self, node: str) -> NodeTunnel:
        if node not in self.fake_tunnels:
            self.fake_tunnels[node] = FakeTunnel(node)
            self.tunnels[node] = cast(NodeTunnel, self.fake_tunnels[node])
        return self.tunnels[node]

    def control(self, node: str) -> RankControl:
        return cast(RankControl, self.controls.setdefault(node, FakeControl(node)))

    def close(self) -> None:
        self.closed = True
        super().close()
