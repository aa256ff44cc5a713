"""Network namespaces for local multi-node jobs: a node is reachable only through the relay, like SSM.

When launch runs as root and ``ip netns`` works, every node of a multi-node local job gets its own
network namespace ``rd-<hash>-<n>`` (n = 1..N) with loopback up and one veth ``eth0`` carrying a
private address ``10.213.<x>.<n>/24``; the other ends of the veths sit on a bridge inside a hub
namespace ``rd-<hash>-0``.  Nothing is added to the namespace the laptop side runs in, so a node's
sshd and rank listeners (127.0.0.1 inside its namespace) cannot be reached from it: the local
relay enters the node's namespace (``setns`` on one thread) to connect, the way the SSM agent
connects from inside the instance.  torchrun's rendezvous uses node 1's private address.

Inside, a node looks like an instance (shared with the emulator's nodes, ``remote_debug.emulator.nodes``):
``/etc/netns/<ns>/hosts`` maps every ``algo-N`` to its address and ``/etc/netns/<ns>/hostname`` names
it - ``ip netns exec`` binds both over /etc - and :func:`set_hostname` gives the node's first process
a UTS namespace of its own named ``algo-N`` (scripts take ``SM_HOSTS[0]`` as the master address, gloo
goes by ``gethostname()``).  :func:`delete` ends whatever still runs in a namespace before removing
it: an ssh session's daemon must not live on in a namespace nobody can name any more.

``<hash>`` comes from the job's directory, so cleanup only ever touches our own namespaces.

Standard library only: ``emulator/node_enter.py``, which runs with ``python -I -S``, loads this file
by path for :func:`set_hostname`.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

NETNS_DIR = Path("/run/netns")
ETC_NETNS = Path("/etc/netns")  # ip netns exec binds /etc/netns/<ns>/<file> over /etc/<file>
IFNAME = "eth0"
SUBNET = "10.213"
CLONE_NEWNET = 0x40000000
CLONE_NEWUTS = 0x04000000
KILL_TIMEOUT = 5.0
LOCALHOST = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
IP_TIMEOUT = 15.0
T = TypeVar("T")

# What torch.distributed's gloo/NCCL and tensorpipe use to pick their interface: in a node's
# namespace the machine's hostname resolves to an address that does not exist there.
IFNAME_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


class NetnsError(RuntimeError):
    """Namespaces could not be set up (message is one line)."""


@dataclass(frozen=True)
class NetnsPlan:
    prefix: str  # rd-<hash>
    third_octet: int

    @property
    def hub(self) -> str:
        return f"{self.prefix}-0"

    def namespace(self, index: int) -> str:
        """Namespace of node ``index`` (0-based node index -> rd-<hash>-<index+1>)."""
        return f"{self.prefix}-{index + 1}"

    def address(self, index: int) -> str:
        return f"{SUBNET}.{self.third_octet}.{index + 1}"


def plan_for(job_dir: Path) -> NetnsPlan:
    digest = hashlib.sha256(str(job_dir.resolve()).encode()).digest()
    return NetnsPlan(prefix=f"rd-{digest[:4].hex()}", third_octet=digest[4] % 250 + 1)


def available() -> bool:
    """Root with an ``ip`` that knows netns (creation itself may still fail: callers fall back)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None and Path("/proc/self/ns/net").exists()


def _ip(*args: str) -> None:
    try:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"ip {' '.join(args)} failed: {exc}") from None
    if proc.returncode != 0:
        detail = " ".join(proc.stderr.split()) or f"exit code {proc.returncode}"
        raise NetnsError(f"ip {' '.join(args)} failed: {detail}")


def create(plan: NetnsPlan, nodes: int) -> list[str]:
    """Create the hub and one namespace per node; all or nothing.  Returns every namespace made."""
    # Left over from an earlier job in the same (since removed) job dir: ours, and stale.
    delete([plan.hub, *(plan.namespace(i) for i in range(nodes))])
    made: list[str] = []
    try:
        _ip("netns", "add", plan.hub)
        made.append(plan.hub)
        _ip("-n", plan.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", plan.hub, "link", "set", "br0", "up")
        for i in range(nodes):
            ns = plan.namespace(i)
            _ip("netns", "add", ns)
            made.append(ns)
            veth = f"v{i + 1}"
            _ip("-n", plan.hub, "link", "add", veth, "type", "veth", "peer", "name", IFNAME, "netns", ns)
            _ip("-n", plan.hub, "link", "set", veth, "master", "br0")
            _ip("-n", plan.hub, "link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{plan.address(i)}/24", "dev", IFNAME)
            _ip("-n", ns, "link", "set", IFNAME, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except NetnsError:
        delete(made)
        raise
    return made


def write_etc(plan: NetnsPlan, hosts: list[str]) -> None:
    """``/etc/netns/<ns>/{hosts,hostname}`` of every node (``hosts[i]`` is node i): each node resolves
    every ``algo-N`` to its address and is named ``algo-N``.  Raises NetnsError."""
    table = "".join(f"{plan.address(i)}\t{name}\n" for i, name in enumerate(hosts))
    try:
        for i, name in enumerate(hosts):
            etc = ETC_NETNS / plan.namespace(i)
            etc.mkdir(parents=True, exist_ok=True)
            _write_atomically(etc / "hosts", LOCALHOST + table)
            _write_atomically(etc / "hostname", f"{name}\n")
    except OSError as exc:
        raise NetnsError(f"cannot write {ETC_NETNS}: {exc}") from None


def _write_atomically(path: Path, text: str) -> None:
    # osutil has the full version; this file must stay standard library only (see the module docstring)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def set_hostname(name: str) -> None:
    """Give the calling process a UTS namespace of its own, named ``name`` (inherited by all it starts)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUTS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWUTS): {os.strerror(err)}")
    socket.sethostname(name)


def namespace_ids(names: list[str]) -> set[tuple[int, int]]:
    """(device, inode) of each named namespace that exists: what /proc/<pid>/ns/net of its processes shows."""
    ids: set[tuple[int, int]] = set()
    for name in names:
        with contextlib.suppress(OSError):
            st = os.stat(NETNS_DIR / name)
            ids.add((st.st_dev, st.st_ino))
    return ids


def pids_in(ns_ids: set[tuple[int, int]]) -> list[int]:
    """Every process (but this one) in one of the namespaces ``ns_ids``; zombies have left theirs."""
    if not ns_ids:
        return []
    me, pids = os.getpid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")  # follows the link to the namespace's inode
        except OSError:  # gone, or a zombie (its namespaces are already released)
            continue
        if (st.st_dev, st.st_ino) in ns_ids:
            pids.append(int(entry.name))
    return pids


def kill_all_in(names: list[str], timeout: float = KILL_TIMEOUT) -> list[int]:
    """SIGKILL every process in the named namespaces until none is left; returns what survived ``timeout``."""
    ns_ids = namespace_ids(names)
    deadline = time.monotonic() + timeout
    while True:
        pids = pids_in(ns_ids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def delete(names: list[str]) -> None:
    """Delete the given namespaces (ours: names come from job.json) with their /etc/netns entries, after
    killing what still runs in them (the job is over: whatever is left, a daemon an ssh session started,
    would keep the namespace alive unnamed); never raises."""
    ours = [name for name in names if name.startswith("rd-") and "/" not in name]
    kill_all_in(ours)
    for name in ours:
        if (NETNS_DIR / name).exists():
            with contextlib.suppress(NetnsError):
                _ip("netns", "delete", name)
        shutil.rmtree(ETC_NETNS / name, ignore_errors=True)


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def exec_prefix(namespace: str) -> list[str]:
    """Run a command in ``namespace`` (``ip netns exec`` execs it: the pid stays the command's)."""
    return ["ip", "netns", "exec", namespace]


def run_in(namespace: str, make: Callable[[], T], what: str, timeout: float = 15.0) -> T:
    """What ``make()`` returns, run on a thread inside ``namespace`` (sockets it makes stay there).

    setns(CLONE_NEWNET) changes the namespace of the calling thread only, so a short-lived thread
    enters it and creates the socket; the socket keeps its namespace, this process does not move.
    """
    result: list[T] = []
    errors: list[BaseException] = []

    def enter_and_make() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(NETNS_DIR / namespace, os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {namespace}: {os.strerror(err)}")
            finally:
                os.close(fd)
            result.append(make())
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=enter_and_make, name="remote-debug-netns", daemon=True)
    thread.start()
    thread.join(timeout)
    if errors:
        raise errors[0]
    if not result:
        raise TimeoutError(f"{what} in namespace {namespace} timed out")
    return result[0]


def connect_in(namespace: str, host: str, port: int, timeout: float = 10.0) -> socket.socket:
    """A TCP connection to host:port made from inside ``namespace``."""
    return run_in(
        namespace,
        lambda: socket.create_connection((host, port), timeout=timeout),
        f"connecting to {host}:{port}",
        timeout + 5,
    )
