"""Helpers for the container tests: run the real hook, find and stop every process a test started.

Every process a test starts carries the test's own token in its environment (the hook, sshd, the
command, ranks, debugpy's adapter, which daemonizes away from its parent), so cleanup finds them
by that token in /proc rather than by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from remote_debug.contract import job_secret, spec
from remote_debug.laptop.connection.rank_control import exchange

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
T = TypeVar("T")
TOKEN_ENV = "RD_TEST_TOKEN"
# The job secret of every hook these tests start (unless one passes its own): the control channel
# wants its token, as the laptop sends it.
JOB_SECRET = job_secret.derive_job_secret(b"tests/container")

# Variables of the surrounding environment that would change what the hook or a rank decides.
_SCRUB_PREFIXES = ("REMOTE_DEBUG_", "SM_", "OMPI_", "PMI_")
_SCRUB_NAMES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PYTHONPATH",
    "PYDEVD_DISABLE_FILE_VALIDATION",
)

WAIT_SCRIPT = """\
import os, pathlib, sys, time
marks = pathlib.Path(sys.argv[1])
(marks / "started").write_text(str(os.getpid()))
deadline = time.monotonic() + 120
while not (marks / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
"""


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_pair() -> int:
    """A base port such that base and base+1 are both free right now."""
    for _ in range(50):
        base = free_port()
        if base >= 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
        return base
    raise AssertionError("no pair of free ports found")


def alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def pids_with_env(token: str) -> list[int]:
    """Processes whose environment contains ``token`` (``RD_TEST_TOKEN=<the test's dir>``)."""
    needle = token.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_all(token: str) -> None:
    for pid in pids_with_env(token):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def listen_addresses(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp* shows them) of LISTEN sockets on ``port``."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port and fields[3] == "0A":  # 0A = LISTEN
                out.append(address)
    return out


def non_loopback_ipv4() -> str | None:
    """An IPv4 address of this machine that is not loopback, if any (from `ip -4 -o addr`)."""
    try:
        text = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in text.splitlines():
        parts = line.split()
        if "inet" in parts:
            address = parts[parts.index("inet") + 1].split("/")[0]
            if not address.startswith("127."):
                return address
    return None


def refuses(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return False
    except OSError:
        return True


def make_key(path: Path) -> str:
    """An ed25519 key pair at ``path``; returns the public key line."""
    subprocess.run(["ssh-keygen", "-t", "ed25519", "-N", "", "-q", "-C", "test", "-f", str(path)], check=True)
    return path.with_name(path.name + ".pub").read_text().strip()


@dataclass
class HookRun:
    """One run of ``python -m remote_debug.container -- CMD`` in a test dir."""

    root: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    extra_pids: list[int] = field(default_factory=list)

    @property
    def manifest_dir(self) -> Path:
        return Path(self.env[spec.ENV_MANIFEST_DIR])

    @property
    def state_dir(self) -> Path:
        return Path(self.env[spec.ENV_STATE_DIR])

    @property
    def marks(self) -> Path:
        return self.root / "marks"

    def start(self, *command: str, cwd: Path | None = None) -> HookRun:
        self.marks.mkdir(exist_ok=True)
        self.started_at = time.monotonic()
        # the child gets copies of the descriptors: ours are closed once it started
        with open(self.root / "stdout.log", "wb") as stdout, open(self.root / "stderr.log", "wb") as stderr:
            self.proc = subprocess.Popen(
                [PYTHON, "-m", "remote_debug.container", "--", *command],
                env=self.env,
                cwd=cwd or self.root,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        return self

    def start_torchrun(self, script: Path, nproc: int = 2) -> HookRun:
        """The hook wrapping ``torchrun`` with ``nproc`` ranks of ``script`` (given the marks dir)."""
        return self.start(
            PYTHON,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc_per_node",
            str(nproc),
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(free_port()),
            str(script),
            str(self.marks),
        )

    def wait_ranks_ready(self, what: str, ranks: tuple[int, ...] = (0, 1), timeout: float = 90) -> None:
        """Until every rank wrote its ``ready-<rank>`` mark; fails at once if the job ended first."""
        wait_for(
            lambda: all((self.marks / f"ready-{r}").exists() for r in ranks) or self.proc.poll() is not None,  # type: ignore[union-attr]
            timeout,
            what,
        )
        assert self.proc is not None and self.proc.poll() is None, self.stderr

    def wait(self, timeout: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def release(self) -> None:
        (self.marks / "release").write_text("")

    @property
    def stderr(self) -> str:
        return (self.root / "stderr.log").read_text(errors="replace")

    @property
    def stdout(self) -> str:
        return (self.root / "stdout.log").read_text(errors="replace")

    def node(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.manifest_dir / spec.NODE_MANIFEST_FILE).read_text())
        return data

    def node_if_any(self) -> dict[str, Any] | None:
        try:
            return self.node()
        except (OSError, ValueError):
            return None

    def rank(self, rank: int) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.manifest_dir / spec.rank_manifest_name(rank)).read_text())
        return data

    def rank_if_any(self, rank: int) -> dict[str, Any] | None:
        try:
            return self.rank(rank)
        except (OSError, ValueError):
            return None

    def rank_files(self) -> list[str]:
        return sorted(p.name for p in self.manifest_dir.glob(spec.RANK_MANIFEST_GLOB))

    def stop(self) -> None:
        """Kill whatever is left of this run (hook, command, ranks, adapters, sshd)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        kill_all(f"{TOKEN_ENV}={self.env[TOKEN_ENV]}\0")
        for pid in self.extra_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)


def base_env(root: Path, public_key: str | None, job: str = "test-job", **spec_fields: Any) -> dict[str, str]:
    """A clean environment for the hook: repo importable, a spec (unless ``public_key`` is None),
    per-test manifest and state dirs, no SageMaker config from this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_PREFIXES) and k not in _SCRUB_NAMES}
    env["PYTHONPATH"] = str(REPO)
    env["SM_INPUT_CONFIG_DIR"] = str(root / "no-sm-config")
    env[spec.ENV_MANIFEST_DIR] = str(root / "manifest")
    env[spec.ENV_STATE_DIR] = str(root / "state")
    env["OMP_NUM_THREADS"] = "1"
    env[TOKEN_ENV] = str(root)  # inherited by everything the test starts: how cleanup finds it
    # these tests talk to the ranks' debug ports directly; lazy listeners have tests of their own
    env[spec.ENV_LISTEN] = "eager"
    if public_key is not None:
        env.update(debug_spec(job, public_key, **spec_fields).to_env())
    return env


def debug_spec(job: str, public_key: str, **spec_fields: Any) -> spec.DebugSpec:
    """A spec: DebugOptions' fields (``wait_seconds=``, ``ide=``...) go into its options, the rest
    (``transport=``) is the job's wiring."""
    chosen = {f.name: spec_fields.pop(f.name) for f in dataclasses.fields(spec.DebugOptions) if f.name in spec_fields}
    options = spec.DebugOptions(**chosen)
    spec_fields.setdefault("job_secret", JOB_SECRET)
    return spec.DebugSpec(job_name=job, client_public_key=public_key, options=options, **spec_fields)


@contextlib.contextmanager
def hook_run(root: Path, env: dict[str, str]) -> Iterator[HookRun]:
    run = HookRun(root, env)
    try:
        yield run
    finally:
        run.stop()


class MiniDap:
    """Just enough of a DAP client to prove a listener speaks DAP and to attach once.

    (The real client lives in remote_debug.laptop; this one only frames messages.)
    """

    def __init__(self, port: int, timeout: float = 15.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""
        self.seq = 0
        self.backlog: list[dict[str, Any]] = []  # received but not yet asked for

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, command: str, **arguments: Any) -> int:
        self.seq += 1
        body = json.dumps({"seq": self.seq, "type": "request", "command": command, "arguments": arguments}).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def receive(self) -> dict[str, Any]:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        header, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lengths = [
            int(line.split(b":", 1)[1]) for line in header.split(b"\r\n") if line.lower().startswith(b"content-length:")
        ]
        assert lengths, f"no Content-Length in {header!r}"
        while len(self.buffer) < lengths[0]:
            self._fill()
        body, self.buffer = self.buffer[: lengths[0]], self.buffer[lengths[0] :]
        message: dict[str, Any] = json.loads(body)
        return message

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("debug adapter closed the connection")
        self.buffer += chunk

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        for message in self.backlog:
            if predicate(message):
                self.backlog.remove(message)
                return message
        while True:
            message = self.receive()
            if predicate(message):
                return message
            self.backlog.append(message)

    def response_to(self, seq: int) -> dict[str, Any]:
        return self.wait_for(lambda m: m.get("type") == "response" and m.get("request_seq") == seq)

    def event(self, name: str) -> dict[str, Any]:
        return self.wait_for(lambda m: m.get("type") == "event" and m.get("event") == name)

    def initialize(self) -> dict[str, Any]:
        return self.response_to(
            self.send(
                "initialize",
                clientID="remote-debug-tests",
                adapterID="debugpy",
                linesStartAt1=True,
                columnsStartAt1=True,
                pathFormat="path",
            )
        )

    def attach(self) -> dict[str, Any]:
        """initialize -> attach -> initialized -> configurationDone -> attach response."""
        self.initialize()
        attach_seq = self.send("attach", justMyCode=False)
        self.event("initialized")
        done = self.response_to(self.send("configurationDone"))
        assert done["success"], done
        return self.response_to(attach_seq)


def probe_and_reset(port: int, pause: float) -> None:
    """Connect to a debug port, then go with a RST after ``pause`` s: a port scanner, or a client that
    gave up at once."""
    probe = socket.create_connection(("127.0.0.1", port))
    time.sleep(pause)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST: gone at once
    probe.close()


# --- security scans: listeners and secrets, read from /proc -------------------------------------------


@dataclass(frozen=True)
class Listener:
    """One LISTEN socket and the process holding it."""

    pid: int
    address: str  # "127.0.0.1", "::1", "0.0.0.0", "::", ...
    port: int
    inode: int

    @property
    def loopback(self) -> bool:
        import ipaddress

        ip = ipaddress.ip_address(self.address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is loopback too
        return ip.is_loopback


def decode_proc_address(hex_address: str) -> str:
    """``0100007F`` -> ``127.0.0.1``; the 32-digit tcp6 form -> an IPv6 address (/proc/net/tcp*
    prints each 32-bit word in host byte order)."""
    import ipaddress

    words = [
        bytes.fromhex(hex_address[i : i + 8])[::-1]
        if sys.byteorder == "little"
        else bytes.fromhex(hex_address[i : i + 8])
        for i in range(0, len(hex_address), 8)
    ]
    return str(ipaddress.ip_address(b"".join(words)))


def listen_table(pid: int | str = "self") -> dict[int, tuple[str, int]]:
    """inode -> (address, port) of every LISTEN socket in ``pid``'s network namespace."""
    table: dict[int, tuple[str, int]] = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # 0A = LISTEN
                continue
            address, port_hex = fields[1].rsplit(":", 1)
            table[int(fields[9])] = (decode_proc_address(address), int(port_hex, 16))
    return table


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets ``pid`` holds open (its /proc/<pid>/fd links ``socket:[N]``)."""
    inodes: set[int] = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in names:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def listeners_of(pids: list[int]) -> list[Listener]:
    """Every LISTEN socket held by ``pids`` (each looked up in its own network namespace)."""
    found = []
    for pid in sorted(set(pids)):
        table = listen_table(pid)
        for inode in sorted(socket_inodes(pid)):
            if inode in table:
                found.append(Listener(pid, *table[inode], inode))
    return found


def argv_of(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def all_pids() -> list[int]:
    return sorted(int(entry) for entry in os.listdir("/proc") if entry.isdigit())


@dataclass
class SecretScan:
    """What a scan of /proc/<pid>/<file> for secret strings looked at and found."""

    scanned: int = 0  # processes whose file could be read
    offenders: list[tuple[int, str]] = field(default_factory=list)  # (pid, its argv joined by spaces)


def scan_for_secrets(secrets: list[str], what: str = "cmdline", pids: list[int] | None = None) -> SecretScan:
    """Processes (every one in /proc unless ``pids``) whose ``what`` (cmdline or environ) contains any
    of ``secrets``.  Secrets shorter than 8 characters are refused: they would match by chance."""
    needles = [s.encode() for s in secrets]
    assert needles and all(len(n) >= 8 for n in needles), "secrets to scan for must be at least 8 characters"
    scan = SecretScan()
    for pid in pids if pids is not None else all_pids():
        try:
            data = Path(f"/proc/{pid}/{what}").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        scan.scanned += 1
        if any(n in data for n in needles):
            scan.offenders.append((pid, " ".join(argv_of(pid))[:300]))
    return scan


def parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def with_descendants(pids: list[int]) -> list[int]:
    """``pids`` and every process below them (sshd, for one, starts from an empty environment,
    so a token in the environment does not find it)."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        children.setdefault(parent_of(pid), []).append(pid)
    found: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return sorted(found)


def control_request(port: int, op: str, timeout: float = 20, secret: str | None = JOB_SECRET) -> dict[str, Any]:
    """One request to a rank's control channel on 127.0.0.1:``port`` (a JSON line each way), with the
    token of ``secret`` (None: without one)."""
    payload: dict[str, Any] = {"op": op}
    if secret is not None:
        payload["auth"] = job_secret.control_token(secret)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        data = exchange(sock, payload)  # the laptop's side of the protocol, without the SSH tunnel
    reply: dict[str, Any] = json.loads(data or b"{}")
    return reply
