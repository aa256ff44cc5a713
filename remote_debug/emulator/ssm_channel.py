"""The agent's side of the Session Manager data channel, so AWS's real ``session-manager-plugin`` runs offline.

The API server answers StartSession with :meth:`DataChannelServer.open_session`'s ``Session``; the
plugin then opens ``ws://127.0.0.1:<port>/v1/data-channel/<session-id>?role=publish_subscribe``, sends
the OpenDataChannel text frame with the token, and speaks ``ClientMessage`` frames
(:mod:`.ssm_messages`). We play what the SSM agent and the message gateway do together:

* handshake: HandshakeRequest (our agent version and the session type ``Port`` with the document's
  properties) -> the plugin's HandshakeResponse -> HandshakeComplete;
* reliability: every output_stream_data message has a sequence number and stays buffered until the
  plugin acknowledges it, and is re-sent after a retransmission timeout, because the plugin drops
  (without acknowledging) stream data that arrives before its session handler is ready, and to
  carry a session over a reconnect (ResumeSession + a new WebSocket with a fresh token);
* AWS-StartSSHSession: the plugin relays its stdin/stdout as raw bytes; we dial the target port when
  the handshake completes and end the session (channel_closed) when the target closes;
* SSM-SessionManagerRunShell (no DocumentName): session type ``Standard_Stream``; the relay, a shell on a
  pseudo-terminal inside the node, is :mod:`.ssm_shell`'s (this module only routes the plugin's Size
  messages to it);
* AWS-StartPortForwardingSession: the plugin multiplexes local connections with smux v1 over the
  stream; each smux stream is dialed on its own when its SYN arrives, like the agent's
  ``port_mux.go``. We announce agent version ``AGENT_VERSION`` (> 3.1.1511.0) so that the plugin
  picks smux (> 3.0.196.0) with smux keep-alive off: basic mode carries one connection at a time
  and never tells the local client when the target closed, smux carries concurrent connections
  (a debugger and its helpers) with per-connection close.

Everything runs on one asyncio loop in a background thread; the public methods are thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import itertools
import logging
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response

from remote_debug.emulator import access
from remote_debug.emulator import ssm_messages as m

log = logging.getLogger(__name__)

Connector = Callable[[int], socket.socket]

AGENT_VERSION = "3.3.1611.0"
MUX_MIN_CLIENT_VERSION = (1, 1, 70)  # the agent's own threshold for smux port forwarding
SSH_DOCUMENT = "AWS-StartSSHSession"
PORT_FORWARDING_DOCUMENT = "AWS-StartPortForwardingSession"
SHELL_DOCUMENT = "SSM-SessionManagerRunShell"  # StartSession without a DocumentName
# The plugin's name for shell sessions (upstream src/config/config.go ShellPluginName): its handshake
# then registers shellsession.go's handler (terminal in cbreak -echo, keystrokes and Size messages).
SHELL_SESSION_TYPE = "Standard_Stream"
PATH_PREFIX = "/v1/data-channel/"

MAX_PAYLOAD = 64 * 1024
WINDOW = 512  # unacknowledged output messages per session before reading the target pauses
IN_BUFFER_MESSAGES = 1024  # out-of-order input messages held (and acknowledged) per session
IN_BUFFER_BYTES = 8 * 1024 * 1024
OPEN_TIMEOUT = 10.0  # from the WebSocket upgrade to OpenDataChannel
HANDSHAKE_TIMEOUT = 15.0  # the agent's
DRAIN_TIMEOUT = 5.0  # how long a finished session waits for the plugin to acknowledge the last output
TICK = 0.05
MIN_RTO, MAX_RTO = 0.01, 1.0  # the plugin's clock granularity and maximum retransmission timeout
MAX_ATTEMPTS = 60  # re-sends (about a minute at MAX_RTO) before a message counts as delivered
RESEND_BURST = 8  # unacknowledged messages, oldest first, that the retransmission timer looks at

_PORT = re.compile(r"^(0|[1-9][0-9]{0,4})$")
_OWNER = re.compile(r"^[\w+=,.@-]{1,64}$", re.ASCII)
_DOCUMENTS: dict[str, tuple[str | None, bool]] = {  # name -> (default portNumber, local port forwarding)
    SSH_DOCUMENT: ("22", False),
    PORT_FORWARDING_DOCUMENT: (None, True),
}
_NONE, _REQUESTED, _COMPLETE = 0, 1, 2


@dataclass(frozen=True)
class Session:
    session_id: str
    target: str
    document: str
    port: int
    token_value: str
    stream_url: str


def _one(parameters: dict[str, list[str]], name: str, default: str | None, document: str) -> str:
    values = parameters.get(name)
    if values is None:
        if default is None:
            raise ValueError(f"Parameter {name} is required for document {document}.")
        return default
    if not isinstance(values, list) or len(values) != 1 or not isinstance(values[0], str):
        raise ValueError(f"Parameter {name} takes exactly one value.")
    return values[0]


def _port(value: str, name: str, lowest: int) -> int:
    if not _PORT.fullmatch(value) or not lowest <= int(value) <= 65535:
        raise ValueError(f"Parameter {name} must be a port number from {lowest} to 65535, not {value!r}.")
    return int(value)


def _properties(document: str, parameters: dict[str, list[str]]) -> tuple[int, dict[str, str], bool]:
    """The target port, the document's session properties (sent in the handshake), local forwarding."""
    if document not in _DOCUMENTS:
        raise ValueError(
            f"Document {document!r} is not supported here: use {SSH_DOCUMENT} or {PORT_FORWARDING_DOCUMENT}."
        )
    default_port, forwarding = _DOCUMENTS[document]
    allowed = {"portNumber", "localPortNumber"} if forwarding else {"portNumber"}
    unknown = sorted(set(parameters) - allowed)
    if unknown:
        raise ValueError(f"Parameters {', '.join(unknown)} are not defined by document {document}.")
    port = _port(_one(parameters, "portNumber", default_port, document), "portNumber", 1)
    properties = {"portNumber": str(port)}
    if forwarding:
        local = _port(_one(parameters, "localPortNumber", "0", document), "localPortNumber", 0)
        properties.update(type="LocalPortForwarding", localPortNumber=str(local))
    return port, properties, forwarding


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        return ()


class _Outgoing:
    __slots__ = ("attempts", "raw", "sent")

    def __init__(self, raw: bytes, sent: float) -> None:
        self.raw, self.sent, self.attempts = raw, sent, 0


RelayFactory = Callable[["_Channel"], "_Relay"]


class _Channel:
    """One session's data-channel state; it outlives WebSocket connections (resume). Loop thread only,
    except ``session``/``token_used``/``closed``, which change under the server's lock."""

    def __init__(
        self,
        server: DataChannelServer,
        session: Session,
        properties: dict[str, Any],
        forwarding: bool,
        connect: Connector,
        session_type: str = "Port",
        make_relay: RelayFactory | None = None,
    ) -> None:
        self.server, self.session, self.properties, self.forwarding = server, session, properties, forwarding
        self.connect = connect
        self.session_type, self.make_relay = session_type, make_relay
        self.token_used = False
        self.closed = False
        self.ws: ServerConnection | None = None
        self.queue: asyncio.Queue[bytes] | None = None  # frames for the current connection's writer task
        self.conn_tasks: list[asyncio.Task[None]] = []
        self.out_seq = 0
        self.resent = 0
        self.unacked: dict[int, _Outgoing] = {}  # insertion order is sequence order
        self.window = asyncio.Event()
        self.window.set()
        self.srtt, self.rttvar, self.rto = 0.1, 0.0, 0.2  # the plugin's starting values
        self.in_expected = 0
        self.in_buffer: dict[int, m.ClientMessage] = {}
        self.in_buffer_bytes = 0
        self.handshake = _NONE
        self.handshake_started = 0.0
        self.relay: _Relay | None = None
        self.timer: asyncio.TimerHandle | None = None  # disconnect timeout
        self.handshake_timer: asyncio.TimerHandle | None = None

    # --- connections --------------------------------------------------------------------------------

    def attach(self, ws: ServerConnection) -> None:
        if self.ws is not None:  # a resumed channel replaces a connection the client gave up on
            old = self.ws
            self.detach(old)
            self.server.spawn(old.close(CloseCode.GOING_AWAY, "replaced by a new connection"))
        self.cancel_timer()
        self.ws, self.queue = ws, asyncio.Queue()
        self.conn_tasks = [
            asyncio.get_running_loop().create_task(self._writer(ws, self.queue)),
            asyncio.get_running_loop().create_task(self._ticker(self.queue)),
        ]
        if self.handshake == _NONE:
            self.handshake, self.handshake_started = _REQUESTED, time.monotonic()
            self.handshake_timer = asyncio.get_running_loop().call_later(
                HANDSHAKE_TIMEOUT,
                self.fail,
                ("Handshake timed out. Please ensure that you have the latest version of the session manager plugin."),
            )
            self.send_stream(
                m.PayloadType.HANDSHAKE_REQUEST, m.handshake_request(AGENT_VERSION, self.session_type, self.properties)
            )
        else:
            now = time.monotonic()
            for pending in self.unacked.values():
                self.queue.put_nowait(pending.raw)
                pending.sent = now

    def detach(self, ws: ServerConnection) -> None:
        if self.ws is not ws:
            return
        for task in self.conn_tasks:
            task.cancel()
        self.ws, self.queue, self.conn_tasks = None, None, []
        if not self.closed:
            self.arm_timer()

    def arm_timer(self) -> None:
        """A session without a data channel is terminated after the server's disconnect timeout."""
        self.cancel_timer()
        self.timer = asyncio.get_running_loop().call_later(
            self.server.disconnect_timeout, lambda: self.server.spawn(self.end("", graceful=False))
        )

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def cancel_handshake_timer(self) -> None:
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
            self.handshake_timer = None

    async def _writer(self, ws: ServerConnection, queue: asyncio.Queue[bytes]) -> None:
        # The only place that waits on the WebSocket's send buffer: the reader never blocks on it, so
        # the plugin's acknowledgements keep flowing even while it is slow to read our output.
        with contextlib.suppress(ConnectionClosed):
            while True:
                raw = await queue.get()
                await ws.send(raw)
                queue.task_done()

    async def _ticker(self, queue: asyncio.Queue[bytes]) -> None:
        while True:
            await asyncio.sleep(TICK)
            if queue.qsize() > 64:  # the writer is behind; re-sending now would only pile up
                continue
            # Only the oldest few: the plugin handles messages in order, so a later one is usually
            # just queued behind them (re-sending it would only duplicate), and one it dropped
            # behind a gap is held in its buffer once the gap is filled.
            now, given_up = time.monotonic(), []
            for seq, pending in itertools.islice(self.unacked.items(), RESEND_BURST):
                if now - pending.sent >= min(self.rto * 2 ** min(pending.attempts, 7), MAX_RTO):
                    if pending.attempts >= MAX_ATTEMPTS:
                        given_up.append(seq)
                        continue
                    queue.put_nowait(pending.raw)
                    pending.sent, pending.attempts = now, pending.attempts + 1
                    self.resent += 1
            for seq in given_up:
                # The plugin silently ignores a message it already processed, so one whose
                # acknowledgement died with a dropped connection would otherwise be re-sent forever.
                self.on_ack(seq)

    # --- sending ------------------------------------------------------------------------------------

    def send_stream(self, payload_type: int, payload: bytes) -> None:
        seq = self.out_seq
        self.out_seq += 1
        raw = m.encode(
            m.ClientMessage(m.OUTPUT_STREAM_DATA, seq, payload_type, payload, flags=m.FLAG_SYN if seq == 0 else 0)
        )
        self.unacked[seq] = _Outgoing(raw, time.monotonic())
        if len(self.unacked) >= WINDOW:
            self.window.clear()
        if self.queue is not None:
            self.queue.put_nowait(raw)

    def send_control(self, message: m.ClientMessage) -> None:
        if self.queue is not None:
            self.queue.put_nowait(m.encode(message))

    async def wait_window(self) -> None:
        while len(self.unacked) >= WINDOW and not self.closed:
            self.window.clear()
            await self.window.wait()

    def on_ack(self, seq: int) -> None:
        pending = self.unacked.pop(seq, None)
        if pending is None:
            return
        if pending.attempts == 0:  # Karn: a re-sent message's round trip is ambiguous
            rtt = time.monotonic() - pending.sent
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
            self.rto = min(MAX_RTO, self.srtt + max(MIN_RTO, 4 * self.rttvar))
        if len(self.unacked) < WINDOW:
            self.window.set()

    # --- receiving ----------------------------------------------------------------------------------

    def receive(self, raw: bytes) -> None:
        try:
            message = m.decode(raw, MAX_PAYLOAD)
            if message.message_type == m.ACKNOWLEDGE:  # also while ending: end() waits for the last ones
                self.on_ack(m.parse_acknowledge(message.payload))
            elif message.message_type == m.INPUT_STREAM_DATA and not self.closed:
                self._on_input(message)
        except m.ClientMessageError as exc:  # the agent logs and drops what it cannot parse
            log.warning("session %s: dropped a message: %s", self.session.session_id, exc)

    def _on_input(self, message: m.ClientMessage) -> None:
        seq = message.sequence_number
        if seq < self.in_expected:  # a re-send whose acknowledgement was late: acknowledge again
            if self.queue is not None and self.queue.qsize() < 1024:
                self.send_control(m.acknowledge(message))
            return
        if seq > self.in_expected:
            # Out of order only after the plugin re-sends around a gap; holding these means one
            # re-send of the gap recovers the run (the plugin re-sends one message per 100 ms).
            size = len(message.payload)
            if (
                seq not in self.in_buffer
                and len(self.in_buffer) < IN_BUFFER_MESSAGES
                and self.in_buffer_bytes + size <= IN_BUFFER_BYTES
                and seq - self.in_expected < 10_000
            ):
                self.in_buffer[seq] = message
                self.in_buffer_bytes += size
                self.send_control(m.acknowledge(message))
            return
        self.send_control(m.acknowledge(message))
        self.in_expected += 1
        self._process(message)
        while self.in_expected in self.in_buffer and not self.closed:
            buffered = self.in_buffer.pop(self.in_expected)
            self.in_buffer_bytes -= len(buffered.payload)
            self.in_expected += 1
            self._process(buffered)

    def _process(self, message: m.ClientMessage) -> None:
        if message.payload_type == m.PayloadType.HANDSHAKE_RESPONSE:
            self._on_handshake_response(message.payload)
        elif self.handshake != _COMPLETE or self.relay is None:
            return  # the agent drops stream data that comes before the handshake completes
        elif message.payload_type == m.PayloadType.OUTPUT:
            self.relay.feed(message.payload)
        elif (
            message.payload_type == m.PayloadType.FLAG
            and m.parse_flag(message.payload) == m.PayloadTypeFlag.TERMINATE_SESSION
        ):
            self.server.spawn(self.end("", graceful=False))
        elif message.payload_type == m.PayloadType.SIZE:  # shell sessions: the plugin's terminal size
            self.relay.resize(message.payload)
        # DisconnectToPort is basic port forwarding's; with smux a closed local connection is a FIN.

    def _on_handshake_response(self, payload: bytes) -> None:
        if self.handshake != _REQUESTED:
            return
        response = m.parse_handshake_response(payload)
        if response.errors:
            self.fail("Handshake failed: " + "; ".join(response.errors))
            return
        if self.forwarding and _version(response.client_version) < MUX_MIN_CLIENT_VERSION:
            self.fail(
                f"session-manager-plugin {response.client_version or '(unknown version)'} is too old for port "
                "forwarding here: install 1.1.70 or later."
            )
            return
        self.cancel_handshake_timer()
        self.handshake = _COMPLETE
        elapsed = time.monotonic() - self.handshake_started
        self.send_stream(m.PayloadType.HANDSHAKE_COMPLETE, m.handshake_complete(elapsed))
        port = self.session.port
        if self.make_relay is not None:
            self.relay = self.make_relay(self)
        else:
            self.relay = MuxRelay(self, port) if self.forwarding else StdioRelay(self, port)
        log.info("session %s: handshake complete (plugin %s)", self.session.session_id, response.client_version)

    # --- ending -------------------------------------------------------------------------------------

    def fail(self, reason: str) -> None:
        log.info("session %s: %s", self.session.session_id, reason)
        self.server.spawn(self.end(reason, graceful=False))

    async def end(self, output: str, graceful: bool) -> None:
        """channel_closed (the plugin prints ``output`` and exits), then drop the connections."""
        if not self.server.mark_closed(self):
            return
        log.info(
            "session %s ended%s (%d messages sent, %d re-sent)",
            self.session.session_id,
            f": {output}" if output else "",
            self.out_seq,
            self.resent,
        )
        self.cancel_timer()
        self.cancel_handshake_timer()
        if graceful:  # the target closed: let the plugin acknowledge (= write out) the last output first
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while self.unacked and self.ws is not None and time.monotonic() < deadline:
                await asyncio.sleep(TICK / 5)
        if self.relay is not None:
            await self.relay.close()
        ws, queue = self.ws, self.queue
        if ws is not None and queue is not None:
            queue.put_nowait(m.encode(m.channel_closed(self.session.session_id, self.session.target, output)))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(queue.join(), 2.0)
            await ws.close(CloseCode.NORMAL_CLOSURE, "session ended")
            self.detach(ws)
        self.window.set()


# --- the target side: TCP connections through the API server's connector ------------------------------

READ_CHUNK = 16 * 1024  # bytes read from the target per output message (the agent uses 1 KiB)
RELAY_HIGH_WATER = 4 * 1024 * 1024  # unsent bytes to the target before we stop reading the WebSocket
MAX_STREAMS = 256  # concurrent smux streams per port-forwarding session


class _Pipe:
    """One TCP connection to the target port, dialed in a worker thread through the connector."""

    def __init__(self, owner: _Relay, sid: int = 0) -> None:
        self.owner, self.sid = owner, sid
        self._lock = threading.Lock()  # shared with the worker thread that dials
        self.closed = False  # the session ended: drop everything
        self.finished = False  # the client closed this connection (smux FIN): flush what it sent, then close
        self.sock: socket.socket | None = None  # dialed, not yet handed to asyncio
        self.writer: asyncio.StreamWriter | None = None
        self.pending = bytearray()  # client bytes that arrived while dialing
        self.connected = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    def _dial(self) -> socket.socket:
        sock = self.owner.channel.connect(self.owner.port)
        with self._lock:
            if self.closed:  # the session ended while we dialed: nobody will close it later
                sock.close()
                raise OSError("session ended")
            self.sock = sock
        return sock

    async def _run(self) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            try:
                sock = await asyncio.get_running_loop().run_in_executor(None, self._dial)
            except Exception as exc:  # the connector is meant to raise OSError; any failure is the same here
                if not self.closed:
                    self.owner.pipe_failed(self, exc)
                return
            reader, writer = await asyncio.open_connection(sock=sock, limit=2 * READ_CHUNK)
            writer.transport.set_write_buffer_limits(high=RELAY_HIGH_WATER)
            with self._lock:
                self.writer, self.sock = writer, None
                if self.closed:
                    writer.transport.abort()
                    return
            if self.pending:
                writer.write(bytes(self.pending))
                self.pending.clear()
            self.connected.set()
            if self.finished:
                writer.close()
            while True:
                try:
                    data = await reader.read(READ_CHUNK)
                except OSError:
                    data = b""
                if not data:
                    break
                if self.finished:
                    continue  # the client's end is gone; the agent discards these too
                await self.owner.channel.wait_window()
                if self.closed:
                    return
                self.owner.pipe_data(self, data)
            if not (self.finished or self.closed):
                self.owner.pipe_eof(self)
        finally:
            self.connected.set()
            if writer is not None:
                writer.close()  # after flushing what the client sent; abort() cuts it short at session end
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            self.owner.pipes.discard(self)

    def feed(self, data: bytes) -> None:
        if self.finished or self.closed:
            return
        if self.writer is not None:
            self.writer.write(data)
        else:
            self.pending += data

    def buffered(self) -> int:
        return self.writer.transport.get_write_buffer_size() if self.writer is not None else len(self.pending)

    async def backpressure(self) -> None:
        if self.buffered() <= RELAY_HIGH_WATER:
            return
        if self.writer is None:
            await self.connected.wait()
        elif not self.writer.transport.is_closing():
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()

    def finish(self) -> None:
        self.finished = True
        if self.writer is not None:
            self.writer.close()

    def abort(self) -> None:
        with self._lock:
            self.closed = True
            sock, writer = self.sock, self.writer
        if writer is not None:
            writer.transport.abort()
        elif sock is not None:
            sock.close()


class _Relay:
    """Between the session's stream bytes and its TCP connection(s) to the target."""

    def __init__(self, channel: _Channel, port: int) -> None:
        self.channel, self.port = channel, port
        self.pipes: set[_Pipe] = set()

    def feed(self, data: bytes) -> None:
        raise NotImplementedError

    def pipe_data(self, pipe: _Pipe, data: bytes) -> None:
        raise NotImplementedError

    def pipe_eof(self, pipe: _Pipe) -> None:
        raise NotImplementedError

    def pipe_failed(self, pipe: _Pipe, exc: Exception) -> None:
        raise NotImplementedError

    def resize(self, payload: bytes) -> None:
        """A Size message (``{"cols": C, "rows": R}``): only a terminal has a size."""

    def _pipe(self, sid: int = 0) -> _Pipe:
        pipe = _Pipe(self, sid)
        self.pipes.add(pipe)
        return pipe

    async def backpressure(self) -> None:
        for pipe in list(self.pipes):
            await pipe.backpressure()

    async def close(self) -> None:
        pipes = list(self.pipes)
        for pipe in pipes:
            pipe.abort()
        current = asyncio.current_task()
        await asyncio.gather(*(p.task for p in pipes if p.task is not current), return_exceptions=True)


def _reason(port: int, exc: Exception) -> str:
    return f"Unable to connect to specified port {port}: {getattr(exc, 'strerror', None) or exc}"


class StdioRelay(_Relay):
    """AWS-StartSSHSession: one connection, dialed as the handshake completes; its end ends the session."""

    def __init__(self, channel: _Channel, port: int) -> None:
        super().__init__(channel, port)
        self.pipe = self._pipe()

    def feed(self, data: bytes) -> None:
        self.pipe.feed(data)

    def pipe_data(self, pipe: _Pipe, data: bytes) -> None:
        self.channel.send_stream(m.PayloadType.OUTPUT, data)

    def pipe_eof(self, pipe: _Pipe) -> None:
        self.channel.server.spawn(self.channel.end("", graceful=True))

    def pipe_failed(self, pipe: _Pipe, exc: Exception) -> None:
        # The agent fails the session with this text; the plugin prints it ("SessionId: ... : <reason>").
        self.channel.fail(_reason(self.port, exc))


class MuxRelay(_Relay):
    """AWS-StartPortForwardingSession: smux v1 streams, each its own connection to the target."""

    def __init__(self, channel: _Channel, port: int) -> None:
        super().__init__(channel, port)
        self.parser = m.SmuxParser()
        self.streams: dict[int, _Pipe] = {}

    def feed(self, data: bytes) -> None:
        try:
            frames = list(self.parser.feed(data))
        except m.ClientMessageError as exc:
            self.channel.fail(f"Port forwarding stream is corrupt: {exc}")
            return
        for frame in frames:
            if frame.cmd == m.SMUX_SYN:
                if frame.stream_id in self.streams:
                    continue
                if len(self.streams) >= MAX_STREAMS:
                    self._send_fin(frame.stream_id)
                    continue
                self.streams[frame.stream_id] = self._pipe(frame.stream_id)
            elif frame.cmd == m.SMUX_PSH:
                pipe = self.streams.get(frame.stream_id)
                if pipe is not None:
                    pipe.feed(frame.data)
            elif frame.cmd == m.SMUX_FIN:
                pipe = self.streams.pop(frame.stream_id, None)
                if pipe is not None:
                    pipe.finish()

    def _send_fin(self, sid: int) -> None:
        self.channel.send_stream(m.PayloadType.OUTPUT, m.encode_smux(m.SMUX_FIN, sid))

    def pipe_data(self, pipe: _Pipe, data: bytes) -> None:
        self.channel.send_stream(m.PayloadType.OUTPUT, m.encode_smux(m.SMUX_PSH, pipe.sid, data))

    def pipe_eof(self, pipe: _Pipe) -> None:
        if self.streams.get(pipe.sid) is pipe:
            del self.streams[pipe.sid]
            self._send_fin(pipe.sid)

    def pipe_failed(self, pipe: _Pipe, exc: Exception) -> None:
        # As port_mux.go: the plugin prints "Connection to destination port failed", the local
        # connection is closed, and the session stays up for the next one.
        log.info("session %s: %s", self.channel.session.session_id, _reason(self.port, exc))
        self.channel.send_stream(m.PayloadType.FLAG, m.flag_payload(m.PayloadTypeFlag.CONNECT_TO_PORT_ERROR))
        self.pipe_eof(pipe)


class DataChannelServer:
    """The data-channel WebSocket server on loopback: sessions opened by the API server, served to the plugin."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        disconnect_timeout: float = 30.0,
        uids: frozenset[int] | None = None,
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"the data channel listens on loopback only, not {host}")
        self.host, self.port = host, port
        # who may open a WebSocket at all (the plugin runs as the emulator's user); the token does the rest
        self.uids = access.admitted_uids() if uids is None else uids
        # A session without a data channel (never opened, or dropped) is terminated after this. The
        # plugin cannot say "I am done" (it just exits when ssh closes its stdin), and after a drop it
        # calls ResumeSession at once and gives up after ~5 s of retries, so half a minute is plenty.
        self.disconnect_timeout = disconnect_timeout
        self._lock = threading.Lock()
        self._channels: dict[str, _Channel] = {}
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None or self._closed:
            raise RuntimeError("DataChannelServer.start() called twice or after close()")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(ready, failure), name="ssm-data-channel", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            raise failure[0]

    def _run(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        try:
            self._server = loop.run_until_complete(self._listen())
            self.port = self._server.sockets[0].getsockname()[1]
            self._loop = loop
        except BaseException as exc:  # handed to start()'s caller
            failure.append(exc)
            loop.close()
            ready.set()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())  # connector calls still running
            loop.close()

    async def _listen(self) -> Server:
        # No server pings: a plugin whose stdout is not being read cannot answer them, and the AWS
        # service does not drop such sessions either (the plugin pings every 5 minutes itself).
        server: Server = await serve(
            self._handle,
            self.host,
            self.port,
            process_request=self._check_path,
            compression=None,
            max_size=MAX_PAYLOAD + m.PAYLOAD_OFFSET,
            ping_interval=None,
            close_timeout=2,
            open_timeout=OPEN_TIMEOUT,
        )
        return server

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=60)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=60)
        with self._lock:
            self._channels.clear()

    async def _shutdown(self) -> None:
        with self._lock:
            channels = list(self._channels.values())
        await asyncio.gather(*(ch.end("Session Manager emulator stopped.", graceful=False) for ch in channels))
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("data channel task failed", exc_info=task.exception())

    def mark_closed(self, channel: _Channel) -> bool:
        """Marks the session terminated (False if it already was)."""
        with self._lock:
            if channel.closed:
                return False
            channel.closed = True
            self._channels.pop(channel.session.session_id, None)
            return True

    # --- the API server's side ----------------------------------------------------------------------

    def open_session(
        self, *, target: str, document: str, parameters: dict[str, list[str]], connect: Connector, owner: str
    ) -> Session:
        loop = self._loop
        if loop is None or self._closed:
            raise RuntimeError("the data channel server is not running")
        if not _OWNER.fullmatch(owner):
            raise ValueError(f"owner {owner!r} is not a valid user or role session name")
        port, properties, forwarding = _properties(document, parameters)
        return self._open(
            target, document, port, owner, lambda session: _Channel(self, session, properties, forwarding, connect)
        )

    def open_shell_session(
        self, *, target: str, properties: dict[str, Any], make_relay: RelayFactory, owner: str
    ) -> Session:
        """A ``Standard_Stream`` session whose relay ``make_relay`` builds once the handshake completes."""
        if self._loop is None or self._closed:
            raise RuntimeError("the data channel server is not running")
        if not _OWNER.fullmatch(owner):
            raise ValueError(f"owner {owner!r} is not a valid user or role session name")

        def no_port(port: int) -> socket.socket:
            raise OSError(f"a shell session dials no port ({port})")

        return self._open(
            target,
            SHELL_DOCUMENT,
            0,
            owner,
            lambda session: _Channel(self, session, properties, False, no_port, SHELL_SESSION_TYPE, make_relay),
        )

    def _open(
        self, target: str, document: str, port: int, owner: str, make_channel: Callable[[Session], _Channel]
    ) -> Session:
        loop = self._loop
        assert loop is not None
        session_id = f"{owner}-{secrets.token_hex(9)[:17]}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        session = Session(
            session_id,
            target,
            document,
            port,
            secrets.token_urlsafe(32),
            f"ws://{host}:{self.port}{PATH_PREFIX}{session_id}?role=publish_subscribe",
        )
        channel = make_channel(session)
        with self._lock:
            self._channels[session_id] = channel
        loop.call_soon_threadsafe(channel.arm_timer)  # never opened -> terminated like a dropped one
        log.info("session %s: %s to %s port %d", session_id, document, target, port)
        return session

    def resume(self, session_id: str) -> Session:
        with self._lock:
            channel = self._channels[session_id]
            channel.session = replace(channel.session, token_value=secrets.token_urlsafe(32))
            channel.token_used = False
            return channel.session

    def terminate(self, session_id: str) -> bool:
        loop = self._loop
        with self._lock:
            channel = self._channels.get(session_id)
        if channel is None or loop is None:
            return False
        if threading.current_thread() is self._thread:
            raise RuntimeError("DataChannelServer.terminate() blocks: call it from another thread")
        asyncio.run_coroutine_threadsafe(channel.end("", graceful=False), loop).result(timeout=30)
        return True

    def sessions(self) -> list[Session]:
        with self._lock:
            return [channel.session for channel in self._channels.values()]

    # --- the plugin's side --------------------------------------------------------------------------

    def _channel_for(self, path: str) -> _Channel | None:
        session_id = path.split("?", 1)[0].removeprefix(PATH_PREFIX) if path.startswith(PATH_PREFIX) else ""
        with self._lock:
            return self._channels.get(session_id) if session_id else None

    def _check_path(self, connection: ServerConnection, request: Request) -> Response | None:
        sock = connection.transport.get_extra_info("socket")
        if sock is None or not access.admits(sock, self.uids):
            return connection.respond(HTTPStatus.FORBIDDEN, "connection refused: not the emulator's user\n")
        if self._channel_for(request.path) is None:
            return connection.respond(HTTPStatus.NOT_FOUND, "no such data channel\n")
        return None

    def _claim(self, channel: _Channel, token: str) -> bool:
        """A token opens the data channel once; ResumeSession issues the next one."""
        with self._lock:
            valid = hmac.compare_digest(token.encode(), channel.session.token_value.encode())
            if channel.closed or channel.token_used or not valid:
                return False
            channel.token_used = True
            return True

    async def _handle(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        channel = self._channel_for(ws.request.path)
        if channel is None:
            return
        try:
            opened = m.parse_open_data_channel(await asyncio.wait_for(ws.recv(), OPEN_TIMEOUT))
        except (asyncio.TimeoutError, ConnectionClosed, m.ClientMessageError) as exc:
            log.info(
                "data channel %s: no OpenDataChannel (%s)", channel.session.session_id, str(exc) or type(exc).__name__
            )
            return
        if not self._claim(channel, opened.token_value):
            log.warning("data channel %s: refused a wrong or used token", channel.session.session_id)
            await ws.close(CloseCode.POLICY_VIOLATION, "invalid token")
            return
        channel.attach(ws)
        try:
            async for raw in ws:
                if isinstance(raw, bytes):
                    channel.receive(raw)
                    if channel.relay is not None:
                        await channel.relay.backpressure()
        except ConnectionClosed:
            pass
        finally:
            channel.detach(ws)
