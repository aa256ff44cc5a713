"""MachineBackend: SageMaker-shaped training jobs on this machine ("debug locally first").

Not to be confused with ``remote_debug/laptop/``, the laptop side as a whole: this is one of its job
backends, the one behind ``launch --local`` (its jobs say ``"backend": "local"``), beside SageMaker.

A job is a real process tree (supervisor -> per-node hook -> torchrun -> ranks), not a mock; its
state mirrors SageMaker's TrainingJobStatus / SecondaryStatus so everything above the backend seam
behaves the same for local and SageMaker jobs.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import remote_debug.oskit.netns as netns
from remote_debug.contract import spec
from remote_debug.contract.spec import LOOPBACK
from remote_debug.laptop.core.backend import Backend, Capabilities
from remote_debug.laptop.core.errors import JobStateError, UnknownJobError, UserError
from remote_debug.laptop.core.jobinfo import (
    TERMINAL,
    Isolation,
    JobInfo,
    JobStatus,
    MachineJobDetails,
    held_ranks,
    keep_alive_state,
    read_manifests,
)
from remote_debug.laptop.core.keys import ensure_job_key, job_secret
from remote_debug.laptop.core.paths import StatePaths, private_dir
from remote_debug.laptop.machine.job_dir import (
    NodeLayout,
    node_command,
    node_environment,
    node_names,
    prepare_node,
    read_job_file,
    record_supervisor,
    supervisor_process,
    write_job_file,
)
from remote_debug.laptop.machine.node_logs import FileNodeOutput
from remote_debug.oskit import osutil

# what a job on this machine may have (the CLI's --nodes / --nproc-per-node ranges say the same)
MAX_NODES = 64
MAX_NPROC_PER_NODE = 64

# Never copied into a job's code dir: VCS data, caches, and our own venvs.
COPY_IGNORE = shutil.ignore_patterns(
    ".git",
    "__pycache__",
    "*.pyc",
    ".venv",
    "venv",
    "node_modules",
    ".cache",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
)


@dataclass
class LaunchRequest:
    command: list[str]
    name: str
    source_dir: Path
    nodes: int = 1
    nproc_per_node: int = 1
    # what the user chose for debugging (checked when made); the job adds the wiring: key, "local"
    options: spec.DebugOptions = field(default_factory=spec.DebugOptions)
    hyperparameters: dict[str, str] = field(default_factory=dict)
    stop_grace_seconds: float = 120.0
    # multi-node jobs run each node in its own network namespace when root (False: --no-netns)
    netns: bool = True


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _job_status(state: dict[str, Any], job_dir: Path) -> JobStatus:
    """job.json's status.  The file is our own: a value this version does not know is a ContractError, as an
    unreadable job.json is (``list_jobs`` leaves such a job out)."""
    raw = state.get("status", JobStatus.IN_PROGRESS)
    return spec.parse_choice(JobStatus, raw, f"job status in {job_dir / 'job.json'}")


def settle_gone_ranks(manifests: dict[str, spec.NodeManifest | None]) -> dict[str, spec.NodeManifest | None]:
    """``manifests`` with the documents of ranks whose process is gone made final (``RankEndpoint.gone``).

    The ranks of a job on this machine are this machine's processes (no pid namespace between us), so
    their documents can be checked against them: a rank killed by a signal never wrote its last state,
    and its document still names ports that anyone may have bound since.  The node makes such documents
    final too (``container/gone_ranks``); this covers the second before it looks, and a node that cannot."""
    for m in manifests.values():
        if m is None:
            continue
        settled = []
        for r in m.ranks:
            final = r.gone() is r
            settled.append(r if final or osutil.process_gone(r.pid, r.start_ticks) is None else r.gone())
        m.ranks = settled
    return manifests


class MachineBackend(Backend):
    name = "local"  # what users see (`jobs`, `--local`); the code says "machine" to keep it apart from laptop/
    capabilities = Capabilities(runs_here=True, remote=False)

    def __init__(self, paths: StatePaths | None = None) -> None:
        self.paths = paths or StatePaths.default()

    @classmethod
    def create(cls, paths: StatePaths | None = None, *, region: str | None = None) -> MachineBackend:
        del region  # a job on this machine has no region
        return cls(paths)

    def no_such_job(self, job: str) -> str:
        return "no local job by that name"

    # --- launch ---------------------------------------------------------------------------------

    def validate(self, req: LaunchRequest) -> None:
        """Every check that can fail happens before anything is written (no partial jobs)."""
        spec.check_job_name(req.name)
        if not req.command:
            raise UserError(
                "no training command: give it after '--', e.g. remote-debug launch --local -- python train.py"
            )
        if not (1 <= req.nodes <= MAX_NODES):
            raise UserError(f"--nodes {req.nodes} is out of range: use 1-{MAX_NODES}")
        if not (1 <= req.nproc_per_node <= MAX_NPROC_PER_NODE):
            raise UserError(f"--nproc-per-node {req.nproc_per_node} is out of range: use 1-{MAX_NPROC_PER_NODE}")
        if not req.source_dir.is_dir():
            raise UserError(f"source dir {req.source_dir} does not exist: pass --source-dir DIR")
        if self.paths.job_dir(req.name).exists():
            raise UserError(f"job {req.name} already exists: pick another --name (or omit it for a fresh one)")
        port_base, sshd_port = req.options.port_base, req.options.sshd_port
        if port_base:
            if req.nodes > 1:
                raise UserError(
                    "--debug-port is per node and local nodes share this machine's ports: use it with --nodes 1"
                )
            spec.check_port(port_base + req.nproc_per_node - 1, "debug port", allow_zero=False)
            for r in range(req.nproc_per_node):
                if port_in_use(port_base + r):
                    raise UserError(f"debug port {port_base + r} is in use: pick another --debug-port or omit it")
        if sshd_port:
            if req.nodes > 1:
                raise UserError(
                    "--sshd-port is per node and local nodes share this machine's ports: use it with --nodes 1"
                )
            if port_in_use(sshd_port):
                raise UserError(f"sshd port {sshd_port} is in use: pick another --sshd-port or omit it")

    def launch(self, req: LaunchRequest) -> JobInfo:
        # Everything is checked before the first file, the job's key pair, is written: the options
        # when they were made, the rest here.
        self.validate(req)
        key_path, public_key = ensure_job_key(self.paths, req.name)
        debug = spec.DebugSpec(
            job_name=req.name,
            client_public_key=public_key,
            job_secret=job_secret(key_path),
            transport=spec.Transport.LOCAL,
            options=req.options,
        )
        job_dir = self.paths.job_dir(req.name)
        private_dir(self.paths.root)
        private_dir(self.paths.jobs_dir)
        staging = self.paths.jobs_dir / f".{req.name}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        isolation, namespaces, ns_plan, isolation_note = self._isolation(req, job_dir)
        try:
            hosts = node_names(req.nodes)
            cpus = os.cpu_count() or 1
            master_port = free_port()
            master_addr = ns_plan.address(0) if ns_plan is not None else LOOPBACK
            plans: dict[str, Any] = {}
            for i, node in enumerate(hosts):
                layout = NodeLayout(staging, node)
                prepare_node(layout, hosts, req.hyperparameters, cpus, netns.IFNAME if ns_plan else "lo")
                shutil.copytree(req.source_dir, layout.code_dir, ignore=COPY_IGNORE, symlinks=True)
                final = NodeLayout(job_dir, node)  # paths as the running job will see them
                # Only our additions are recorded; the supervisor merges them into the environment it
                # inherits from this launch, so the user's shell secrets never land in job.json.
                env = node_environment(final, req.name, hosts, req.hyperparameters, cpus, debug.to_env())
                command = node_command(
                    req.command,
                    nodes=req.nodes,
                    nproc=req.nproc_per_node,
                    node_rank=i,
                    master_port=master_port,
                    master_addr=master_addr,
                )
                # the hook SIGKILLs a command that outlives a stop by 5/6 of the grace (100 of SageMaker's
                # 120 s), so it can still stop sshd and record the end before the supervisor's SIGKILL
                env[spec.ENV_STOP_GRACE] = f"{req.stop_grace_seconds * 5 / 6:g}"
                if ns_plan is not None:
                    env.update({name: netns.IFNAME for name in netns.IFNAME_ENV})
                    command = netns.exec_prefix(ns_plan.namespace(i)) + command
                plans[node] = {"command": command, "cwd": str(final.code_dir), "env": env}
            state = {
                "name": req.name,
                "backend": self.name,
                "created": time.time(),
                "command": req.command,
                "source_dir": str(req.source_dir.resolve()),
                "nodes": hosts,
                "nproc_per_node": req.nproc_per_node,
                "status": JobStatus.IN_PROGRESS,
                "secondary_status": "Starting",
                "exit_code": None,
                "failure_reason": None,
                "spec": debug.to_env(),
                "stop_grace_seconds": req.stop_grace_seconds,
                "node_plans": plans,
                "isolation": isolation,
                "isolation_note": isolation_note,
                # node -> its namespace; "netns" lists every namespace to delete (hub included)
                "node_netns": {n: ns_plan.namespace(i) for i, n in enumerate(hosts)} if ns_plan else {},
                "node_addresses": {n: ns_plan.address(i) for i, n in enumerate(hosts)} if ns_plan else {},
                "netns": namespaces,
            }
            write_job_file(staging, state)
            os.rename(staging, job_dir)  # the job appears whole or not at all
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            netns.delete(namespaces)
            raise
        try:
            with open(job_dir / "supervisor.log", "ab") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "remote_debug.laptop.machine.supervisor", str(job_dir)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except BaseException:
            netns.delete(namespaces)  # the supervisor owns them from here on; without it, we do
            raise
        # The supervisor owns job.json from here on, so its pid (and start time) go into files of their own.
        record_supervisor(job_dir, proc.pid)
        _reap_in_background(proc)
        return self.describe(req.name)

    def _isolation(self, req: LaunchRequest, job_dir: Path) -> tuple[Isolation, list[str], netns.NetnsPlan | None, str]:
        """("netns", namespaces, plan, note) when every node gets its own network namespace, else
        ("loopback", [], None, why not): nodes are then process trees sharing this machine's loopback."""
        if req.nodes < 2:
            return Isolation.LOOPBACK, [], None, "single node"
        if not req.netns:
            return Isolation.LOOPBACK, [], None, "--no-netns"
        if not netns.available():
            return Isolation.LOOPBACK, [], None, "network namespaces need root and iproute2"
        plan = netns.plan_for(job_dir)
        made: list[str] = []
        try:
            made = netns.create(plan, req.nodes)
            netns.write_etc(plan, node_names(req.nodes))  # algo-N resolve inside every node
        except netns.NetnsError as exc:
            netns.delete(made)
            return Isolation.LOOPBACK, [], None, f"network namespaces unavailable: {exc}"
        return Isolation.NETNS, made, plan, ""

    # --- queries --------------------------------------------------------------------------------

    def has_job(self, job: str) -> bool:
        return spec.JOB_NAME_RE.fullmatch(job) is not None and (self.paths.job_dir(job) / "job.json").exists()

    def _supervisor_alive(self, job_dir: Path) -> bool:
        supervisor = supervisor_process(job_dir)
        return supervisor is not None and supervisor.alive()

    def describe(self, job: str) -> JobInfo:
        if not self.has_job(job):
            raise UnknownJobError(f"unknown job {job[:80]!r}: run 'remote-debug jobs' to see jobs")
        job_dir = self.paths.job_dir(job)
        state = read_job_file(job_dir)
        status = _job_status(state, job_dir)
        secondary = str(state.get("secondary_status", "Starting"))
        failure = state.get("failure_reason")
        just_launched = time.time() - float(state.get("created", 0)) <= 5  # its pid file may not be there yet
        if status not in TERMINAL and not just_launched and not self._supervisor_alive(job_dir):
            state = read_job_file(job_dir)  # it may have finished between the two reads
            status = _job_status(state, job_dir)
            if status not in TERMINAL:
                status, secondary = JobStatus.FAILED, "Failed"
                failure = "the job's supervisor process vanished (killed or machine restarted)"
        manifests = (
            {}
            if status in TERMINAL
            else settle_gone_ranks(
                read_manifests({n: NodeLayout(job_dir, n).manifest_dir for n in state.get("nodes", [])})
            )
        )
        kept_alive_left, run = keep_alive_state(manifests)
        return JobInfo(
            name=job,
            backend=self.name,
            status=status,
            secondary_status=secondary,
            nodes=list(state.get("nodes", [])),
            nproc_per_node=int(state.get("nproc_per_node", 1)),
            created=float(state.get("created", 0)),
            ended=state.get("ended"),
            exit_code=state.get("exit_code"),
            failure_reason=failure,
            debuggable=True,
            source_dir=state.get("source_dir"),
            logs={n: str(NodeLayout(job_dir, n).log_file) for n in state.get("nodes", [])},
            # an adopted job's code is where its processes run (job.json's code_dirs), a launched one's is the copy
            code_dirs=dict(state.get("code_dirs") or {})
            or {n: str(NodeLayout(job_dir, n).code_dir) for n in state.get("nodes", [])},
            details=MachineJobDetails(
                job_dir=str(job_dir),
                isolation=spec.parse_choice(Isolation, state.get("isolation", Isolation.LOOPBACK), "job isolation"),
                node_netns=dict(state.get("node_netns") or {}),
                node_addresses=dict(state.get("node_addresses") or {}),
            ),
            held_ranks=held_ranks(manifests),
            kept_alive_seconds_left=kept_alive_left,
            run=run,
        )

    def list_jobs(self) -> list[JobInfo]:
        if not self.paths.jobs_dir.is_dir():
            return []
        jobs = []
        for d in sorted(self.paths.jobs_dir.iterdir()):
            if d.name.startswith(".") or not self.has_job(d.name):
                continue
            try:
                jobs.append(self.describe(d.name))
            except spec.ContractError:
                continue
        return sorted(jobs, key=lambda j: j.created)

    def manifests(self, job: str) -> dict[str, spec.NodeManifest | None]:
        info = self.describe(job)
        job_dir = self.paths.job_dir(job)
        return settle_gone_ranks(
            {node: spec.read_node_manifest(NodeLayout(job_dir, node).manifest_dir) for node in info.nodes}
        )

    def waiting_for(self, job: str) -> str:
        job_dir = self.paths.job_dir(job)
        nodes = self.describe(job).nodes
        missing = [n for n in nodes if spec.read_node_manifest(NodeLayout(job_dir, n).manifest_dir) is None]
        where = NodeLayout(job_dir, missing[0] if missing else nodes[0]).manifest_dir if nodes else job_dir
        return f"the node manifests in {where}" + (f" (none yet from {', '.join(missing)})" if missing else "")

    def log_file(self, job: str, node: str) -> Path:
        return NodeLayout(self.paths.job_dir(job), node).log_file

    def node_output(self, job: str) -> FileNodeOutput:
        info = self.describe(job)
        if read_job_file(self.paths.job_dir(job)).get("adopted"):
            # its log files hold only our node daemons' lines: the ranks print where they were started
            raise JobStateError(
                f"job {job} was adopted: its ranks print where they were started (their terminal or log file), "
                "not into remote-debug's job dir"
            )
        return FileNodeOutput({node: self.log_file(job, node) for node in info.nodes})

    # --- control --------------------------------------------------------------------------------

    def stop(self, job: str, *, wait_seconds: float = 150.0) -> JobInfo:
        info = self.describe(job)
        if info.status in TERMINAL:
            return info
        job_dir = self.paths.job_dir(job)
        # pid and start time: a supervisor that died may have left its pid to someone else's process
        supervisor = supervisor_process(job_dir)
        if supervisor is None or not supervisor.signal(signal.SIGTERM):
            state = read_job_file(job_dir)
            state.update(status=JobStatus.STOPPED, secondary_status="Stopped", ended=time.time())
            write_job_file(job_dir, state)
            netns.delete(list(state.get("netns") or []))  # nobody else will
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            info = self.describe(job)
            if info.status in TERMINAL:
                break
            time.sleep(0.2)
        # the supervisor records the end first, then cleans up (the nodes' namespaces): stop returns
        # when the job is really gone
        while self._supervisor_alive(job_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._supervisor_alive(job_dir):  # normally the supervisor deletes them; one killed early cannot
            netns.delete(list(read_job_file(job_dir).get("netns") or []))
        return info

    def relay(self, job: str, node: str, port: int, stdin: BinaryIO, stdout: BinaryIO) -> int:
        """Local transport: relay the ssh stream to the node's sshd on loopback.

        ``port`` (ssh's %p) is ignored: the node's manifest is the source of truth for where its
        sshd listens, exactly as the SSM transport asks the job, not the laptop, for the port.
        """
        del port
        # this node's manifest alone, its ranks unread: a ProxyCommand runs once per node per connection
        # (8 of them for one `stacks` of an 8-node job), and the sshd is all it needs
        job_dir = self.paths.job_dir(job)
        state = read_job_file(job_dir)
        known = node in (state.get("nodes") or [])
        manifest = spec.read_node_manifest(NodeLayout(job_dir, node).manifest_dir) if known else None
        if manifest is None:
            raise UserError(f"node {node} of job {job} has not published its manifest yet: wait, then retry")
        if not manifest.sshd_port:
            raise UserError(f"node {node} of job {job} has no sshd: {'; '.join(manifest.errors) or 'see the job log'}")
        namespace = (state.get("node_netns") or {}).get(node)
        host, sshd_port = manifest.sshd_host, manifest.sshd_port

        def connect() -> socket.socket:
            if namespace:  # the node is reachable only from inside its network namespace, like via SSM
                return netns.connect_in(str(namespace), host, sshd_port, timeout=10)
            return socket.create_connection((host, sshd_port), timeout=10)

        sock, greeting = greeted_connection(connect, time.monotonic() + GREETING_WAIT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        os.write(stdout.fileno(), greeting)
        return relay_stdio(sock, stdin, stdout)


# How long the relay tries for the sshd's greeting: more than its LoginGraceTime (container/node/sshd.py), so
# the slots of idle connections that another local user opened have been freed at least once.
GREETING_WAIT_S = 30.0
SSH_GREETING = b"SSH-"  # how an SSH server's first line starts (RFC 4253, 4.2)
_RETRY_S = 0.2


def greeted_connection(connect: Callable[[], socket.socket], deadline: float) -> tuple[socket.socket, bytes]:
    """A connection to the node's sshd and the first bytes it sent (sshd speaks first: its version line).

    sshd closes a connection at once (after "Exceeded MaxStartups") when its unauthenticated connections
    are past ``MaxStartups`` - which anyone on this machine can make happen by opening idle connections
    to the loopback port.  Such a close is not the end of our ssh: we connect again until sshd greets us
    with ``SSH-`` (its random early drop lets some through, and ``LoginGraceTime`` ends the idle ones)
    or the deadline passes.  Nothing of the client's has been sent yet, so a retry is invisible to ssh.
    """
    while True:
        sock = connect()
        greeting = b""
        try:
            sock.settimeout(max(1.0, deadline - time.monotonic()))
            while len(greeting) < len(SSH_GREETING) and (data := sock.recv(65536)):
                greeting += data
        except OSError:
            greeting = b""
        if greeting.startswith(SSH_GREETING):
            sock.settimeout(None)
            return sock, greeting
        sock.close()
        if time.monotonic() + _RETRY_S > deadline:
            raise UserError(
                f"the node's sshd closed every connection for {GREETING_WAIT_S:g} s without a greeting (too many "
                "unauthenticated connections: another local user may be flooding it): try again"
            )
        time.sleep(_RETRY_S)


def relay_stdio(sock: socket.socket, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """Copy stdin -> sock and sock -> stdout until either side closes."""
    in_fd, out_fd = stdin.fileno(), stdout.fileno()

    def upstream() -> None:
        try:
            while data := os.read(in_fd, 65536):
                sock.sendall(data)
        except OSError:
            pass
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=upstream, daemon=True).start()
    quickack = getattr(socket, "TCP_QUICKACK", None)
    try:
        while data := sock.recv(65536):
            if quickack is not None:
                # sshd apparently sets no TCP_NODELAY on a forwarding-only connection: ACK at once so its
                # Nagle-held replies are not paced by our delayed ACK (Linux resets this per recv).
                sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)
            view = memoryview(data)
            while view:
                view = view[os.write(out_fd, view) :]
    except OSError:
        pass
    finally:
        sock.close()
    return 0


def _reap_in_background(proc: subprocess.Popen[bytes]) -> None:
    """When launch runs inside a long-lived process (tests, the demo), reap the supervisor so it
    does not linger as a zombie after it exits."""
    threading.Thread(target=proc.wait, daemon=True).start()
