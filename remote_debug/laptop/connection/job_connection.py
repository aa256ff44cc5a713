"""One way to reach a job: the path every laptop command takes from a job name to its nodes.

    describe (running? debuggable?) -> wait for the nodes' manifests -> pinned ssh Host entries ->
    one SSH connection (:class:`NodeTunnel`) per node -> a rank's control channel (:class:`RankControl`)

``attach``, ``ssh``, ``ssh-config`` and ``stacks`` (and the coming ``sync``/``run``) all go through
:class:`JobConnection`; they differ only in how far along that path they go and what they do at the
end.  Nothing here knows about IDEs.
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

from remote_debug.contract import spec
from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.connection.proxy import proxy_command
from remote_debug.laptop.connection.rank_control import RankControl, local_port_guard
from remote_debug.laptop.connection.tunnels import NodeEndpoint, NodeTunnel
from remote_debug.laptop.core import interrupts, keys
from remote_debug.laptop.core.backend import Backend
from remote_debug.laptop.core.errors import JobNotRunningError, UserError
from remote_debug.laptop.core.jobinfo import TERMINAL, JobInfo, JobRef, JobStatus
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.platforms import backend_for, job_ref
from remote_debug.laptop.wire import events

POLL_SECONDS = 0.3  # how often waiting loops (manifests here, the job in attach) look again
# A wait for the nodes' manifests that lasts: after WAIT_NOTE_AFTER seconds it says what it looks for and where
# (the backend's waiting_for: log group, region, profile), then again every WAIT_NOTE_EVERY seconds.
WAIT_NOTE_AFTER = 5.0
WAIT_NOTE_EVERY = 10.0
# a node that published no sshd and is over, or said why: it will not get one
_NODE_OVER = (spec.NodeState.COMPLETED, spec.NodeState.FAILED, spec.NodeState.STOPPED)
# a job in these states is taking its nodes (and their sshd) down: a dropped tunnel is no fault
_JOB_ENDING = (*TERMINAL, JobStatus.STOPPING)
_SECONDARY_ENDING = ("Uploading", "Stopping")  # SageMaker's SecondaryStatus after training ended


def host_entries(job: str, manifests: dict[str, spec.NodeManifest], paths: StatePaths) -> list[ssh_config.HostEntry]:
    """The ssh Host entry of every node: its sshd, its pinned host key, our key and ProxyCommand."""
    command = proxy_command(paths)
    return [
        ssh_config.HostEntry(
            job=job,
            node=m.node,
            user=m.ssh_user,
            port=m.sshd_port,
            host_public_key=m.host_public_key,
            identity_file=paths.job_key(job),
            proxy_command=command,
        )
        for m in manifests.values()
    ]


def endpoint_for(entry: ssh_config.HostEntry, paths: StatePaths) -> NodeEndpoint:
    """What the in-process tunnel needs: the same facts as the Host entry OpenSSH reads."""
    return NodeEndpoint(
        alias=entry.alias,
        host_key_alias=entry.host_key_alias,
        user=entry.user,
        port=entry.port,
        identity_file=entry.identity_file,
        known_hosts=paths.job_known_hosts(entry.job),
        proxy_command=entry.proxy_command,
    )


class JobConnection:
    """A job's nodes as the laptop reaches them; close it (or use ``with``) to drop the tunnels."""

    def __init__(
        self, backend: Backend, job: str, paths: StatePaths | None = None, emit: events.Emit = events.ignore
    ) -> None:
        self.backend, self.job, self.emit = backend, job, emit
        self.paths = paths or StatePaths.default()
        self.entries: list[ssh_config.HostEntry] = []
        self.tunnels: dict[str, NodeTunnel] = {}
        self._failing: set[str] = set()  # nodes whose last reconnect attempt failed
        self._nodes_over: set[str] = set()  # nodes that ended: their link is not kept up

    @classmethod
    def open(
        cls, job: str | JobRef, paths: StatePaths | None = None, emit: events.Emit = events.ignore
    ) -> JobConnection:
        """The connection of a job named by the user (a name or a SageMaker training-job ARN)."""
        ref = job if isinstance(job, JobRef) else job_ref(job)
        return cls(backend_for(ref, paths), ref.name, paths, emit)

    def __enter__(self) -> JobConnection:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- the job --------------------------------------------------------------------------------

    def describe(self) -> JobInfo:
        return self.backend.describe(self.job)

    def require_running(self) -> JobInfo:
        """The job's info; a one-line error when it has ended or cannot be debugged."""
        info = self.describe()
        if info.status in TERMINAL:
            detail = f" ({info.failure_reason})" if info.failure_reason else ""
            raise JobNotRunningError(f"job {self.job} is {info.status}{detail}: nothing to attach to")
        if not info.debuggable:
            raise UserError(info.why_not_debuggable or f"job {self.job} does not have debugging enabled")
        return info

    def ended(self) -> JobInfo | None:
        """The job's info if it has ended, else None (also when it cannot be asked right now)."""
        try:
            info = self.describe()
        except Exception:
            return None
        return info if info.status in TERMINAL else None

    def manifests(self) -> dict[str, spec.NodeManifest]:
        """The manifests the nodes have published so far (nodes without one left out)."""
        return {n: m for n, m in self.backend.manifests(self.job).items() if m is not None}

    def wait_for_manifests(self, timeout: float) -> dict[str, spec.NodeManifest]:
        """Every node's manifest with a usable sshd, or a one-line error."""
        started = time.monotonic()
        deadline = started + timeout
        announced = False
        next_note = started + WAIT_NOTE_AFTER
        shown: tuple[str, str] | None = None
        while True:
            info = self.require_running()
            # progress while the platform starts the job (Starting -> Downloading -> Training); a job
            # that is simply running when we come is no news
            if (info.status, info.secondary_status) != shown and (shown or info.provisioning):
                self.emit(
                    events.JobStatusEvent(
                        job=self.job,
                        status=info.status,
                        secondary_status=info.secondary_status,
                        message=info.status_message,
                    )
                )
            shown = (info.status, info.secondary_status)
            if info.provisioning:  # SageMaker still starting instances: its time, not the nodes'
                deadline = time.monotonic() + timeout
            manifests = self.backend.manifests(self.job)
            for node, m in manifests.items():
                # no sshd and an error (or the node is over): it will not come.  A node without either
                # is still getting one (SageMaker: openssh-server being installed in the background).
                if m is not None and not m.sshd_port and (m.errors or m.state in _NODE_OVER):
                    raise UserError(
                        f"node {node} of job {self.job} has no sshd: {'; '.join(m.errors) or 'see its log'}"
                    )
            missing = sorted(n for n, m in manifests.items() if m is None or not m.sshd_port)
            if manifests and not missing:
                return {n: m for n, m in manifests.items() if m is not None}
            if not announced:
                self.emit(events.Waiting(what="nodes", nodes=sorted(manifests)))
                announced = True
            now = time.monotonic()
            if now >= next_note:  # a wait that drags on says what it waits for, and keeps saying it
                self.emit(
                    events.Waiting(
                        what="nodes",
                        nodes=missing,
                        seconds=round(now - started, 1),
                        detail=self.backend.waiting_for(self.job),
                    )
                )
                next_note = now + WAIT_NOTE_EVERY
            if time.monotonic() > deadline:
                raise UserError(
                    f"nodes {', '.join(missing)} of job {self.job} did not publish an sshd within {timeout:g} s"
                )
            interrupts.check()
            time.sleep(POLL_SECONDS)

    # --- ssh ------------------------------------------------------------------------------------

    def host_entries(self, manifests: dict[str, spec.NodeManifest]) -> list[ssh_config.HostEntry]:
        return host_entries(self.job, manifests, self.paths)

    def write_ssh_entries(
        self, manifests: dict[str, spec.NodeManifest], *, edit_user_config: bool
    ) -> list[ssh_config.HostEntry]:
        """Pin the nodes' host keys and write their Host entries (and the Include line, if asked)."""
        entries = self.host_entries(manifests)
        ssh_config.write_job_entries(self.paths, self.job, entries)
        if edit_user_config:
            ssh_config.ensure_include(self.paths)
        self.entries = entries
        self.emit(events.SshConfig(aliases=[e.alias for e in entries], config=str(self.paths.ssh_config)))
        return entries

    def connect(self) -> dict[str, NodeTunnel]:
        """One SSH connection per node of :meth:`write_ssh_entries`, opened in parallel; raises the
        first node's one-line error."""
        tunnels = {e.node: self._new_tunnel(e) for e in self.entries}
        self.tunnels = tunnels
        with ThreadPoolExecutor(max_workers=max(1, len(tunnels))) as pool:
            for node, fut in [(n, pool.submit(t.connect)) for n, t in tunnels.items()]:
                fut.result()  # raises HostKeyMismatchError & co. with their one-line message
                self.emit(events.NodeConnected(node=node, alias=tunnels[node].endpoint.alias))
        return tunnels

    def tunnel(self, node: str) -> NodeTunnel:
        """The node's tunnel, created on first use (``stacks`` does not connect every node up front)."""
        tunnel = self.tunnels.get(node)
        if tunnel is None:
            entry = next((e for e in self.entries if e.node == node), None)
            if entry is None:
                raise UserError(f"job {self.job} has no node {node!r} with ssh entries")
            tunnel = self.tunnels[node] = self._new_tunnel(entry)
        return tunnel

    def _new_tunnel(self, entry: ssh_config.HostEntry) -> NodeTunnel:
        tunnel = NodeTunnel(endpoint_for(entry, self.paths))
        # another local user's connection to one of our forwards: closed, and the user told
        tunnel.on_foreign = lambda message: self.emit(
            events.WarningEvent(code="connection-refused", node=entry.node, message=message)
        )
        return tunnel

    @functools.cached_property
    def secret(self) -> str:
        """The job secret (``remote_debug.contract.job_secret``), derived from the job's private key."""
        try:
            return keys.job_secret(self.paths.job_key(self.job))
        except OSError:
            raise UserError(
                f"job {self.job} has no client key on this machine ({self.paths.job_key(self.job)}): "
                "attach from the machine that launched or enabled it"
            ) from None

    def control(self, node: str) -> RankControl:
        """The control channels of the ranks on ``node``; for a job on this machine, a port of a rank is
        used only while the rank's own uid listens on it (``local_port_guard``)."""
        guard = local_port_guard if self.backend.capabilities.runs_here else None
        return RankControl(self.tunnel(node), self.secret, guard)

    def keep_up(self) -> None:
        """Reconnect dropped tunnels; says so (``reconnected`` / ``tunnel-down``) for each node.

        A job that ends stops its nodes' sshd before its status (or the node's manifest) says it
        ended: that drop is no fault.  So a failed reconnect is reported only when it fails again on
        the next attempt (RETRY_FIRST s on) while the job and that node still run; a node that is over
        is not retried."""
        for node, tunnel in self.tunnels.items():
            if node in self._nodes_over:
                continue
            try:  # also when alive: an IDE connection may have reconnected it since the last round
                if tunnel.ensure_connected():
                    self.emit(events.Reconnected(node=node))
                if tunnel.alive:
                    self._failing.discard(node)
            except Exception as exc:  # the path may come back: keep trying while the job runs
                if node not in self._failing:
                    self._failing.add(node)
                    continue
                if self._node_over(node):
                    self._nodes_over.add(node)
                    continue
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self.emit(events.TunnelDown(node=node, error=first))

    def _node_over(self, node: str) -> bool:
        """Whether the job is ending or has ended, or the node's manifest says it is over (its sshd is
        gone for good).  SageMaker says "Uploading" once training ended, long before "Completed"; the
        manifests' last words come through CloudWatch with a delay."""
        try:
            info = self.describe()
        except Exception:
            info = None
        if info is not None and (info.status in _JOB_ENDING or info.secondary_status in _SECONDARY_ENDING):
            return True
        try:
            manifest = self.backend.manifests(self.job).get(node)
        except Exception:  # cannot tell: a fault until shown otherwise
            return False
        return manifest is not None and manifest.state in _NODE_OVER

    def close(self) -> None:
        for tunnel in self.tunnels.values():
            tunnel.close()
