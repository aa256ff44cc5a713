"""``remote-debug attach``: from a job name to IDE-ready ranks, and keeping them reachable.

discover nodes (manifests) -> pin host keys + write ssh entries -> one SSH connection per node ->
a local forward per selected rank -> launch.json (VS Code) -> optionally the built-in headless DAP
client -> watch the job, re-establish dropped tunnels, exit when the job ends.

Progress is reported as events (dicts) to a callback: the CLI prints them for humans or as JSON
lines for the VS Code extension.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from remote_debug import spec
from remote_debug.local import interrupts, ssh_config, vscode_launch
from remote_debug.local.backends.base import COMPLETED, TERMINAL, Backend, JobInfo
from remote_debug.local.errors import JobNotRunningError, UserError
from remote_debug.local.headless import HeadlessPlan, RankReport, debug_rank
from remote_debug.local.paths import StatePaths
from remote_debug.local.proxy import proxy_command
from remote_debug.local.pycharm_session import PyCharmOptions, PyCharmSession
from remote_debug.local.tunnels import NodeEndpoint, NodeTunnel

Emit = Callable[[dict[str, Any]], None]
POLL_SECONDS = 0.3
PAUSE_SAFE_RETRY = 2.0
# how often a running attach reads the manifests again (crashed, late, restarted ranks); on SageMaker
# each read is a CloudWatch Logs query
MANIFEST_POLL_SECONDS = 1.0


@dataclass
class AttachOptions:
    ranks: spec.RankSelection = None
    workspace: Path = field(default_factory=Path.cwd)
    write_launch_json: bool = True
    edit_user_ssh_config: bool = True
    headless: HeadlessPlan | None = None
    ready_timeout: float = 120.0  # how long to wait for nodes and ranks to publish their endpoints
    ide: str = "vscode"  # "pycharm": ranks connect out through reverse forwards (pycharm_session)
    pycharm: PyCharmOptions = field(default_factory=PyCharmOptions)


@dataclass
class RankForward:
    rank: int
    node: str
    remote_port: int
    local_port: int
    code_dir: str


@dataclass
class AttachResult:
    job: JobInfo
    forwards: list[RankForward]
    reports: list[RankReport]
    launch_json: Path | None
    aliases: list[str]

    @property
    def exit_code(self) -> int:
        return 0 if self.job.status == COMPLETED else 1


def host_entries(job: str, manifests: dict[str, spec.NodeManifest], paths: StatePaths) -> list[ssh_config.HostEntry]:
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
    return NodeEndpoint(
        alias=entry.alias,
        host_key_alias=entry.host_key_alias,
        user=entry.user,
        port=entry.port,
        identity_file=entry.identity_file,
        known_hosts=paths.job_known_hosts(entry.job),
        proxy_command=entry.proxy_command,
    )


def require_running(backend: Backend, job: str) -> JobInfo:
    info = backend.describe(job)
    if info.status in TERMINAL:
        detail = f" ({info.failure_reason})" if info.failure_reason else ""
        raise JobNotRunningError(f"job {job} is {info.status}{detail}: nothing to attach to")
    if not info.debuggable:
        raise UserError(str(info.extra.get("why_not_debuggable") or f"job {job} does not have debugging enabled"))
    return info


def wait_for_manifests(backend: Backend, job: str, timeout: float, emit: Emit) -> dict[str, spec.NodeManifest]:
    """Every node's manifest with a usable sshd, or a one-line error."""
    deadline = time.monotonic() + timeout
    announced = False
    shown: tuple[str, str] | None = None
    while True:
        info = require_running(backend, job)
        # progress while the platform starts the job (Starting -> Downloading -> Training); a job that
        # is simply running when we come is no news
        if (info.status, info.secondary_status) != shown and (shown or info.extra.get("provisioning")):
            emit({"event": "job-status", "job": job, "status": info.status,
                  "secondary_status": info.secondary_status, "message": info.extra.get("status_message") or ""})
        shown = (info.status, info.secondary_status)
        if info.extra.get("provisioning"):  # SageMaker still starting instances: its time, not the nodes'
            deadline = time.monotonic() + timeout
        manifests = backend.manifests(job)
        for node, m in manifests.items():
            # no sshd and an error (or the node is over): it will not come.  A node without either is
            # still getting one (SageMaker: openssh-server being installed in the background).
            if m is not None and not m.sshd_port and (m.errors or m.state in ("completed", "failed", "stopped")):
                raise UserError(f"node {node} of job {job} has no sshd: {'; '.join(m.errors) or 'see its log'}")
        if manifests and all(m is not None and m.sshd_port for m in manifests.values()):
            return {n: m for n, m in manifests.items() if m is not None}
        if not announced:
            emit({"event": "waiting", "what": "nodes", "nodes": sorted(manifests)})
            announced = True
        if time.monotonic() > deadline:
            missing = sorted(n for n, m in manifests.items() if m is None or not m.sshd_port)
            raise UserError(f"nodes {', '.join(missing)} of job {job} did not publish an sshd within {timeout:g} s")
        interrupts.check()
        time.sleep(POLL_SECONDS)


def write_ssh_entries(
    job: str,
    manifests: dict[str, spec.NodeManifest],
    paths: StatePaths,
    *,
    edit_user_config: bool,
    emit: Emit,
) -> list[ssh_config.HostEntry]:
    entries = host_entries(job, manifests, paths)
    ssh_config.write_job_entries(paths, job, entries)
    if edit_user_config:
        ssh_config.ensure_include(paths)
    emit({"event": "ssh-config", "aliases": [e.alias for e in entries], "config": str(paths.ssh_config)})
    return entries


class Attacher:
    def __init__(
        self, backend: Backend, job: str, options: AttachOptions, emit: Emit, paths: StatePaths | None = None
    ) -> None:
        self.backend, self.job, self.options, self.emit = backend, job, options, emit
        self.paths = paths or StatePaths.default()
        self.tunnels: dict[str, NodeTunnel] = {}
        self.forwards: dict[int, RankForward] = {}
        self.reports: list[RankReport] = []
        self.launch_json: Path | None = None
        self._report_lock = threading.Lock()
        self._debuggers: list[threading.Thread] = []
        self._stop = threading.Event()
        self.pycharm: PyCharmSession | None = None
        # (rank, pid) whose process-group timeout is raised: a rank restarted by torchrun is a new process
        self._pause_safe: set[tuple[int, int]] = set()
        self._pause_safe_next = 0.0
        self._manifests: dict[str, spec.NodeManifest] = {}
        self._faults_reported: set[tuple[int, int]] = set()  # (rank, pid) whose crash was reported
        self._manifests_next = 0.0

    # --- steps ----------------------------------------------------------------------------------

    def _connect_nodes(self, entries: list[ssh_config.HostEntry]) -> None:
        tunnels = {e.node: NodeTunnel(endpoint_for(e, self.paths)) for e in entries}
        self.tunnels = tunnels
        with ThreadPoolExecutor(max_workers=max(1, len(tunnels))) as pool:
            for node, fut in [(n, pool.submit(t.connect)) for n, t in tunnels.items()]:
                fut.result()  # raises HostKeyMismatchError & co. with their one-line message
                self.emit({"event": "node-connected", "node": node, "alias": tunnels[node].endpoint.alias})

    def _expected_ranks(self, manifests: dict[str, spec.NodeManifest], info: JobInfo) -> set[int]:
        world = next((r.world_size for m in manifests.values() for r in m.ranks), len(info.nodes) * info.nproc_per_node)
        if not world:  # not known before the first rank reports (SageMaker); rank 0 always exists
            return set(self.options.ranks) if self.options.ranks is not None else {0}
        every = set(range(world))
        if self.options.ranks is None:
            return every
        unknown = sorted(set(self.options.ranks) - every)
        if unknown:
            raise UserError(f"unknown ranks {unknown} for job {self.job}: it has ranks 0-{world - 1}")
        return set(self.options.ranks)

    def _discover_ranks(self) -> bool:
        """Forward every selected rank that has a listener; True once all expected ranks are forwarded."""
        manifests = {n: m for n, m in self.backend.manifests(self.job).items() if m is not None}
        info = self.backend.describe(self.job)
        expected = self._expected_ranks(manifests, info)
        new_debuggees: list[RankForward] = []
        for node, m in manifests.items():
            for r in m.ranks:
                if r.rank not in expected or r.rank in self.forwards:
                    continue
                if r.ide != self.options.ide:
                    raise UserError(f"job {self.job} was launched for {r.ide}: attach with --ide {r.ide}")
                # through the control channel: starts an idle rank's listener, or puts tracing back
                # in a rank a debugger detached from; either way the rank is made pause-safe
                via_control = r.control_port > 0
                unusable = (r.port == 0 and not via_control) or r.state in ("skipped", "failed", "finished")
                if self.pycharm is not None:
                    unusable = not self.pycharm.connectable(r)
                if unusable:
                    expected.discard(r.rank)  # it will never listen; say so once
                    self.emit(
                        {"event": "rank-unavailable", "rank": r.rank, "node": node, "state": r.state, "error": r.error}
                    )
                    self.forwards[r.rank] = RankForward(r.rank, node, 0, 0, m.code_dir)
                    continue
                if via_control and self.pycharm is None:
                    started = self._start_listener(node, r)
                    if started is None:
                        continue  # retried on the next round
                    r = started
                if self.pycharm is not None:  # the rank connects out: node port -> IDE port here
                    local_port = self.pycharm.forward(self.tunnels[node], node, r)
                else:
                    local_port = self.tunnels[node].forward(
                        r.port, exclusive=f"rank {r.rank} of job {self.job}",
                        on_refuse=functools.partial(self._debugger_refused, r.rank, node),
                    )
                fwd = RankForward(r.rank, node, r.port, local_port, m.code_dir)
                self.forwards[r.rank] = fwd
                self.emit(
                    {
                        "event": "rank-ready",
                        "rank": r.rank,
                        "node": node,
                        "local_port": local_port,
                        "remote_port": r.port,
                        "state": r.state,
                        "ide": self.options.ide,
                    }
                )
                if self.options.headless is not None and self.pycharm is None:
                    new_debuggees.append(fwd)
        self._manifests = manifests
        # before any debugger can stop a rank: its peers must not time out in their collectives
        self._announce_pause_safe(force=bool(new_debuggees))
        for fwd in new_debuggees:
            self._start_debugger(fwd)
        return expected <= set(self.forwards)

    def _start_listener(self, node: str, r: spec.RankEndpoint) -> spec.RankEndpoint | None:
        """Ask a rank's control channel to start its debug listener (lazy listeners) if it has none."""
        try:
            reply = self.tunnels[node].request(r.control_port, {"op": "listen"})
            port = spec.check_port(int(reply["port"]), "debug port from the control channel", allow_zero=False)
        except (OSError, UserError, KeyError, ValueError, TypeError) as exc:
            self.emit({"event": "warning", "message": f"rank {r.rank}: cannot start its listener: {exc}"})
            return None
        self._pause_safe.add((r.rank, r.pid))  # "listen" made this rank's collectives pause-safe too
        self.emit({"event": "rank-listening", "rank": r.rank, "node": node, "remote_port": port,
                   "detail": reply.get("detail")})
        return replace(r, port=port, state="listening")

    def _refresh_manifests(self, *, force: bool = False) -> None:
        """Read the job's manifests again, at most every MANIFEST_POLL_SECONDS unless ``force``:
        discovery stops reading them once every debuggee is found, yet ranks still crash, report late
        or are restarted."""
        now = time.monotonic()
        if now < self._manifests_next and not force:
            return
        self._manifests_next = now + MANIFEST_POLL_SECONDS
        try:
            self._manifests.update({n: m for n, m in self.backend.manifests(self.job).items() if m is not None})
        except (UserError, spec.ContractError, OSError):
            pass  # a transient read error: the known manifests serve until the next look

    def _announce_pause_safe(self, *, force: bool = False) -> None:
        """A debugger is attaching: every rank of the job raises its process-group timeout, so one
        rank paused at a breakpoint does not make its peers' collectives time out.  A rank without
        a process group yet raises it itself at init; ranks that did not answer, reported later or
        were restarted are asked again (at most every PAUSE_SAFE_RETRY seconds)."""
        if not any(f.local_port for f in self.forwards.values()):
            return
        now = time.monotonic()
        if now < self._pause_safe_next and not force:
            return
        self._pause_safe_next = now + PAUSE_SAFE_RETRY
        for node, m in self._manifests.items():
            for r in m.ranks:
                if (r.rank, r.pid) in self._pause_safe or not r.control_port or r.state in ("failed", "finished"):
                    continue
                try:
                    reply = self.tunnels[node].request(r.control_port, {"op": "pause-safe"})
                except (OSError, UserError) as exc:
                    self.emit({"event": "warning", "message": f"rank {r.rank}: pause-safe failed: {exc}"})
                    continue
                self._pause_safe.add((r.rank, r.pid))  # also when "pending": the rank applies it at init
                self.emit({"event": "pause-safe", "rank": r.rank, "node": node, "detail": reply.get("detail")})

    def _write_launch_json(self) -> None:
        targets = [
            vscode_launch.RankTarget(
                job=self.job,
                rank=f.rank,
                node=f.node,
                host="127.0.0.1",
                port=f.local_port,
                local_root=str(self.options.workspace),
                remote_root=f.code_dir,
            )
            for f in sorted(self.forwards.values(), key=lambda f: f.rank)
            if f.local_port
        ]
        if not targets:
            return
        self.launch_json = vscode_launch.update_launch_json(self.options.workspace, self.job, targets)
        self.emit(
            {
                "event": "launch-json",
                "path": str(self.launch_json),
                "compound": vscode_launch.compound_name(self.job),
                "configurations": [vscode_launch.config_name(self.job, t.rank, t.node) for t in targets],
            }
        )

    def _start_debugger(self, fwd: RankForward) -> None:
        plan = self.options.headless
        assert plan is not None

        def run() -> None:
            report = debug_rank(
                fwd.rank,
                fwd.node,
                "127.0.0.1",
                fwd.local_port,
                plan,
                path_mappings=[(str(self.options.workspace), fwd.code_dir)],
                emit=self.emit,
                stop=self._stop,
            )
            with self._report_lock:
                self.reports.append(report)

        t = threading.Thread(target=run, name=f"dap-rank-{fwd.rank}", daemon=True)
        t.start()
        self._debuggers.append(t)

    # --- main loop ------------------------------------------------------------------------------

    def run(self) -> AttachResult:
        info = require_running(self.backend, self.job)
        world = len(info.nodes) * info.nproc_per_node
        unknown = sorted(set(self.options.ranks or ()) - set(range(world))) if world else []
        if unknown:  # checked before anything is written (when the backend knows the world size)
            raise UserError(f"unknown ranks {unknown} for job {self.job}: it has ranks 0-{world - 1}")
        if self.options.write_launch_json and not self.options.workspace.is_dir():
            raise UserError(f"workspace {self.options.workspace} is not a directory: pass --workspace DIR")
        if self.options.ide == "pycharm":  # version check and run configuration, before any tunnel
            self.pycharm = PyCharmSession(
                self.job,
                self.options.workspace,
                self.options.pycharm,
                self.options.headless,
                self.emit,
                local_job=self.backend.name == "local",
            )
            self.pycharm.prepare()
        try:
            manifests = wait_for_manifests(self.backend, self.job, self.options.ready_timeout, self.emit)
        except JobNotRunningError:  # it ran when we started: it ended while its nodes were coming up
            ended = self._ended()
            if ended is None:
                raise
            try:
                return self._finish(ended, [])
            finally:
                self._close()
        interrupts.check()  # a Ctrl-C swallowed so far (see interrupts.py): before we write anything
        entries = write_ssh_entries(
            self.job, manifests, self.paths, edit_user_config=self.options.edit_user_ssh_config, emit=self.emit
        )
        try:
            try:
                self._connect_nodes(entries)
            except Exception:  # e.g. sshd already stopped: the job ending is the news, not the tunnel
                ended = self._ended()
                if ended is None:
                    raise
                return self._finish(ended, entries)
            deadline = time.monotonic() + self.options.ready_timeout
            all_ready = False
            launch_written = False
            while True:
                info = self.backend.describe(self.job)
                if info.status in TERMINAL:
                    break
                if not all_ready:
                    try:
                        all_ready = self._discover_ranks()
                    except Exception:  # a node going away mid-discovery, because the job just ended
                        ended = self._ended()
                        if ended is None:
                            raise
                        info = ended
                        break
                    if (all_ready or time.monotonic() > deadline) and not launch_written:
                        if not all_ready:
                            self.emit(
                                {"event": "warning", "message": "not every selected rank published a listener in time"}
                            )
                        if self.options.write_launch_json and self.pycharm is None:
                            interrupts.check()
                            self._write_launch_json()
                        launch_written = True
                        self.emit(
                            {"event": "ready", "ranks": sorted(f.rank for f in self.forwards.values() if f.local_port)}
                        )
                else:  # discovery done: it no longer reads the manifests
                    self._refresh_manifests()
                    self._announce_pause_safe()
                self._report_rank_faults()
                self._keep_tunnels_up()
                interrupts.check()  # a Ctrl-C whose KeyboardInterrupt was swallowed (see interrupts.py)
                time.sleep(POLL_SECONDS)
            return self._finish(info, entries)
        finally:
            self._close()

    def _close(self) -> None:
        self._stop.set()
        if self.pycharm is not None:
            self.pycharm.close()
        for tunnel in self.tunnels.values():
            tunnel.close()

    def _ended(self) -> JobInfo | None:
        """The job's info if it has ended (attach then ends as the job did), else None."""
        try:
            info = self.backend.describe(self.job)
        except Exception:
            return None
        return info if info.status in TERMINAL else None

    def _finish(self, info: JobInfo, entries: list[ssh_config.HostEntry]) -> AttachResult:
        """The job ended: report what is left to say (crashes, the end itself) and the result."""
        self._refresh_manifests(force=True)  # a crash that ended the job between two looks
        self._report_rank_faults(final=True)
        for t in self._debuggers:
            t.join(timeout=10)
        if self.pycharm is not None:
            self.reports.extend(self.pycharm.finish())
        self.emit(
            {
                "event": "job-ended",
                "status": info.status,
                "exit_code": info.exit_code,
                "failure_reason": info.failure_reason,
            }
        )
        return AttachResult(
            info,
            sorted(self.forwards.values(), key=lambda f: f.rank),
            sorted(self.reports, key=lambda r: r.rank),
            self.launch_json,
            [e.alias for e in entries],
        )

    def _report_rank_faults(self, *, final: bool = False) -> None:
        """Report each rank that died of an uncaught exception, once, with its traceback (from its rank
        document); a rank held for a post-mortem (hold on failure) is said to be, and gets a headless
        debugger when ``--headless`` has none on it.  From the manifests discovery or
        :meth:`_refresh_manifests` read last."""
        for node, m in self._manifests.items():
            for r in m.ranks:
                if r.state not in ("failed", "held") or (r.rank, r.pid) in self._faults_reported:
                    continue
                if r.state == "failed" and r.error is None:
                    continue  # not an uncaught exception (e.g. a listener that failed to start)
                self._faults_reported.add((r.rank, r.pid))
                self.emit({"event": "rank-failed", "rank": r.rank, "node": node, "pid": r.pid, "error": r.error,
                           "traceback": r.traceback, "held": r.state == "held"})
                if r.state == "held" and not final:
                    self._debug_held_rank(r.rank)

    def _debug_held_rank(self, rank: int) -> None:
        """--headless: a held rank already forwarded whose debugger has finished gets a new one, which
        sees it stopped at the exception (a rank not forwarded yet gets one from discovery)."""
        fwd = self.forwards.get(rank)
        if self.options.headless is None or self.pycharm is not None or fwd is None or not fwd.local_port:
            return
        if any(t.name == f"dap-rank-{rank}" and t.is_alive() for t in self._debuggers):
            return  # its session is still attached: the stop arrives there
        self._start_debugger(fwd)

    def _debugger_refused(self, rank: int, node: str, message: str) -> None:
        # a warning: the CLI and the extension already show those to the user
        self.emit({"event": "warning", "code": "debugger-refused", "rank": rank, "node": node, "message": message})

    def _keep_tunnels_up(self) -> None:
        for node, tunnel in self.tunnels.items():
            try:  # also when alive: an IDE connection may have reconnected it since the last round
                if tunnel.ensure_connected():
                    self.emit({"event": "reconnected", "node": node})
            except Exception as exc:  # the path may come back: keep trying while the job runs
                self.emit(
                    {
                        "event": "tunnel-down",
                        "node": node,
                        "error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                    }
                )
