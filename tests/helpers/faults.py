"""A controllable relay for fault injection in the ProxyCommand path, and leak snapshots.

The seam: every connection the laptop makes to a node goes through the ProxyCommand of the
generated ssh entry (``remote-debug proxy %h %p``: on SageMaker the SSM plugin, locally a TCP relay
to the node's sshd).  Tests wrap that command (``FaultRelay.wrap``) so that each connection runs

    paramiko/ssh <-pipes-> fault wrapper (this file as a script) <-pipes-> the REAL proxy command -> sshd

No product code knows about faults: the real proxy, the real relay, sshd and the ranks all run as in
production.  Faults act where a dropped SSM session or a dead network show themselves to the
laptop, on the ProxyCommand's stdio:

* CUT: every wrapper kills its real proxy and exits (EOF on the pipe, as when the SSM plugin exits);
  while cut, new connections are refused (the wrapper exits at once with an error, as a failed
  StartSession does).
* BLACKHOLE: wrappers keep every pipe open but stop moving bytes both ways; no EOF, no RST (a
  laptop whose Wi-Fi died).  New connections hang the same way.  Held bytes are delivered on
  RESTORE, as TCP would retransmit them.
* DELAY: every chunk waits this long before it is forwarded (each direction).
* RESTORE: bytes flow again; new connections are accepted.

The control channel: the wrapper connects to the test's hub (a loopback TCP listener), says hello
with its pid, gets the current mode and then every change as one line.  The wrapper imports only
the standard library (it runs as a plain script under the same interpreter).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASS, CUT, BLACKHOLE = "pass", "cut", "blackhole"


# --- the hub (inside the test process) --------------------------------------------------------


@dataclass
class FaultCounts:
    cuts: int = 0
    blackholes: int = 0
    delays: int = 0
    restores: int = 0
    connections: int = 0  # wrappers that registered (each is one ProxyCommand run)
    refused: int = 0  # wrappers told "cut" at registration


class FaultRelay:
    """The test's side: hands out wrapped ProxyCommands and switches every wrapper's mode."""

    def __init__(self) -> None:
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self.counts = FaultCounts()
        self._mode = PASS
        self._delay = 0.0
        self._lock = threading.Lock()
        self._wrappers: dict[socket.socket, int] = {}  # control connection -> wrapper pid
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="fault-relay-hub", daemon=True)
        self._thread.start()

    def wrap(self, proxy_command: str) -> str:
        """The ProxyCommand template (``%h``/``%p`` kept) that runs ``proxy_command`` behind a wrapper."""
        script = Path(__file__).resolve()
        return " ".join(
            [shlex.quote(sys.executable), shlex.quote(str(script)), "--hub", self.address, "--", proxy_command]
        )

    # modes ------------------------------------------------------------------------------------

    def _mode_line(self) -> bytes:
        return f"{self._mode} {self._delay}\n".encode()

    def _broadcast(self) -> None:
        line = self._mode_line()
        for conn in list(self._wrappers):
            with contextlib.suppress(OSError):
                conn.sendall(line)

    def cut(self) -> None:
        with self._lock:
            self._mode = CUT
            self.counts.cuts += 1
            self._broadcast()

    def blackhole(self) -> None:
        with self._lock:
            self._mode = BLACKHOLE
            self.counts.blackholes += 1
            self._broadcast()

    def delay(self, seconds: float) -> None:
        with self._lock:
            self._delay = seconds
            self.counts.delays += 1
            self._broadcast()

    def restore(self) -> None:
        with self._lock:
            self._mode, self._delay = PASS, 0.0
            self.counts.restores += 1
            self._broadcast()

    @property
    def live(self) -> list[int]:
        """Pids of wrappers whose connection is still up (a transport that gave up kills its wrapper)."""
        with self._lock:
            return sorted(self._wrappers.values())

    # hub loop ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._closed:
            try:
                ready = self._selector.select(timeout=0.2)
            except (OSError, ValueError):
                return
            for key, _ in ready:
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._server:
                    self._accept()
                else:
                    self._read(sock)

    def _accept(self) -> None:
        try:
            conn, _ = self._server.accept()
        except OSError:
            return
        conn.settimeout(5)
        try:
            hello = conn.recv(64).decode().split()
            pid = int(hello[1])
        except (OSError, ValueError, IndexError):
            conn.close()
            return
        conn.settimeout(None)
        with self._lock:
            self.counts.connections += 1
            if self._mode == CUT:
                self.counts.refused += 1
            with contextlib.suppress(OSError):
                conn.sendall(self._mode_line())
            self._wrappers[conn] = pid
            self._selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if data:
            return
        with self._lock:
            self._wrappers.pop(conn, None)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(conn)
        conn.close()

    def close(self) -> None:
        """Stop the hub: every wrapper sees its control connection end and exits."""
        self._closed = True
        self._thread.join(timeout=2)
        with self._lock:
            for conn in list(self._wrappers):
                with contextlib.suppress(OSError):
                    conn.close()
            self._wrappers.clear()
        self._selector.close()
        self._server.close()


# --- leak snapshots ---------------------------------------------------------------------------


def children(pid: int | str = "self") -> list[int]:
    """Direct children of ``pid`` (zombies included)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return sorted(found)


def is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1] == "Z"
    except (OSError, IndexError):
        return False


def pids_with_arg(marker: str) -> list[int]:
    """Live processes whose argv contains ``marker`` (zombies have no argv and are counted apart)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
    return sorted(found)


def listening_ports(pid: int | str = "self") -> list[int]:
    from tests.helpers.hook_runs import listen_table, socket_inodes

    table = listen_table(pid)
    own = socket_inodes(os.getpid() if pid == "self" else int(pid))
    return sorted(table[i][1] for i in own if i in table)


@dataclass
class Snapshot:
    """What a long-running attach could leak, measured in this (the attach) process."""

    fds: int
    threads: int
    children: list[int]
    zombies: int
    listening: list[int]
    proxies: int  # live ProxyCommand processes (wrappers and real proxies) for this test
    extra: dict[str, int] = field(default_factory=dict)

    @classmethod
    def take(cls, proxy_marker: str) -> Snapshot:
        kids = children()
        return cls(
            fds=len(os.listdir("/proc/self/fd")),
            threads=len(os.listdir("/proc/self/task")),
            children=kids,
            zombies=sum(is_zombie(k) for k in kids),
            listening=listening_ports(),
            proxies=len(pids_with_arg(proxy_marker)),
        )


# --- a job with a heartbeat, and attach running in the background -------------------------------

# One rank, no torch (nothing here needs collectives): it bumps a counter in a file until told to
# stop, so a test sees whether the rank is paused (counter frozen) or running.  BEAT is the line a
# breakpoint goes on.
BEAT_SCRIPT = """\
import pathlib, sys, time
stop, beat = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
i = 0
while not stop.exists():
    i += 1
    beat.write_text(str(i))  # BEAT
    time.sleep(0.02)
print("finished after", i, "beats", flush=True)
"""
BEAT_LINE = 6


class BeatJob:
    """A one-rank local job running BEAT_SCRIPT, and ``attach`` for it in a background thread."""

    def __init__(self, name: str, root: Path) -> None:
        from tests.helpers.event_log import EventLog
        from tests.helpers.jobs import launch_job

        self.project = root / "project"
        self.project.mkdir()
        self.script = self.project / "train.py"
        self.script.write_text(BEAT_SCRIPT)
        self.stop_file, self.beat_file = root / "stop", root / "beat"
        self.job = launch_job(name, self.project, ["python", "train.py", str(self.stop_file), str(self.beat_file)])
        self.name = name
        self.events = EventLog()
        self.result: Any = None
        self.error: BaseException | None = None
        self.attacher: Any = None
        self._thread: threading.Thread | None = None

    def beats(self) -> int:
        try:
            return int(self.beat_file.read_text() or 0)
        except (OSError, ValueError):
            return 0

    def wait_beats_advance(self, timeout: float) -> int:
        """The counter moved by at least 3 within ``timeout`` (the rank runs); returns the new value."""
        start = self.beats()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = self.beats()
            if now >= start + 3:
                return now
            time.sleep(0.05)
        raise AssertionError(f"rank did not run on within {timeout} s (beat stayed at {self.beats()})")

    def start_attach(self) -> int:
        """Run ``attach`` (no launch.json, no ~/.ssh/config edit) in a thread; the rank's local port."""
        from remote_debug.laptop.attach.attacher import Attacher, AttachOptions

        options = AttachOptions(workspace=self.project, write_launch_json=False, edit_user_ssh_config=False)
        self.attacher = Attacher(self.job.backend, self.name, options, self.events.append, self.job.paths)

        def run() -> None:
            try:
                self.result = self.attacher.run()
            except BaseException as exc:  # reported by finish()
                self.error = exc

        self._thread = threading.Thread(target=run, name=f"attach-{self.name}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.error is not None:
                raise self.error
            ready = [e for e in self.events if e["event"] == "rank-ready" and e.get("local_port")]
            if ready:
                return int(ready[0]["local_port"])
            time.sleep(0.05)
        raise AssertionError(f"attach never reported a ready rank: {self.events}")

    def finish(self, timeout: float = 30) -> Any:
        """Let the job end (its loop stops), then wait for ``attach`` to return its result."""
        self.stop_file.write_text("stop")
        if self._thread is not None:
            self._thread.join(timeout)
            assert not self._thread.is_alive(), "attach did not return after the job ended"
        if self.error is not None:
            raise self.error
        return self.result

    def control_forward(self) -> ControlForward:
        """A local forward (on attach's own tunnel) to the rank's control channel, for tunnel_usable."""
        manifest = self.job.backend.manifests(self.name)["algo-1"]
        assert manifest is not None and manifest.ranks
        connection = self.attacher.connection
        port = connection.tunnel("algo-1").forward(manifest.ranks[0].control_port)
        return ControlForward(int(port), connection.secret)

    def ide(self, port: int) -> Any:
        """Our DAP client as the IDE on local forward ``port``: attached, a breakpoint on the heartbeat line."""
        from remote_debug.laptop.ide.dap_client import attach_and_configure

        return attach_and_configure(
            "127.0.0.1",
            port,
            path_mappings=[(str(self.project), self.attacher.forwards[0].code_dir)],
            breakpoints={str(self.script): [BEAT_LINE]},
            timeout=30,
        )

    def events_named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["event"] == name]


@dataclass(frozen=True)
class ControlForward:
    port: int  # on this machine's loopback
    secret: str  # the job's: its control token goes with each request


def tunnel_usable(forward: ControlForward, timeout: float) -> float:
    """Seconds until a request through local forward ``port`` (to a rank's control channel) is answered.

    Not a DAP ``initialize`` on the debug port: debugpy 1.8's adapter can stop listening for good
    after a client that initialized and left (measured), so probing it would break the very rank
    the test then wants to debug.  The control forward goes the same way: local listener -> SSH
    channel -> the node's loopback port.
    """
    from tests.helpers.hook_runs import control_request  # not at the top: the wrapper process runs this file

    start = time.monotonic()
    deadline = start + timeout
    last = "no attempt"
    while time.monotonic() < deadline:
        try:
            reply = control_request(
                forward.port, "stacks", timeout=max(0.1, min(2.0, deadline - time.monotonic())), secret=forward.secret
            )
            if reply.get("ok"):
                return time.monotonic() - start
            last = f"answer {str(reply)[:80]}"
        except (OSError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.05)
    raise AssertionError(f"no answer through 127.0.0.1:{forward.port} within {timeout} s ({last})")


# --- the wrapper (a process per connection) ---------------------------------------------------


class _Wrapper:
    def __init__(self, hub: str, argv: list[str]) -> None:
        host, _, port = hub.rpartition(":")
        self.control = socket.create_connection((host, int(port)), timeout=10)
        self.control.sendall(f"hello {os.getpid()}\n".encode())
        self.mode, self.delay = self._parse(self.control.recv(64))
        self.control.settimeout(None)  # mode changes may be minutes apart
        self.cond = threading.Condition()
        self.child: subprocess.Popen[bytes] | None = None
        if self.mode == CUT:
            sys.stderr.write("fault relay: connection refused (link cut)\n")
            os._exit(255)
        self.child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)

    @staticmethod
    def _parse(line: bytes) -> tuple[str, float]:
        lines = line.decode().strip().splitlines()
        words = lines[-1].split() if lines else []  # several changes may arrive at once: the last wins
        if not words:
            return CUT, 0.0  # the hub is gone: behave as a cut link
        return words[0], float(words[1]) if len(words) > 1 else 0.0

    def die(self, code: int = 1) -> None:
        if self.child is not None:
            with contextlib.suppress(OSError):
                self.child.kill()
            with contextlib.suppress(Exception):
                self.child.wait(timeout=2)
        os._exit(code)

    def watch_control(self) -> None:
        buffer = b""
        while True:
            try:
                data = self.control.recv(256)
            except OSError:
                data = b""
            if not data:
                self.die()
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                mode, delay = self._parse(line + b"\n")
                if mode == CUT:
                    self.die()
                with self.cond:
                    self.mode, self.delay = mode, delay
                    self.cond.notify_all()

    def gate(self) -> None:
        """Called with each chunk before forwarding it: hold while blackholed, add the delay."""
        with self.cond:
            while self.mode == BLACKHOLE:
                self.cond.wait()
            delay = self.delay
        if delay:
            time.sleep(delay)

    def pump(self, src: int, dst: int, on_eof: str) -> None:
        try:
            while data := os.read(src, 65536):
                self.gate()
                view = memoryview(data)
                while view:
                    view = view[os.write(dst, view) :]
        except OSError:
            pass
        self.gate()  # a blackholed link delivers no EOF either
        if on_eof == "close-child-stdin":  # ssh closed our stdin: let the real proxy wind down
            assert self.child is not None and self.child.stdin is not None
            with contextlib.suppress(OSError):
                self.child.stdin.close()
            with contextlib.suppress(Exception):
                self.child.wait(timeout=5)
        self.die(0)

    def run(self) -> None:
        assert self.child is not None and self.child.stdin is not None and self.child.stdout is not None
        signal.signal(signal.SIGTERM, lambda *_: self.die(143))
        threading.Thread(target=self.watch_control, daemon=True).start()
        threading.Thread(
            target=self.pump, args=(0, self.child.stdin.fileno(), "close-child-stdin"), daemon=True
        ).start()
        self.pump(self.child.stdout.fileno(), 1, "exit")


def _main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[0] != "--hub" or argv[2] != "--":
        sys.stderr.write("usage: faults.py --hub HOST:PORT -- COMMAND...\n")
        raise SystemExit(2)
    _Wrapper(argv[1], argv[3:]).run()


if __name__ == "__main__":
    _main(sys.argv[1:])
