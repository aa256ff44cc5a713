"""A forward that reads the DAP it carries: one IDE connection to one rank, with a third party in it.

Every debugger connection of a VS Code or headless attach already passes through this process (the
local forward of :mod:`tunnels`).  A :class:`DapTap` pumps its bytes as the plain forward does, but
split into DAP messages, so that the attach can *see* what happens in each rank's session (a rank
stopped, was continued) and *act* in it (pause it, continue it, step it, end it) without a debug
adapter of its own: that is what all-stop and the group actions of :mod:`laptop.attach.rank_group`
are built on.

What the third party may do, and why the IDE stays consistent:

* it sends its own requests to the rank, with sequence numbers far above any IDE's
  (``INJECTED_SEQ``); the rank's responses to them are taken out of the stream (the IDE never sees an
  answer to a question it did not ask), and handed to whoever asked;
* the rank's events (``stopped``, ``continued``) still reach the IDE, which is how it learns that a
  rank it did not touch was paused or resumed: pydevd sends them for every suspension and resume;
* it may rewrite a message on its way (a ``stopped`` event's ``description``: "paused by all-stop"; a logpoint's
  message and its hits, :mod:`logpoint_tags`), or add events of its own (``output``, ``terminated``).

Messages pass through unchanged (the same bytes) unless a hook replaced them.  A peer that does not
speak DAP (over ``MAX_BODY``, or mangled framing) ends the connection, as the rank would.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any, Protocol

import paramiko

from remote_debug.contract import dap_wire
from remote_debug.laptop.connection.pump import pump

JsonDict = dict[str, Any]
log = logging.getLogger(__name__)

# the key a ``stopped`` event carries when the attach's rank group paused the rank (all-stop, Pause All), not
# its own breakpoint or step: a client that plays the IDE (the headless one) tells them apart by it
GROUP_MARK = "remoteDebugGroup"
INJECTED_SEQ = 1_000_000_000  # our requests' seq numbers start here: no IDE counts that far in a session
MAX_BODY = 64 << 20  # a variables reply of a huge object stays well under this
_HEADER_END = b"\r\n\r\n"

ResponseCallback = Callable[[JsonDict], None]


class TapHooks(Protocol):
    """What a rank's forward tells (and asks) the attach about each debugger session it carries."""

    def opened(self, session: DapTap) -> None:
        """A debugger connected through the forward (before any of its messages passed)."""

    def from_ide(self, session: DapTap, message: JsonDict) -> JsonDict | None:
        """A message of the IDE's, about to go to the rank: the message to send instead (a logpoint's message
        marked), or None to send it unchanged.  It always goes: the IDE waits for the answer to each request."""

    def from_rank(self, session: DapTap, message: JsonDict) -> JsonDict | None:
        """A message of the rank's, about to go to the IDE: the message to send (maybe changed), or
        None to keep it from the IDE."""

    def closed(self, session: DapTap) -> None:
        """The session is over (either side closed)."""


class FrameSplitter:
    """``Content-Length`` framed messages out of a byte stream that arrives in arbitrary pieces."""

    def __init__(self, max_body: int = MAX_BODY) -> None:
        self._buffer = bytearray()
        self._max_body = max_body

    def feed(self, data: bytes) -> list[tuple[bytes, JsonDict]]:
        """The complete messages the data finished: (their exact bytes, parsed); ValueError when mangled."""
        self._buffer += data
        out: list[tuple[bytes, JsonDict]] = []
        while True:
            end = self._buffer.find(_HEADER_END)
            if end < 0:
                if len(self._buffer) > 4096:
                    raise ValueError("DAP header over 4 KiB")
                return out
            length = _content_length(bytes(self._buffer[:end]))
            if length > self._max_body:
                raise ValueError(f"DAP message of {length} bytes is over {self._max_body}")
            start = end + len(_HEADER_END)
            if len(self._buffer) < start + length:
                return out
            raw = bytes(self._buffer[: start + length])
            message = json.loads(raw[start:])
            if not isinstance(message, dict):
                raise ValueError("DAP message is not a JSON object")
            del self._buffer[: start + length]
            out.append((raw, message))


def _content_length(header: bytes) -> int:
    for line in header.split(b"\r\n"):
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            return int(value.strip())
    raise ValueError("DAP message without Content-Length")


class DapTap:
    """One debugger session through a rank's forward (see the module docstring)."""

    def __init__(self, ide: socket.socket, rank: paramiko.Channel, hooks: TapHooks) -> None:
        self._ide, self._rank, self._hooks = ide, rank, hooks
        # the pump writes from its thread, injections from the attach's: one writer at a time per side
        self._to_ide = threading.Lock()
        self._to_rank = threading.Lock()
        self._seq = itertools.count(INJECTED_SEQ)
        self._waiting: dict[int, ResponseCallback | None] = {}  # our request seq -> who wants the answer
        self._closed = threading.Event()

    # --- what the attach may do in the session ---------------------------------------------------

    def request(
        self, command: str, arguments: JsonDict | None = None, on_response: ResponseCallback | None = None
    ) -> int:
        """Send the rank a request of ours; its response goes to ``on_response``, never to the IDE."""
        seq = next(self._seq)
        self._waiting[seq] = on_response
        message: JsonDict = {"seq": seq, "type": "request", "command": command}
        if arguments is not None:
            message["arguments"] = arguments
        self._send(self._rank, self._to_rank, message)
        return seq

    def tell_ide(self, event: str, body: JsonDict | None = None) -> None:
        """An event of ours to the IDE (e.g. ``output`` into the rank's Debug Console)."""
        self._send(self._ide, self._to_ide, {"seq": 0, "type": "event", "event": event, "body": body or {}})

    def _send(self, target: Any, lock: threading.Lock, message: JsonDict) -> None:
        if self._closed.is_set():
            return
        try:
            with lock:
                target.sendall(dap_wire.encode(message))
        except (OSError, EOFError, paramiko.SSHException) as exc:
            log.debug("tap send failed: %s", exc)

    # --- the pump ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Carry the session until either side closes (the forward's thread)."""
        from_ide, from_rank = FrameSplitter(), FrameSplitter()

        def ide_said(data: bytes) -> None:
            for raw, message in from_ide.feed(data):
                self._pass_to_rank(raw, message)

        def rank_said(data: bytes) -> None:
            for raw, message in from_rank.feed(data):
                self._pass_to_ide(raw, message)

        self._hooks.opened(self)
        try:
            pump(self._ide, self._rank, ide_said, rank_said)
        finally:
            self._closed.set()
            with contextlib.suppress(Exception):  # a hook's bug must not keep the forward's socket open
                self._hooks.closed(self)

    def _pass_to_rank(self, raw: bytes, message: JsonDict) -> None:
        try:
            changed = self._hooks.from_ide(self, message)
        except Exception as exc:  # a hook's bug: the rank still gets what the IDE said
            log.debug("tap hook failed: %s", exc)
            changed = None
        with self._to_rank:
            self._rank.sendall(raw if changed is None or changed is message else dap_wire.encode(changed))

    def _pass_to_ide(self, raw: bytes, message: JsonDict) -> None:
        if message.get("type") == "response":
            seq = message.get("request_seq")
            if isinstance(seq, int) and seq >= INJECTED_SEQ:
                callback = self._waiting.pop(seq, None)
                if callback is not None:
                    with contextlib.suppress(Exception):  # never let our bookkeeping end the IDE's session
                        callback(message)
                return
        try:
            changed = self._hooks.from_rank(self, message)
        except Exception as exc:  # a hook's bug: the IDE still gets what the rank said
            log.debug("tap hook failed: %s", exc)
            changed = message
        if changed is None:
            return
        with self._to_ide:
            self._ide.sendall(raw if changed is message else dap_wire.encode(changed))
