"""One emulated SageMaker instance per ``algo-N``, as an instance looks from inside.

A node is a set of namespaces on this machine, so that an unchanged training toolkit runs in it:

* network: its own namespace with loopback and ``eth0`` (a veth on a private bridge in a hub
  namespace, made by :mod:`remote_debug.oskit.netns`), address ``10.213.<x>.<n>``; nothing is
  added to the host's namespace, so the host only reaches a node through :meth:`Cluster.connect`,
  the way SSM reaches an instance from inside;
* ``/etc/netns/<ns>/hosts`` (``algo-N`` -> its address, in every node) and ``hostname`` - written by
  ``netns.write_etc``, as for local multi-node jobs - and a private ``environment`` (the toolkit's MPI
  worker appends to ``/etc/environment``), which ``ip netns exec`` binds over ``/etc``;
* mount: one private namespace per node where the node's root (a directory under ``work_dir``) is
  ``/opt/ml``, because the toolkit and the SDK v3 drivers use absolute ``/opt/ml/...`` paths;
* UTS: ``gethostname() == "algo-N"`` (gloo picks its address from it, the toolkit its rank).

Each node has a holder process (``sleep infinity``, set up by :mod:`.node_enter`) that owns its
mount and UTS namespaces; every command of the node enters them and the network namespace with
``nsenter --target <holder>``, in a session of its own so a node's command can be signalled as a
group.  One mount table per node matters: mounts added later (sshd's config, the ``/root`` overlay)
are seen by every process of the node, and an overlay is mounted once, not once per command.

Every process of a node is found for :meth:`Cluster.signal_all` / :meth:`Cluster.destroy` by the
sessions :meth:`Cluster.spawn` started plus a scan of ``/proc/*/ns/net`` for the nodes' namespaces,
which also catches daemons (sshd's sessions, mpirun's orted) that left the session.

Namespace names are ``rd-<job>-<hash>-<n>`` (hub ``-0``), the hash over the job name and work dir, so
a crashed run's leftovers are recognised and removed by the next ``create`` of the same job.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from remote_debug.emulator import node_enter
from remote_debug.emulator.node_model import SSM_USER_UID, ClusterError, Node, NodeImage
from remote_debug.oskit import netns

ETC_NETNS = netns.ETC_NETNS
OPT_ML = Path("/opt/ml")
ENTER = Path(__file__).with_name("node_enter.py")
KILL_TIMEOUT = 5.0
READY_TIMEOUT = 15.0
SETUP_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
_HOST_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def available() -> str | None:
    """None when this machine can run isolated nodes, else why not (one line)."""
    if os.geteuid() != 0:
        return "emulated nodes need root (network, mount and UTS namespaces): run the emulator as root"
    for tool, package in (
        ("ip", "iproute2"),
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
        ("env", "coreutils"),
        ("sleep", "coreutils"),
    ):
        if shutil.which(tool) is None:
            return f"emulated nodes need `{tool}`: apt-get install {package}"
    return _probe_namespaces()


@functools.lru_cache(maxsize=1)
def _probe_namespaces() -> str | None:
    # Root in a container without CAP_SYS_ADMIN passes every static check and still cannot do this.
    try:
        proc = subprocess.run(
            ["unshare", "--net", "--mount", "--uts", "true"], capture_output=True, text=True, timeout=15
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create namespaces here: unshare failed: {exc}"
    if proc.returncode != 0:
        detail = " ".join(proc.stderr.split()) or f"exit code {proc.returncode}"
        return f"cannot create namespaces here (unshare --net --mount --uts: {detail}); needs CAP_SYS_ADMIN"
    return None


def _prefix(job: str, work_dir: Path) -> tuple[str, int]:
    digest = hashlib.sha256(f"{job}\0{work_dir}".encode()).digest()
    slug = re.sub(r"[^a-z0-9]+", "-", job.lower()).strip("-")[:16].strip("-") or "job"
    # "rd-" keeps netns.delete willing to remove them; the octet only has to differ per job for
    # readability (each cluster has its own bridge, so equal subnets would not clash anyway).
    return f"rd-{slug}-{digest[:3].hex()}", digest[3] % 250 + 1


class Cluster:
    def __init__(self, job: str, work_dir: Path, hosts: list[str], image: NodeImage | None = None) -> None:
        if not hosts:
            raise ClusterError("a cluster needs at least one host (algo-1)")
        if len(set(hosts)) != len(hosts) or len(hosts) > 250:
            raise ClusterError(f"hosts must be distinct and at most 250: {hosts}")
        for host in hosts:
            if not _HOST_RE.fullmatch(host):
                raise ClusterError(f"{host!r} is not a usable hostname (lowercase letters, digits, '-')")
        self.job = job
        self.image = image or NodeImage()  # what of the image the nodes model: gdb, the shell's user, sudo
        self.work_dir = work_dir.resolve()
        prefix, octet = _prefix(job, self.work_dir)
        self._plan = netns.NetnsPlan(prefix=prefix, third_octet=octet)
        self._nodes = {
            host: Node(host, self._plan.namespace(i), self._plan.address(i), self.work_dir / "nodes" / host)
            for i, host in enumerate(hosts)
        }
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[bytes]] = []  # what spawn started (and the holders)
        self._holders: dict[str, subprocess.Popen[bytes]] = {}
        self._sshd = ""  # "", "running", or "failed" (its mounts may be half made: recreate to retry)

    # -- layout ---------------------------------------------------------------------------------

    @property
    def hosts(self) -> list[str]:
        return list(self._nodes)

    def node(self, name: str) -> Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise ClusterError(f"no node {name!r} in this cluster ({', '.join(self._nodes)})") from None

    def root(self, node: str) -> Path:
        return self.node(node).root

    def address(self, node: str) -> str:
        return self.node(node).address

    def namespaces(self) -> list[str]:
        """Every network namespace this cluster owns (hub first); they exist between create and destroy."""
        return [self._plan.hub, *(n.namespace for n in self._nodes.values())]

    # -- lifecycle ------------------------------------------------------------------------------

    def create(self) -> None:
        reason = available()
        if reason is not None:
            raise ClusterError(reason)
        with contextlib.suppress(ClusterError):
            self.destroy()  # a crashed earlier run of this job in this work dir
        try:
            # The nodes' /opt/ml is a bind mount inside their mount namespaces, and a bind mount needs
            # an existing directory to land on: an empty /opt/ml is the only thing left on the host.
            OPT_ML.mkdir(parents=True, exist_ok=True)
            for n in self._nodes.values():
                for sub in ("input/config", "input/data", "model", "output/data"):
                    (n.root / sub).mkdir(parents=True, exist_ok=True)
            netns.create(self._plan, len(self._nodes))
            self._write_etc()
            for n in self._nodes.values():
                self._start_holder(n)
        except (netns.NetnsError, OSError, ClusterError) as exc:
            with contextlib.suppress(ClusterError):
                self.destroy()
            raise ClusterError(f"cannot create the emulated nodes of {self.job}: {exc}") from None

    def _write_etc(self) -> None:
        netns.write_etc(self._plan, list(self._nodes))  # node i is namespace(i), address(i): the plan's order
        etc_environment = Path("/etc/environment")
        for n in self._nodes.values():
            if etc_environment.is_file():  # ip netns exec binds only over files that exist
                shutil.copyfile(etc_environment, ETC_NETNS / n.namespace / "environment")
            if self.image.shell_user != "root":
                self._write_user(ETC_NETNS / n.namespace)

    def _write_user(self, etc: Path) -> None:
        """The shell's user in the node's /etc/passwd and /etc/group (copies of this machine's plus one line, bound
        over them by ``ip netns exec``), and, where sudo is installed, the node's /etc/sudoers: passwordless sudo
        for that user, or none."""
        user, uid = self.image.shell_user, SSM_USER_UID
        lines = {
            "passwd": f"{user}:x:{uid}:{uid}:{user}:/tmp:/bin/sh",
            "group": f"{user}:x:{uid}:",
            # PAM's account check (sudo's) wants the user in shadow too: no password, not locked
            "shadow": f"{user}:*:20000:0:99999:7:::",
        }
        for name, line in lines.items():
            machine = Path("/etc", name)
            if not machine.is_file():
                continue
            text = machine.read_text()
            (etc / name).write_text(text + ("" if text.endswith("\n") else "\n") + line + "\n")
            # the machine's owner and mode (shadow: root:shadow 0640), as ip netns exec binds it over the original
            os.chmod(etc / name, machine.stat().st_mode & 0o777)
            os.chown(etc / name, machine.stat().st_uid, machine.stat().st_gid)
        if Path("/etc/sudoers").is_file():
            rules = "root ALL=(ALL:ALL) ALL\n" + (f"{user} ALL=(ALL) NOPASSWD:ALL\n" if self.image.sudo else "")
            sudoers = etc / "sudoers"
            sudoers.write_text(rules)
            os.chmod(sudoers, 0o440)

    def _start_holder(self, n: Node) -> None:
        sleep = shutil.which("sleep") or "/bin/sleep"
        argv = [_ip(), "netns", "exec", n.namespace, sys.executable, "-I", "-S", str(ENTER)]
        argv += ["--hostname", n.name, "--notify", "--bind", str(n.root), str(OPT_ML)]
        for gdb in [] if self.image.gdb else hidden_gdbs():  # an image without gdb: none on the node's PATH
            argv += ["--bind", os.devnull, gdb]
        argv += ["--", sleep, "infinity"]
        proc = subprocess.Popen(
            argv,
            env=SETUP_ENV,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with self._lock:
            self._procs.append(proc)
        self._holders[n.name] = proc
        assert proc.stdout is not None
        with proc.stdout:
            ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT)
            line = proc.stdout.readline() if ready else b""
            if line != node_enter.READY:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                rest = proc.stdout.read() if ready else b""
                proc.wait()
                detail = " ".join((line + rest).decode(errors="replace").split()) or "no answer"
                raise ClusterError(f"setting up {n.name} failed: {detail}")

    def destroy(self) -> None:
        """Kill everything in the nodes, remove namespaces (and their veths) and /etc/netns entries.

        Idempotent, and safe after a partial or failed create: it works from the names, not from
        what was made.  Raises ClusterError only after trying everything, if something is left."""
        survivors = self._kill_everything()
        netns.delete(self.namespaces())
        for n in self._nodes.values():
            shutil.rmtree(ETC_NETNS / n.namespace, ignore_errors=True)
        with self._lock:
            self._procs = [p for p in self._procs if p.returncode is None]
        self._holders.clear()
        self._sshd = ""
        left = [ns for ns in self.namespaces() if netns.exists(ns)]
        left += [str(ETC_NETNS / n.namespace) for n in self._nodes.values() if (ETC_NETNS / n.namespace).exists()]
        if survivors:
            left.append(f"processes {' '.join(map(str, sorted(survivors)))}")
        if left:
            raise ClusterError(f"emulated nodes of {self.job} not fully removed: {', '.join(left)}")

    # -- processes ------------------------------------------------------------------------------

    def _enter(self, node: str, *, mount_only: bool = False) -> list[str]:
        """``nsenter`` into the node's namespaces (those of its holder)."""
        holder = self._holders.get(node)
        if holder is None:
            raise ClusterError(f"node {node} is not running: call Cluster.create() first")
        if holder.poll() is not None:
            raise ClusterError(
                f"node {node} is gone (its holder exited with {holder.returncode}): recreate the cluster"
            )
        nsenter = shutil.which("nsenter") or "/usr/bin/nsenter"
        spaces = ["--mount"] if mount_only else ["--net", "--mount", "--uts"]
        return [nsenter, "--target", str(holder.pid), *spaces]

    def spawn(
        self,
        node: str,
        argv: list[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        stdout: int | IO[bytes],
        stderr: int | IO[bytes] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Run ``argv`` inside ``node`` in a new session; ``cwd`` is a path as the node sees it."""
        self.node(node)
        if not argv:
            raise ClusterError("spawn needs a command")
        # nsenter --wd resolves the directory before entering the mount namespace, where /opt/ml is
        # not the node's: coreutils' env changes to it from inside, then execs (the pid stays argv's).
        env_cmd = shutil.which("env") or "/usr/bin/env"
        command = [*self._enter(node), "--", env_cmd, f"--chdir={cwd}", "--", *argv]
        try:
            proc = subprocess.Popen(
                command,
                env=dict(env),
                cwd="/",  # the real cwd exists only inside the node
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        except OSError as exc:
            raise ClusterError(f"cannot start {argv[0]} on {node}: {exc}") from None
        with self._lock:
            self._procs.append(proc)
        return proc

    def connect(self, node: str, port: int, timeout: float = 10.0) -> socket.socket:
        """TCP to 127.0.0.1:port inside ``node`` (from a thread that enters its network namespace)."""
        return netns.connect_in(self.node(node).namespace, "127.0.0.1", port, timeout)

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to every process of every node (not to the holders, which are no part of the job)."""
        self._signal(sig, self._ns_ids(), spare={p.pid for p in self._holders.values()})

    def _ns_ids(self) -> set[tuple[int, int]]:
        return netns.namespace_ids(self.namespaces())

    def _signal(
        self, sig: int, ns_ids: set[tuple[int, int]], spare: set[int] | frozenset[int] = frozenset()
    ) -> list[int]:
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            # Only while the leader is unreaped: after that its pid (= the group id) may be reused.
            # A spawn that has not entered the node yet is reached here, everything else by the scan.
            if proc.pid not in spare and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
        pids = [pid for pid in netns.pids_in(ns_ids) if pid not in spare]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return pids

    def _kill_everything(self) -> list[int]:
        """SIGKILL until nothing is left in the nodes; returns what survived KILL_TIMEOUT."""
        ns_ids = self._ns_ids()
        deadline = time.monotonic() + KILL_TIMEOUT
        while True:
            pids = self._signal(signal.SIGKILL, ns_ids)
            with self._lock:
                procs = list(self._procs)
            running = [p for p in procs if p.poll() is None]
            if not pids and not running:
                return []
            if time.monotonic() > deadline:
                return pids + [p.pid for p in running]
            time.sleep(0.05)

    # -- MPI --------------------------------------------------------------------------------------

    def start_mpi_sshd(self) -> None:
        """An sshd on port 22 of every node, root by public key only, as a DLC image runs for MPI.

        Each node's mount namespace then sees its own /root/.ssh (the job's key pair,
        authorized_keys, known_hosts pinning every node's host key under algo-N, a config that
        refuses unknown keys) and its sshd_config at /etc/ssh/sshd_config, so the toolkit's own
        ``/usr/sbin/sshd -D`` finds the same setup (and port 22 taken).  Idempotent."""
        from remote_debug.emulator import node_ssh  # lazily: most jobs never start it

        for name in self._nodes:
            self._enter(name)  # every node is up
        if self._sshd == "running":
            return
        if self._sshd == "failed":
            raise ClusterError("sshd failed to start earlier in this cluster: destroy() and create() it again")
        self._sshd = "failed"  # until it is up
        layouts = node_ssh.prepare(self.job, self.work_dir, list(self._nodes.values()))
        sshds: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for name, layout in layouts.items():
                mounts = [sys.executable, "-I", "-S", str(ENTER)]
                mounts += ["--bind", str(layout.sshd_config), node_ssh.SSHD_CONFIG]
                mounts += ["--home", str(layout.home_upper), str(layout.home_work), "--"]
                _run_setup([*self._enter(name, mount_only=True), *mounts], f"mounting {name}'s ssh files")
            for name, layout in layouts.items():
                with open(layout.log, "ab") as log:
                    sshds[name] = self.spawn(
                        name, node_ssh.SSHD_ARGV, env=node_ssh.SSHD_ENV, cwd="/", stdout=log, stderr=subprocess.STDOUT
                    )
            node_ssh.wait_listening(sshds, layouts)
        except (ClusterError, OSError) as exc:
            for proc in sshds.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if isinstance(exc, ClusterError):
                raise
            raise ClusterError(f"cannot start sshd in the nodes of {self.job}: {exc}") from None
        self._sshd = "running"


def hidden_gdbs() -> list[str]:
    """Every gdb a node's shell could find on PATH (this machine's): what an image without gdb must not have."""
    found = []
    for folder in SETUP_ENV["PATH"].split(":"):
        candidate = Path(folder) / "gdb"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            found.append(str(candidate.resolve()))
    return sorted(set(found))


def _ip() -> str:
    return shutil.which("ip") or "/usr/sbin/ip"  # absolute: Popen would look a bare name up in the job's PATH


def _run_setup(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(argv, env=SETUP_ENV, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"{what} failed: {exc}") from None
    if proc.returncode != 0:
        detail = " ".join(proc.stderr.decode(errors="replace").split()) or f"exit code {proc.returncode}"
        raise ClusterError(f"{what} failed: {detail}")
