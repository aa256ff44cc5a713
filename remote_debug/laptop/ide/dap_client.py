"""A small synchronous, headless Debug Adapter Protocol client (stdlib only).

It drives debugpy the way an IDE would, so that tests, smoke checks ("does a breakpoint in rank 3
hit?") and the CLI can attach to a remote job without VS Code.  One TCP socket, one reader thread that
routes responses to the request that asked for them (by ``request_seq``) and queues events per event
name.

Things debugpy (1.8) makes us do, see docs/lab-facts "debugpy and DAP":

* The port is usually an SSH local forward.  A forward accepts the TCP connection even when nothing listens on
  the remote end, then closes it: a successful ``connect()`` proves nothing, only an ``initialize`` response
  does.  :meth:`DapClient.connect` therefore retries connect + ``initialize`` until a deadline.
* debugpy answers ``attach`` only after ``configurationDone``; waiting for it before configuring deadlocks.
  :meth:`DapClient.attach` returns a :class:`PendingResponse` instead.
* ``attach`` with empty arguments fails inside pydevd: we always send ``justMyCode``.
* ``setBreakpoints`` says ``verified: true`` even when the path mapping is wrong and the breakpoint can never
  hit: callers must wait for ``stopped`` (:meth:`DapClient.wait_stopped`), never trust ``verified``.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from remote_debug.contract import dap_wire
from remote_debug.contract.dap_wire import JsonDict

DEFAULT_TIMEOUT = 10.0
# Per-event-name queue bound: a chatty debuggee must not grow memory without limit when nobody waits on it.
_EVENT_QUEUE_MAX = 10_000
# Pause between connection attempts; short, since a forward's remote end usually appears within a second.
_RETRY_PAUSE = 0.1
# Cap on one initialize attempt: a peer that accepted but never answers should not eat the whole deadline.
_ATTEMPT_CAP = 5.0


class DapError(RuntimeError):
    """Any DAP failure: a request answered ``success: false``, a timeout, a lost connection."""


class DapRequestFailedError(DapError):
    """The peer answered a request with ``success: false``: an answer, not a transient failure."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


class PendingResponse:
    """The future of one request; :meth:`result` blocks for the response body."""

    def __init__(self, client: DapClient, seq: int, command: str) -> None:
        self.client = client
        self.seq = seq
        self.command = command
        self._done = threading.Event()
        self._response: JsonDict | None = None
        self._error: str | None = None

    def _resolve(self, response: JsonDict | None, error: str | None = None) -> None:
        self._response, self._error = response, error
        self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float = DEFAULT_TIMEOUT) -> JsonDict:
        """The response body; DapError on ``success: false``, a lost connection or timeout."""
        if not self._done.wait(max(timeout, 0.0)):
            raise DapError(f"no response to {self.command!r} within {timeout:.1f}s")
        if self._response is None:
            raise DapError(f"{self.command!r} failed: {self._error or 'connection lost'}")
        if not self._response.get("success", False):
            message = self._response.get("message") or ""
            error = (self._response.get("body") or {}).get("error") or {}
            detail = message or error.get("format") or "success: false"
            raise DapRequestFailedError(f"{self.command!r} failed: {_one_line(str(detail))}")
        body = self._response.get("body")
        return body if isinstance(body, dict) else {}


class DapClient:
    """Synchronous DAP client over one connected socket.

    Build it with :meth:`connect` or :func:`attach_and_configure`.
    """

    def __init__(self, sock: socket.socket, *, name: str = "") -> None:
        self.name = name or _peer_name(sock)
        self.capabilities: JsonDict = {}
        self.default_timeout = DEFAULT_TIMEOUT
        self._sock = sock
        # Setting NODELAY only here does not remove debugpy's own Nagle delay (its side decides that), but it
        # keeps our small request frames from waiting for an ACK of the previous one.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._seq = 0
        self._pending: dict[int, PendingResponse] = {}
        self._events: dict[str, collections.deque[JsonDict]] = collections.defaultdict(
            lambda: collections.deque(maxlen=_EVENT_QUEUE_MAX)
        )
        self._output: list[str] = []
        # told of each ``output`` event's body as it arrives (the reader's thread): a rank's prints and logpoint hits
        self.on_output: Callable[[JsonDict], None] | None = None
        self._closed = False
        self._close_reason = ""
        self._terminated = False
        # a `disconnect` of ours is on its way: `terminated` (its answer) must not send another one
        self._disconnecting = False
        self._reader = threading.Thread(target=self._read_loop, name=f"dap-reader-{self.name}", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ connection
    @classmethod
    def connect(cls, host: str, port: int, *, timeout: float, attempt_cap: float = _ATTEMPT_CAP) -> DapClient:
        """Connect and complete ``initialize``, retrying until ``timeout`` seconds have passed.

        Retries cover "connection refused" (debuggee not listening yet) and "accepted then closed" (an SSH
        forward whose remote end is not listening yet); an ``initialize`` answered with ``success: false``
        is final (DapRequestFailedError with the peer's message).
        """
        deadline = time.monotonic() + timeout
        last_error = "no attempt made"
        attempts = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            attempts += 1
            sock: socket.socket | None = None
            try:
                sock = socket.create_connection((host, port), timeout=min(remaining, attempt_cap))
                # Retrying connect() to a local port nobody listens on can, rarely, connect the socket
                # to itself (TCP simultaneous open), which would also squat the port the debuggee wants.
                if sock.getsockname() == sock.getpeername():
                    raise OSError("socket connected to itself")
            except OSError as exc:
                if sock is not None:
                    sock.close()
                last_error = _one_line(f"{type(exc).__name__}: {exc}")
                time.sleep(min(_RETRY_PAUSE, max(deadline - time.monotonic(), 0.0)))
                continue
            client = cls(sock, name=f"{host}:{port}")
            try:
                client.initialize(timeout=min(deadline - time.monotonic(), attempt_cap))
                return client
            except DapRequestFailedError:
                # An adapter (or our forward, when the rank already has a debugger) said no: asking
                # again until the deadline would only hide its message behind a timeout.
                client.close()
                raise
            except DapError as exc:
                last_error = str(exc)
                client.close()
                time.sleep(min(_RETRY_PAUSE, max(deadline - time.monotonic(), 0.0)))
            except BaseException:  # Ctrl-C mid-handshake: do not leak the socket and reader thread
                client.close()
                raise
        raise DapError(
            f"could not reach a debug adapter at {host}:{port} within {timeout:.1f}s "
            f"({attempts} attempts; last: {last_error})"
        )

    def initialize(self, *, timeout: float | None = None) -> JsonDict:
        arguments = {
            "clientID": "remote-debug",
            "clientName": "remote-debug",
            "adapterID": "debugpy",
            "pathFormat": "path",
            "linesStartAt1": True,
            "columnsStartAt1": True,
            "supportsVariableType": True,
            "supportsRunInTerminalRequest": False,
            "locale": "en-us",
        }
        self.capabilities = self.request("initialize", arguments, timeout)
        return self.capabilities

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    @property
    def terminated(self) -> bool:
        """True once the adapter said ``terminated``; the client then disconnects and closes itself."""
        with self._cond:
            return self._terminated

    def close(self) -> None:
        """Drop the socket (no ``disconnect`` request) and stop the reader thread.  Idempotent."""
        self._mark_closed("closed by client")  # first, so waiters see why rather than "connection lost"
        self._drop_socket()
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=5.0)

    def _drop_socket(self) -> None:
        # shutdown() before close(): close() alone does not wake a thread blocked in recv() on Linux.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> DapClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ wire
    def _read_loop(self) -> None:
        reader = self._sock.makefile("rb")
        reason = "connection closed by peer"
        try:
            while True:
                message = dap_wire.read_message(reader)
                if message is None:
                    break
                self._dispatch(message)
        except (OSError, ValueError) as exc:
            reason = _one_line(f"connection lost: {type(exc).__name__}: {exc}")
        finally:
            with contextlib.suppress(OSError):
                reader.close()
            self._mark_closed(reason)

    def _mark_closed(self, reason: str) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed, self._close_reason = True, reason
            pending, self._pending = list(self._pending.values()), {}
            self._cond.notify_all()
        for p in pending:
            p._resolve(None, reason)

    def _dispatch(self, message: JsonDict) -> None:
        kind = message.get("type")
        if kind == "response":
            with self._cond:
                pending = self._pending.pop(int(message.get("request_seq", -1)), None)
            if pending is not None:
                pending._resolve(message)
        elif kind == "event":
            name = str(message.get("event", ""))
            body = message.get("body") or {}
            with self._cond:
                if name == "output":
                    self._output.append(str(body.get("output", "")))
                self._terminated = self._terminated or name == "terminated"
                self._events[name].append(body)
                self._cond.notify_all()
            if name == "output" and self.on_output is not None:
                with contextlib.suppress(Exception):  # a listener's bug must not end the session
                    self.on_output(body)
            if name == "terminated":
                self._end_session()
        elif kind == "request":
            # Reverse requests (runInTerminal, startDebugging): we advertise no support, but answer anyway so
            # the adapter never waits on us.
            with contextlib.suppress(DapError):
                self._send(
                    {
                        "type": "response",
                        "request_seq": message.get("seq", 0),
                        "success": False,
                        "command": message.get("command", ""),
                        "message": "not supported by the remote-debug headless client",
                    }
                )

    def _end_session(self) -> None:
        """React to ``terminated`` as an IDE does: disconnect and close.

        debugpy's adapter daemonizes and stays alive while any client is connected, so without this the
        socket stays open after the debuggee exited, callers looping on ``closed`` never stop and the adapter
        lingers on the remote host.  Runs on the reader thread, so the disconnect is fire-and-forget: waiting
        for its response here would block the only thread that could read it.  Queued events stay readable.
        """
        if self._disconnecting:
            # `terminated` answers our own disconnect, whose response follows: disconnect() closes once
            # it has it.  debugpy's adapter dies (an unhandled NoMoreMessages in its disconnect handler)
            # when the client goes before that response, or sends a second disconnect; the rank then
            # takes no debugger again.
            return
        with contextlib.suppress(DapError):
            self._send({"type": "request", "command": "disconnect", "arguments": {"restart": False}})
        self._mark_closed("the debug session terminated")
        self._drop_socket()

    def _send(self, message: JsonDict, *, expect_response: bool = False) -> PendingResponse | None:
        """Frame and send one message; with ``expect_response`` register a PendingResponse for it.

        Registration happens before the bytes leave (send lock held across seq allocation, registration and
        sendall) so that a fast response can never arrive for a seq we do not know yet.
        """
        command = str(message.get("command", message.get("type", "")))
        with self._send_lock:
            with self._cond:
                if self._closed:
                    raise DapError(f"{self.name}: cannot send {command!r}: {self._close_reason}")
                self._seq += 1
                seq = self._seq
                pending = PendingResponse(self, seq, command) if expect_response else None
                if pending is not None:
                    self._pending[seq] = pending
            try:
                self._sock.sendall(dap_wire.encode(dict(message, seq=seq)))
            except OSError as exc:
                with self._cond:
                    self._pending.pop(seq, None)
                raise DapError(f"{self.name}: sending {command!r} failed: {_one_line(str(exc))}") from exc
        return pending

    # ------------------------------------------------------------------ requests and events
    def send_request(self, command: str, arguments: Mapping[str, Any] | None = None) -> PendingResponse:
        """Send without waiting; the returned handle yields the body."""
        message: JsonDict = {"type": "request", "command": command}
        if arguments is not None:
            message["arguments"] = dict(arguments)
        pending = self._send(message, expect_response=True)
        assert pending is not None
        return pending

    def request(
        self, command: str, arguments: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> JsonDict:
        """Send and wait for the response body; DapError on ``success: false`` or timeout."""
        pending = self.send_request(command, arguments)
        try:
            return pending.result(self.default_timeout if timeout is None else timeout)
        finally:
            with self._cond:
                self._pending.pop(pending.seq, None)

    def wait_event(
        self, name: str, timeout: float | None = None, predicate: Callable[[JsonDict], bool] | None = None
    ) -> JsonDict:
        """Take (consume) the oldest queued ``name`` event matching ``predicate`` and return its body.

        Events that arrived before the call count, so there is no race between sending ``next`` and waiting
        for its ``stopped``.  Non-matching events stay queued for other waiters.
        """
        timeout = self.default_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                queue = self._events[name]
                for body in queue:
                    if predicate is None or predicate(body):
                        queue.remove(body)
                        return body
                if self._closed:
                    raise DapError(f"{self.name}: no {name!r} event: {self._close_reason}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DapError(f"{self.name}: no {name!r} event within {timeout:.1f}s")
                self._cond.wait(remaining)

    def output(self) -> str:
        """All text of the ``output`` events seen so far (stdout/stderr of the debuggee, adapter messages)."""
        with self._cond:
            return "".join(self._output)

    # ------------------------------------------------------------------ session setup
    def attach(
        self,
        *,
        path_mappings: Sequence[tuple[str, str]] = (),
        just_my_code: bool = False,
        extra: Mapping[str, Any] | None = None,
    ) -> PendingResponse:
        """Send ``attach`` and return its handle without waiting.

        debugpy answers ``attach`` only after ``configurationDone``: waiting here would deadlock.
        """
        arguments: JsonDict = {"justMyCode": just_my_code}  # never empty: pydevd fails on empty arguments
        if path_mappings:
            arguments["pathMappings"] = [{"localRoot": lo, "remoteRoot": re} for lo, re in path_mappings]
        arguments.update(extra or {})
        return self.send_request("attach", arguments)

    def wait_initialized(self, timeout: float | None = None) -> JsonDict:
        return self.wait_event("initialized", timeout)

    def set_breakpoints(
        self,
        path: str,
        lines: Sequence[int],
        timeout: float | None = None,
        *,
        logpoints: Sequence[tuple[int, str]] = (),
    ) -> list[JsonDict]:
        """Replace the breakpoints of one (local) file, and its logpoints (line, message with ``{expr}``: printed
        at each hit, no stop); ``verified`` in the answer proves nothing."""
        breakpoints: list[JsonDict] = [{"line": n} for n in lines]
        breakpoints += [{"line": n, "logMessage": message} for n, message in logpoints]
        body = self.request("setBreakpoints", {"source": {"path": path}, "breakpoints": breakpoints}, timeout)
        return list(body.get("breakpoints", []))

    def set_exception_breakpoints(self, filters: Sequence[str], timeout: float | None = None) -> JsonDict:
        return self.request("setExceptionBreakpoints", {"filters": list(filters)}, timeout)

    def configuration_done(self, timeout: float | None = None) -> JsonDict:
        return self.request("configurationDone", {}, timeout)

    # ------------------------------------------------------------------ inspection
    def wait_stopped(self, timeout: float | None = None, thread_id: int | None = None) -> JsonDict:
        """The body of the next ``stopped`` event (optionally for one thread)."""
        predicate = None if thread_id is None else (lambda b: b.get("threadId") == thread_id)
        return self.wait_event("stopped", timeout, predicate)

    def threads(self, timeout: float | None = None) -> list[JsonDict]:
        return list(self.request("threads", {}, timeout).get("threads", []))

    def stack_trace(self, thread_id: int, *, levels: int = 0, timeout: float | None = None) -> list[JsonDict]:
        arguments: JsonDict = {"threadId": thread_id}
        if levels:
            arguments["levels"] = levels
        return list(self.request("stackTrace", arguments, timeout).get("stackFrames", []))

    def scopes(self, frame_id: int, timeout: float | None = None) -> list[JsonDict]:
        return list(self.request("scopes", {"frameId": frame_id}, timeout).get("scopes", []))

    def variables(self, reference: int, timeout: float | None = None) -> dict[str, str]:
        """name -> value string (``repr``-like, as debugpy renders it)."""
        body = self.request("variables", {"variablesReference": reference}, timeout)
        return {str(v["name"]): str(v.get("value", "")) for v in body.get("variables", [])}

    def frame_locals(self, frame_id: int, timeout: float | None = None) -> dict[str, str]:
        scopes = self.scopes(frame_id, timeout)
        chosen = next((s for s in scopes if s.get("name") == "Locals"), None)
        if chosen is None:  # other adapters name it differently; take the first cheap scope
            chosen = next((s for s in scopes if not s.get("expensive")), None)
        if chosen is None:
            return {}
        return self.variables(int(chosen["variablesReference"]), timeout)

    def evaluate(self, expression: str, frame_id: int, *, context: str = "repl", timeout: float | None = None) -> str:
        arguments = {"expression": expression, "frameId": frame_id, "context": context}
        body = self.request("evaluate", arguments, timeout)
        return str(body.get("result", ""))

    # ------------------------------------------------------------------ execution control
    def next(self, thread_id: int, timeout: float | None = None) -> JsonDict:
        """Step over.  Returns once debugpy accepted it; the new position comes with the next ``stopped``."""
        return self.request("next", {"threadId": thread_id}, timeout)

    def continue_(self, thread_id: int, *, single_thread: bool = False, timeout: float | None = None) -> JsonDict:
        """Resume; per DAP (and pydevd) this resumes every thread unless ``single_thread``."""
        arguments: JsonDict = {"threadId": thread_id}
        if single_thread:
            arguments["singleThread"] = True
        return self.request("continue", arguments, timeout)

    def continue_all(self, timeout: float | None = None) -> JsonDict:
        # DAP requires some threadId; without singleThread pydevd resumes all threads ("*") whichever we name.
        threads = self.threads(timeout)
        if not threads:
            raise DapError(f"{self.name}: no threads to continue")
        return self.continue_(int(threads[0]["id"]), timeout=timeout)

    def pause(self, thread_id: int, timeout: float | None = None) -> JsonDict:
        return self.request("pause", {"threadId": thread_id}, timeout)

    def disconnect(self, *, terminate_debuggee: bool = False, timeout: float | None = None) -> None:
        """End the session politely (debugpy drops our breakpoints and resumes the debuggee), then close.

        Tolerates a peer that already went away (the debuggee exited): there is nothing left to disconnect.
        """
        try:
            if not self.closed:
                arguments = {"terminateDebuggee": terminate_debuggee, "restart": False}
                self._disconnecting = True
                self.request("disconnect", arguments, timeout)
        except DapError:
            if not self.closed:
                raise
        finally:
            self.close()


def _peer_name(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "dap"


# ---------------------------------------------------------------------- the whole attach sequence
def attach_and_configure(
    host: str,
    port: int,
    *,
    path_mappings: Sequence[tuple[str, str]] = (),
    breakpoints: Mapping[str, Sequence[int]] | None = None,
    timeout: float = 30.0,
    just_my_code: bool = False,
    exception_filters: Sequence[str] = (),
    extra: Mapping[str, Any] | None = None,
    logpoints: Mapping[str, Sequence[tuple[int, str]]] | None = None,
    on_output: Callable[[JsonDict], None] | None = None,
) -> DapClient:
    """The whole attach sequence; returns a configured client, or raises DapError.

    connect → initialize → attach (not awaited) → ``initialized`` → setBreakpoints per file →
    setExceptionBreakpoints → configurationDone → attach response.  ``timeout`` bounds the whole sequence.
    Breakpoint paths are local paths (``path_mappings`` turns them into the debuggee's); ``logpoints``: file ->
    (line, message) that print without stopping (``on_output`` gets every ``output`` event from the first one on).
    The caller then waits for ``stopped``: ``verified`` proves nothing.
    """
    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(deadline - time.monotonic(), 0.0)

    client = DapClient.connect(host, port, timeout=timeout)
    client.on_output = on_output  # before the first logpoint can be hit
    try:
        attach = client.attach(path_mappings=path_mappings, just_my_code=just_my_code, extra=extra)
        while True:  # `initialized`, or the refusal of `attach` at once
            try:
                client.wait_initialized(min(left(), 0.25))
                break
            except DapError:
                # debugpy refuses a second client's attach ("Server[pid=N] is already being
                # debugged.") and never sends `initialized`: waiting would hang for the whole timeout
                if attach.done():
                    attach.result(0)
                if client.closed:
                    raise
                if left() <= 0:
                    raise DapError(f"{client.name}: no 'initialized' event within {timeout:.1f}s") from None
        logpoints = logpoints or {}
        for path in dict.fromkeys([*(breakpoints or {}), *logpoints]):  # one request per file: each replaces
            lines = (breakpoints or {}).get(path, [])
            client.set_breakpoints(path, list(lines), left(), logpoints=logpoints.get(path, ()))
        client.set_exception_breakpoints(list(exception_filters), left())
        client.configuration_done(left())
        attach.result(left())
    except BaseException:
        client.close()
        raise
    return client


@dataclass
class StopInfo:
    thread_id: int
    file: str
    line: int
    function: str
    variables: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    frame_id: int = 0


def inspect_stop(client: DapClient, timeout: float | None = None) -> StopInfo:
    """Wait for ``stopped``, then describe the top frame of the stopped thread with its locals."""
    return describe_stop(client, client.wait_stopped(timeout), timeout)


def describe_stop(client: DapClient, stopped: JsonDict, timeout: float | None = None) -> StopInfo:
    """The top frame of the thread a ``stopped`` event names, with its locals.

    Its own ``timeout`` for the requests: a caller that polls for the stop with a short one must not
    give the requests that short a time, or a slow link loses the stop (the event is taken, the rank
    stays paused, and no second ``stopped`` ever comes)."""
    thread_id = int(stopped.get("threadId", 0))
    if not thread_id:  # some stops name no thread; take the first one
        threads = client.threads(timeout)
        if not threads:
            raise DapError(f"{client.name}: stopped, but no threads")
        thread_id = int(threads[0]["id"])
    frames = client.stack_trace(thread_id, levels=1, timeout=timeout)
    if not frames:
        raise DapError(f"{client.name}: thread {thread_id} stopped without frames")
    top = frames[0]
    frame_id = int(top["id"])
    return StopInfo(
        thread_id=thread_id,
        file=str((top.get("source") or {}).get("path", "")),
        line=int(top.get("line", 0)),
        function=str(top.get("name", "")),
        variables=client.frame_locals(frame_id, timeout),
        reason=str(stopped.get("reason", "")),
        frame_id=frame_id,
    )
