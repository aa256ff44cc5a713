"""A headless stand-in for PyCharm's "Python Debug Server": pydevd's line protocol, IDE side.

``demo --ide pycharm --headless``, ``attach --ide pycharm --headless`` and the tests use it where a
user would run PyCharm: it listens on a laptop port, every rank connects to it (through the
reverse tunnels), and per connection it does what the built-in DAP client does for VS Code ranks:
set the breakpoints, let the rank run, and at each stop report the top frame and its locals, step
``steps`` times, then clear the breakpoints (after ``max_stops``) and resume.  A suspension the attach's
rank group caused (all-stop, Pause All: its ``message`` says so) is no stop of the rank's own: it is noted
(``group_stops``) and left as it is, as the headless DAP client leaves such a stop for the group to end.

The wire format (pydevd-pycharm, measured against 263.x): one message per line,
``"<cmd id>\\t<seq>\\t<text>\\n"``; pydevd URL-quotes the text, and inside its XML it quotes names
and values once more.  The IDE speaks first: CMD_VERSION, the breakpoints, CMD_RUN.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import socket
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

from remote_debug.contract.spec import LOOPBACK
from remote_debug.laptop.connection.pydevd_tap import GROUP_MESSAGE
from remote_debug.laptop.ide.headless_session import HeadlessPlan, RankReport, StopRecord
from remote_debug.laptop.wire import events as ev
from remote_debug.laptop.wire.events import Emit

CMD_RUN = 101
CMD_THREAD_SUSPEND = 105
CMD_THREAD_RUN = 106
CMD_STEP_OVER = 108
CMD_SET_BREAK = 111
CMD_REMOVE_BREAK = 112
CMD_GET_FRAME = 114
CMD_ERROR = 901
CMD_VERSION = 501
CMD_ADD_EXCEPTION_BREAK = 122  # a suspend's reason: stopped at an exception (a post-mortem stop)
_STOP_REASONS = {str(CMD_SET_BREAK): "breakpoint", str(CMD_ADD_EXCEPTION_BREAK): "exception"}
# "1.1" protocol, this machine's path style, breakpoints addressed by id (as PyCharm does).
VERSION_TEXT = "1.1\tUNIX\tID"

Identify = Callable[[int], "tuple[int, str] | None"]  # peer port -> (rank, node)


class PydevdError(Exception):
    pass


@dataclass
class Message:
    cmd: int
    seq: int
    text: str  # unquoted


@dataclass
class Suspend:
    thread_id: str
    reason: str
    file: str
    line: int
    function: str
    frame_id: str
    message: str = ""  # pydevd's note on the stop (a log breakpoint's text; the rank group's reason)


def parse_suspend(text: str) -> Suspend:
    """The first thread and its top frame from a CMD_THREAD_SUSPEND payload."""
    root = ET.fromstring(text)
    thread = root.find("thread")
    if thread is None:
        raise PydevdError("suspend message without a thread")
    frame = thread.find("frame")
    if frame is None:
        raise PydevdError("suspend message without a frame")
    return Suspend(
        thread_id=thread.get("id", ""),
        reason=thread.get("stop_reason", ""),
        file=unquote(frame.get("file", "")),
        line=int(frame.get("line", "0")),
        function=unquote(frame.get("name", "")),
        frame_id=frame.get("id", ""),
        message=unquote(thread.get("message", "")),
    )


def parse_variables(text: str) -> dict[str, str]:
    """``<xml><var name=".." value=".."/>...</xml>`` -> {name: value} (values as pydevd renders them)."""
    root = ET.fromstring(text)
    return {unquote(v.get("name", "")): unquote(v.get("value", "")) for v in root.iter("var")}


class PydevdConnection:
    """One debuggee (a rank) connected to the server: send commands, await messages."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._seq = -1  # the IDE numbers its requests with odd numbers, pydevd its own with even
        self._queue: queue.Queue[Message | None] = queue.Queue()
        self._send_lock = threading.Lock()
        self.closed = False
        self.breakpoints: list[tuple[str, int]] = []  # (file, breakpoint id) set on this debuggee
        threading.Thread(target=self._read, daemon=True, name="pydevd-server-reader").start()

    def set_breakpoint(self, path: str, line: int, breakpoint_id: int) -> None:
        self.send(CMD_SET_BREAK, f"{breakpoint_id}\tpython-line\t{path}\t{line}\tNone\tNone\tNone\tNone\tFalse\tNONE")
        self.breakpoints.append((path, breakpoint_id))

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    raw, buffer = buffer.split(b"\n", 1)
                    cmd, seq, text = [*raw.decode("utf-8", "replace").split("\t", 2), "", ""][:3]
                    if cmd.isdigit():
                        self._queue.put(Message(int(cmd), int(seq) if seq.lstrip("-").isdigit() else 0, unquote(text)))
        except OSError:
            pass
        finally:
            self.closed = True
            self._queue.put(None)

    def send(self, cmd: int, text: str) -> int:
        with self._send_lock:
            self._seq += 2
            seq = self._seq
            self.sock.sendall(f"{cmd}\t{seq}\t{text}\n".encode())
        return seq

    def wait_for(self, cmd: int, timeout: float, seq: int | None = None) -> Message:
        """The next message with ``cmd`` (and ``seq``); others are dropped (output, thread events)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no pydevd message {cmd} within {timeout:g} s")
            try:
                msg = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if msg is None:
                self._queue.put(None)  # keep the end marker for later waits
                raise PydevdError("the debuggee closed the connection")
            if msg.cmd == CMD_ERROR and seq is not None and msg.seq == seq:
                raise PydevdError(f"pydevd error: {msg.text[:200]}")
            if msg.cmd == cmd and (seq is None or msg.seq == seq):
                return msg

    def request(self, cmd: int, text: str, timeout: float = 30.0) -> Message:
        return self.wait_for(cmd, timeout, seq=self.send(cmd, text))

    def close(self) -> None:
        # shutdown first: a blocked recv in the reader would otherwise keep the socket open.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class PydevdServer:
    """Listens for debuggees and runs ``plan`` on each one, in a thread per connection."""

    def __init__(
        self,
        plan: HeadlessPlan,
        *,
        emit: Emit | None = None,
        identify: Identify | None = None,
        host: str = LOOPBACK,
        port: int = 0,
    ) -> None:
        self.plan = plan
        self.emit: Emit = emit or ev.ignore
        self.identify = identify or (lambda _port: None)
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((host, port))  # the port is ours from here; connections are refused until start()
        self.port = int(self._server.getsockname()[1])
        self.reports: list[RankReport] = []
        self.versions: dict[int, str] = {}  # rank -> pydevd-pycharm version it reported
        self.group_stops: list[tuple[int, str]] = []  # (rank, why) of each suspension the rank group caused
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections: list[PydevdConnection] = []
        self._done: set[int] = set()  # ranks whose session had its stops (or ended)
        self._breakpoint_ids = itertools.count(1)
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True, name="pydevd-server")

    def start(self) -> int:
        self._server.listen(64)
        self._acceptor.start()
        return self.port

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                sock, peer = self._server.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = PydevdConnection(sock)
            with self._lock:
                self._connections.append(conn)
            t = threading.Thread(target=self._session, args=(conn, int(peer[1])), daemon=True, name="pydevd-session")
            t.start()
            self._threads.append(t)

    def _session(self, conn: PydevdConnection, peer_port: int) -> None:
        report = RankReport(-1, "?")
        try:
            self._debug(conn, report, peer_port)
        except (PydevdError, TimeoutError, OSError, ET.ParseError, ValueError) as exc:
            report.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        finally:
            conn.close()
            with self._lock:
                self.reports.append(report)
                self._done.add(report.rank)
            self.emit(ev.RankDetached(rank=report.rank, node=report.node, error=report.error or None))

    def _debug(self, conn: PydevdConnection, report: RankReport, peer_port: int) -> None:
        plan = self.plan
        version = conn.request(CMD_VERSION, VERSION_TEXT, timeout=plan.attach_timeout).text.strip()
        # Asked only now: a forwarder registers the connection before the rank can answer.
        who = self.identify(peer_port)
        if who is not None:
            report.rank, report.node = who
        with self._lock:
            self.versions[report.rank] = version
        with self._lock:  # the plan's breakpoints, and any added before this point (add_breakpoint)
            initial = [(path, line) for path, lines in plan.breakpoints.items() for line in lines]
            for path, line in initial:
                conn.set_breakpoint(path, line, next(self._breakpoint_ids))
        conn.send(CMD_RUN, "")
        self.emit(ev.RankAttached(rank=report.rank, node=report.node, pydevd=version))
        hits = 0
        while hits < plan.max_stops and not self._stop.is_set():
            try:
                suspend = parse_suspend(conn.wait_for(CMD_THREAD_SUSPEND, timeout=1.0).text)
            except TimeoutError:
                continue  # not stopped yet: check whether we should give up, then wait again
            except PydevdError:
                if conn.closed:
                    return  # the rank ran to its end without (further) stops
                raise
            if suspend.message.startswith(GROUP_MESSAGE):  # the group's: it resumes the rank itself
                with self._lock:
                    self.group_stops.append((report.rank, suspend.message[len(GROUP_MESSAGE) :]))
                continue
            hits += 1
            self._record(conn, report, suspend)
            for _ in range(plan.steps):
                conn.send(CMD_STEP_OVER, suspend.thread_id)
                suspend = parse_suspend(conn.wait_for(CMD_THREAD_SUSPEND, timeout=30.0).text)
                self._record(conn, report, suspend)
            if plan.pause_seconds > 0:
                self._stop.wait(plan.pause_seconds)
            if hits >= plan.max_stops:
                with self._lock:
                    for path, bid in conn.breakpoints:
                        conn.send(CMD_REMOVE_BREAK, f"python-line\t{path}\t{bid}")
                    conn.breakpoints.clear()
            conn.send(CMD_THREAD_RUN, suspend.thread_id)
        with self._lock:
            self._done.add(report.rank)
        # Stay connected until the rank ends: closing now would only detach the debugger.
        while not conn.closed and not self._stop.wait(0.2):
            pass

    def _record(self, conn: PydevdConnection, report: RankReport, suspend: Suspend) -> None:
        reply = conn.request(CMD_GET_FRAME, f"{suspend.thread_id}\t{suspend.frame_id}\tFRAME\t0")
        variables = parse_variables(reply.text)
        watch = self.plan.watch
        record = StopRecord(
            suspend.file,
            suspend.line,
            suspend.function,
            _STOP_REASONS.get(suspend.reason, "step"),
            {k: v for k, v in variables.items() if not watch or k in watch},
        )
        report.stops.append(record)
        self.emit(record.event(report.rank, report.node))

    def add_breakpoint(self, path: str, line: int) -> None:
        """A breakpoint set while debuggees are connected (as a user clicks in the gutter): sent to every
        session now, and to every later one."""
        with self._lock:
            self.plan.breakpoints.setdefault(path, []).append(line)
            for conn in self._connections:
                if not conn.closed:
                    conn.set_breakpoint(path, line, next(self._breakpoint_ids))

    def done_ranks(self) -> set[int]:
        """The ranks whose session had all its stops, or ended."""
        with self._lock:
            return set(self._done)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in list(self._threads):
            t.join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Stop listening and end every session (PyCharm's Stop): the port is free again at once."""
        self._stop.set()
        with contextlib.suppress(OSError):
            # wakes the accept() in the acceptor thread, which otherwise keeps the port bound after close
            self._server.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            conn.close()
        self.join(5.0)

    def __enter__(self) -> PydevdServer:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
