"""The headless DAP client against a real debugpy in real subprocesses.

Every process a test starts (the debuggee and the daemonized debugpy adapter it spawns) is found by pid
and killed in the `lab` fixture's teardown, even when a test fails half-way.  Ports are ephemeral, never
5678.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from remote_debug.laptop.ide.dap_client import (
    DapClient,
    DapError,
    StopInfo,
    attach_and_configure,
    inspect_stop,
)
from remote_debug.laptop.ide.headless_session import HeadlessPlan, RankReport, debug_rank

pytestmark = pytest.mark.timeout(120)

DEBUGGEE = """\
import os
import sys
import time

import debugpy

rank = int(sys.argv[1])
requested_port = int(sys.argv[2])
port_file = sys.argv[3]
iterations = int(sys.argv[4])
pause = float(sys.argv[5])

_, port = debugpy.listen(("127.0.0.1", requested_port))
with open(port_file + ".tmp", "w") as f:
    f.write(str(port))
os.replace(port_file + ".tmp", port_file)  # atomic: the test never reads a half-written port
debugpy.wait_for_client()

total = 0
for step in range(iterations):
    value = 10 * rank + step
    total += value  # MARK-BREAK
    doubled = 2 * total  # MARK-AFTER
    time.sleep(pause)
print("done", total, flush=True)
"""

RANK = 3


def _line_of(marker: str) -> int:
    return next(i for i, text in enumerate(DEBUGGEE.splitlines(), 1) if marker in text)


BREAK_LINE = _line_of("MARK-BREAK")
AFTER_LINE = _line_of("MARK-AFTER")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Debuggee:
    proc: subprocess.Popen[bytes]
    port_file: Path
    log: Path

    def port(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.port_file.exists():
                return int(self.port_file.read_text())
            if self.proc.poll() is not None:
                pytest.fail(f"debuggee exited {self.proc.returncode} early:\n{self.log.read_text()}")
            time.sleep(0.02)
        pytest.fail(f"debuggee did not listen within {timeout}s:\n{self.log.read_text()}")

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"debuggee still running after {timeout}s:\n{self.log.read_text()}")


@dataclass
class Layout:
    """The "remote" script the debuggee runs and the "local" copy the IDE (our client) sees."""

    remote: Path
    local: Path

    @property
    def mapping(self) -> list[tuple[str, str]]:
        return [(str(self.local.parent), str(self.remote.parent))]


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    remote, local = tmp_path / "remote" / "train.py", tmp_path / "local" / "train.py"
    for p in (remote, local):
        p.parent.mkdir()
        p.write_text(DEBUGGEE)
    return Layout(remote=remote, local=local)


TAG_VAR = "REMOTE_DEBUG_DAP_TEST_TAG"


def _tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment carries our tag: the debuggee and the adapter it spawned."""
    needle = f"{TAG_VAR}={tag}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


class Lab:
    """Starts debuggees and remembers every process and client, for a teardown that survives failures.

    debugpy's adapter daemonizes (setsid + double fork), so it escapes the debuggee's process group; it
    exits by itself once the debuggee is gone and no client is connected.  Each lab run tags its processes
    through the environment (the adapter inherits it) so teardown can find exactly those pids and kill any
    that did not exit on their own.
    """

    def __init__(self, tmp_path: Path, layout: Layout) -> None:
        self.tmp_path, self.layout = tmp_path, layout
        self.tag = uuid.uuid4().hex
        self.procs: list[subprocess.Popen[bytes]] = []
        self.clients: list[DapClient] = []
        self.leftovers: list[int] = []

    def start(self, *, port: int = 0, iterations: int = 3, pause: float = 0.0) -> Debuggee:
        n = len(self.procs)
        port_file, log = self.tmp_path / f"port{n}", self.tmp_path / f"debuggee{n}.log"
        env = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1", **{TAG_VAR: self.tag})
        args = [str(self.layout.remote), str(RANK), str(port), str(port_file), str(iterations), str(pause)]
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT, env=env)
        self.procs.append(proc)
        return Debuggee(proc, port_file, log)

    def track(self, client: DapClient) -> DapClient:
        self.clients.append(client)
        return client

    def teardown(self) -> None:
        for client in self.clients:
            client.close()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        deadline = time.monotonic() + 5.0  # the adapter notices both ends gone within a moment
        while (pids := _tagged_pids(self.tag)) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.leftovers = pids
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def lab(tmp_path: Path, layout: Layout) -> Iterator[Lab]:
    lab = Lab(tmp_path, layout)
    try:
        yield lab
    finally:
        lab.teardown()
    assert not lab.leftovers, f"processes had to be killed after the test: {lab.leftovers}"


def _attach(lab: Lab, port: int, *, timeout: float = 30) -> DapClient:
    """The full attach sequence with the correct mapping and one breakpoint on the marked line."""
    layout = lab.layout
    client = attach_and_configure(
        "127.0.0.1",
        port,
        path_mappings=layout.mapping,
        breakpoints={str(layout.local): [BREAK_LINE]},
        timeout=timeout,
    )
    return lab.track(client)


def _report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    with capsys.disabled():
        print(f"\n[dap timing] {text}")


def test_attach_break_inspect_next_continue(lab: Lab, layout: Layout, capsys: pytest.CaptureFixture[str]) -> None:
    dbg = lab.start(iterations=2)
    port = dbg.port()
    t0 = time.monotonic()
    client = _attach(lab, port)
    stop = inspect_stop(client, timeout=30)
    connect_to_stopped = time.monotonic() - t0
    assert isinstance(stop, StopInfo)
    assert stop.reason == "breakpoint"
    # The reported file is the LOCAL path: pathMappings translated it back.
    assert (stop.file, stop.line, stop.function) == (str(layout.local), BREAK_LINE, "<module>")
    assert stop.variables["value"] == str(10 * RANK)
    assert stop.variables["total"] == "0"
    assert client.evaluate("value * 2 + rank", stop.frame_id) == str(21 * RANK)

    client.next(stop.thread_id)
    after = inspect_stop(client, timeout=10)
    assert after.reason == "step"
    assert after.line == BREAK_LINE + 1 == AFTER_LINE
    assert after.variables["total"] == str(10 * RANK)

    # Per-`next` latency, back to back (lab facts: ~44 ms from Nagle inside debugpy, not fixable client-side).
    latencies = []
    for _ in range(6):
        t = time.monotonic()
        client.next(after.thread_id)
        client.wait_stopped(10)
        latencies.append(time.monotonic() - t)

    client.set_breakpoints(str(layout.local), [])
    client.continue_(after.thread_id)
    assert dbg.wait() == 0
    assert "done" in dbg.log.read_text()
    # debugpy's adapter keeps the socket open after the debuggee exits; "terminated" ends the session and
    # the client closes itself (so the daemonized adapter can exit too).
    client.wait_event("terminated", 10)
    assert client.terminated
    t = time.monotonic()
    with pytest.raises(DapError, match="terminated"):
        client.wait_stopped(10)
    assert time.monotonic() - t < 1.0  # no need to sit out the timeout
    assert client.closed
    client.disconnect()  # harmless on a finished session
    _report(
        capsys,
        f"connect->stopped {connect_to_stopped * 1000:.0f} ms; next: median "
        f"{statistics.median(latencies) * 1000:.1f} ms, min {min(latencies) * 1000:.1f}, "
        f"max {max(latencies) * 1000:.1f} ms over {len(latencies)}",
    )


def test_disconnect_while_stopped_resumes_debuggee(lab: Lab, layout: Layout) -> None:
    dbg = lab.start(iterations=3)
    client = _attach(lab, dbg.port())
    stop = inspect_stop(client, timeout=30)
    assert stop.line == BREAK_LINE
    assert [t["id"] for t in client.threads()].count(stop.thread_id) == 1
    assert client.stack_trace(stop.thread_id)[0]["line"] == BREAK_LINE
    with pytest.raises(DapError, match="evaluate"):
        client.evaluate("no_such_name", stop.frame_id)
    client.disconnect(terminate_debuggee=False)
    assert client.closed
    # debugpy drops the client's breakpoints on disconnect, so the remaining iterations run through.
    assert dbg.wait() == 0
    assert f"done {sum(10 * RANK + s for s in range(3))}" in dbg.log.read_text()


def test_connect_before_debuggee_listens(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(_attach, lab, port)  # tracked by the lab even if this test gives up on it
        time.sleep(1.0)
        assert not future.done()
        t = time.monotonic()
        dbg = lab.start(port=port, iterations=1)
        client = future.result(40)
        _report(capsys, f"debuggee spawn -> attached (client retrying meanwhile) {time.monotonic() - t:.2f} s")
    stop = inspect_stop(client, timeout=30)
    assert (stop.line, stop.variables["value"]) == (BREAK_LINE, str(10 * RANK))
    client.continue_all()
    assert dbg.wait() == 0


def test_connect_nobody_listening_times_out() -> None:
    port = _free_port()
    t = time.monotonic()
    with pytest.raises(DapError, match=f"127.0.0.1:{port}") as info:
        DapClient.connect("127.0.0.1", port, timeout=1.5)
    elapsed = time.monotonic() - t
    assert 1.4 < elapsed < 3.0
    assert "\n" not in str(info.value)


class FlakyForward:
    """Stands in for `ssh -L` before the remote end listens.

    Accepts, then closes the first `drops` connections (after `hold` seconds, as ssh does once the channel
    open fails); afterwards relays to `target`.  Once a chunk from `target` holds `slow_after`, every
    later one comes `reply_delay` seconds late (a slow link, or a node too busy to answer at once).
    """

    def __init__(
        self, target: int, drops: int, hold: float = 0.05, *, slow_after: bytes = b"", reply_delay: float = 0.0
    ) -> None:
        self.target, self.drops, self.hold = target, drops, hold
        self.slow_after, self.reply_delay = slow_after, reply_delay
        self.accepted = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.drops:
                time.sleep(self.hold)
                conn.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._socks += [conn, upstream]
            for a, b, marker in ((conn, upstream, b""), (upstream, conn, self.slow_after)):
                threading.Thread(target=self._pump, args=(a, b, marker), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, slow_after: bytes) -> None:
        slow = False
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if slow:
                    time.sleep(self.reply_delay)
                dst.sendall(data)
                slow = slow or bool(slow_after and slow_after in data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._server.close()
        with self._lock:
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


def test_attach_through_forward_that_drops_first_connections(
    lab: Lab, layout: Layout, capsys: pytest.CaptureFixture[str]
) -> None:
    dbg = lab.start(iterations=1)
    forward = FlakyForward(dbg.port(), drops=3)
    try:
        t = time.monotonic()
        client = _attach(lab, forward.port)
        _report(capsys, f"attach through a forward dropping 3 connections {time.monotonic() - t:.2f} s")
        assert forward.accepted == 4
        stop = inspect_stop(client, timeout=30)
        assert (stop.file, stop.line) == (str(layout.local), BREAK_LINE)
        client.continue_(stop.thread_id)
        assert dbg.wait() == 0
        client.disconnect()
    finally:
        forward.close()


def test_headless_session_keeps_a_stop_whose_replies_come_slowly(lab: Lab, layout: Layout) -> None:
    """A headless session polls for the stop with a short timeout.  The stop's stackTrace and
    variables answers must get the full request timeout: over a link that delays each reply after
    the stop by more than the poll, the stopped event was taken, its requests timed out, and the
    session then waited forever for a second stop from a rank that stayed paused (CI's 64-rank
    attach, under load)."""
    dbg = lab.start(iterations=2)
    forward = FlakyForward(dbg.port(), drops=0, slow_after=b'"stopped"', reply_delay=1.3)
    plan = HeadlessPlan(breakpoints={str(layout.local): [BREAK_LINE]}, max_stops=1, attach_timeout=60)
    reports: list[RankReport] = []
    give_up = threading.Event()

    def session() -> None:
        reports.append(
            debug_rank(
                RANK,
                "algo-1",
                "127.0.0.1",
                forward.port,
                plan,
                path_mappings=layout.mapping,
                emit=lambda _event: None,
                stop=give_up,
            )
        )

    runner = threading.Thread(target=session, daemon=True)
    try:
        runner.start()
        runner.join(60)
        assert not runner.is_alive(), "the session lost its stop and waited for another one"
        [report] = reports
        assert report.error is None, report.error
        [stop] = report.stops
        assert (stop.file, stop.line) == (str(layout.local), BREAK_LINE)
        assert stop.variables["value"] == str(10 * RANK)
        assert dbg.wait() == 0  # let go: breakpoints cleared, the debuggee ran to its end
    finally:
        give_up.set()
        runner.join(10)
        forward.close()


@pytest.mark.parametrize(
    ("case", "expect_verified"),
    [
        # No mapping: the local path is sent as is.  It exists on the debuggee's filesystem (same machine),
        # so debugpy says verified although that file is not the one running: the lab-facts trap.
        ("unmapped", True),
        # A remoteRoot that does not exist there: debugpy says "Breakpoint in file that does not exist."
        ("missing-remote-root", False),
    ],
)
def test_wrong_path_mapping_never_hits(
    lab: Lab, layout: Layout, tmp_path: Path, case: str, expect_verified: bool
) -> None:
    # Long enough that the debuggee still runs when we give up waiting: a timeout, not an exit.
    dbg = lab.start(iterations=30, pause=0.1)
    mapping = [] if case == "unmapped" else [(str(layout.local.parent), str(tmp_path / "elsewhere"))]
    client = lab.track(DapClient.connect("127.0.0.1", dbg.port(), timeout=30))
    attach = client.attach(path_mappings=mapping)
    client.wait_initialized(30)
    answered = client.set_breakpoints(str(layout.local), [BREAK_LINE])
    client.set_exception_breakpoints([])
    client.configuration_done()
    attach.result(30)
    assert [b.get("verified") for b in answered] == [expect_verified]
    with pytest.raises(DapError, match="within"):
        client.wait_stopped(2.0)  # the only trustworthy proof: no stop
    assert dbg.proc.poll() is None
    client.disconnect()
    assert dbg.wait() == 0


def test_request_failure_and_output(lab: Lab) -> None:
    dbg = lab.start(iterations=1)
    with DapClient.connect("127.0.0.1", dbg.port(), timeout=30) as client:
        assert client.capabilities.get("supportsConfigurationDoneRequest") is True
        with pytest.raises(DapError, match="'noSuchCommand' failed"):
            client.request("noSuchCommand", {}, timeout=10)
        attach = client.attach(extra={"redirectOutput": True})
        client.wait_initialized(30)
        client.configuration_done()
        attach.result(30)
        assert dbg.wait() == 0
        client.wait_event("terminated", 10)
        assert "done" in client.output()
        # Still inside `with`: the self-close on "terminated" alone must let the daemonized adapter exit.
        deadline = time.monotonic() + 10
        while _tagged_pids(lab.tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _tagged_pids(lab.tag) == []
    with pytest.raises(DapError, match="terminated"):
        client.threads(timeout=10)
