"""A reverse forward that reads pydevd's line protocol: one PyCharm connection to one rank, with a third party in it.

PyCharm's ranks connect out to PyCharm through this process (:mod:`reverse`).  A :class:`PydevdTap` pumps
those bytes as the plain pump does, but split into pydevd's messages - one per line,
``"<cmd id>\\t<seq>\\t<url-quoted text>\\n"`` - so that the attach's rank group
(:mod:`laptop.attach.rank_group`) sees each rank suspend and run and can act in it, as :mod:`dap_tap` does
for DAP.  The command ids below are pydevd-pycharm's (``_pydevd_bundle/pydevd_comm_constants.py``).

What the third party may do, and why PyCharm stays consistent:

* it sends the rank commands of its own (suspend or resume every thread, step, list threads).  The IDE
  numbers its commands with odd seqs from 1, pydevd its own messages with even ones and answers a command
  with the command's seq: ours are odd from ``INJECTED_SEQ``, where PyCharm never counts, and the rank's
  answers to them are taken out of the stream (PyCharm never sees an answer to a question it did not ask);
* the rank's own notifications (a thread suspended, a thread runs again) still reach PyCharm, which is how
  it learns that a rank it did not touch was paused or resumed;
* it may rewrite a suspension on its way (a ``message`` attribute on the thread) and add console lines
  (CMD_WRITE_TO_CONSOLE, with even seqs from ``INJECTED_SEQ``: pydevd's numbering, far above it).

Lines pass through unchanged (the same bytes) unless a hook replaced them; a line that is not a pydevd
message passes as it came.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, unquote

import paramiko

from remote_debug.laptop.connection.pump import pump

log = logging.getLogger(__name__)

CMD_RUN = 101
CMD_LIST_THREADS = 102
CMD_THREAD_CREATE = 103
CMD_THREAD_SUSPEND = 105
CMD_THREAD_RUN = 106
CMD_STEP_INTO = 107
CMD_STEP_OVER = 108
CMD_STEP_RETURN = 109
CMD_SET_BREAK = 111
CMD_WRITE_TO_CONSOLE = 116
CMD_RUN_TO_LINE = 118
CMD_ADD_EXCEPTION_BREAK = 122
CMD_SET_NEXT_STATEMENT = 127
CMD_SMART_STEP_INTO = 128
CMD_STEP_CAUGHT_EXCEPTION = 137
CMD_STEP_INTO_MY_CODE = 144
CMD_STEP_INTO_COROUTINE = 206
CMD_RETURN = 502
CMD_ERROR = 901
# the IDE's commands that let one thread run until it stops again (a step, in pydevd's words)
IDE_STEPS = frozenset(
    {
        CMD_STEP_INTO,
        CMD_STEP_OVER,
        CMD_STEP_RETURN,
        CMD_RUN_TO_LINE,
        CMD_SET_NEXT_STATEMENT,
        CMD_SMART_STEP_INTO,
        CMD_STEP_INTO_MY_CODE,
        CMD_STEP_INTO_COROUTINE,
    }
)
# a suspension's stop_reason (the command that caused it) -> the reason the rank group knows (as DAP names it)
STOP_REASONS = {
    CMD_THREAD_SUSPEND: "pause",
    CMD_SET_BREAK: "breakpoint",
    CMD_ADD_EXCEPTION_BREAK: "exception",
    CMD_STEP_CAUGHT_EXCEPTION: "exception",
    **{cmd: "step" for cmd in IDE_STEPS},
}
# the start of the ``message`` of a suspension the rank group caused (all-stop, Pause All, Step Over All): a
# client that plays PyCharm (the headless server) tells those from the rank's own stops by it
GROUP_MESSAGE = "[remote-debug] "
INJECTED_SEQ = 1_000_000_000  # ours: odd ones to the rank (as the IDE's), even ones to the IDE (as pydevd's)
MAX_LINE = 64 << 20  # a frame's variables of a huge object stay well under this
_QUOTE_SAFE = '/<>_=" \t'  # what pydevd leaves unquoted in a message's text (NetCommand)
_XML_VALUE_SAFE = "/>_= "  # ...and in an attribute inside it, quoted once more (make_thread_suspend_str)


@dataclass(frozen=True)
class Line:
    """One pydevd message: its command id, seq and text (unquoted)."""

    cmd: int
    seq: int
    text: str


def parse(raw: bytes, *, quoted: bool = True) -> Line | None:
    """The message of one line (with or without its newline); None if it is not a pydevd message.  pydevd
    URL-quotes the text of its own messages (``quoted``); PyCharm's commands come as plain tab-separated
    fields, and pydevd reads them so."""
    cmd, _, rest = raw.rstrip(b"\r\n").partition(b"\t")
    seq, _, text = rest.partition(b"\t")
    try:
        decoded = text.decode("utf-8", "replace")
        return Line(int(cmd), int(seq), unquote(decoded) if quoted else decoded)
    except ValueError:
        return None


def encode(line: Line, *, quoted: bool = True) -> bytes:
    """One line of ``line``: its text quoted as pydevd quotes its own (``quoted``), or as PyCharm sends it."""
    text = quote(line.text, _QUOTE_SAFE) if quoted else line.text
    return f"{line.cmd}\t{line.seq}\t{text}\n".encode()


def console_text(text: str, *, stderr: bool = False) -> str:
    """The text of a CMD_WRITE_TO_CONSOLE: PyCharm prints ``text`` in the rank's Debug Console (pydevd's own
    redirected output has this form, ``make_io_message``)."""
    return f'<xml><io s="{_xml_value(quote(text, _XML_VALUE_SAFE))}" ctx="{2 if stderr else 1}"/></xml>'


def with_message(text: str, message: str) -> str:
    """A suspension's text with ``message`` on its thread: pydevd's attribute, which pydevd-pycharm sends empty
    unless the stop has a text of its own (a log breakpoint's, an exception's name), and then it is kept."""
    start = text.find("<thread ")
    end = text.find(">", start) if start >= 0 else -1
    if end < 0:
        return text
    attribute = f' message="{_xml_value(quote(message, _XML_VALUE_SAFE))}"'
    tag = text[start:end]
    if ' message=""' in tag:
        return text[:start] + tag.replace(' message=""', attribute, 1) + text[end:]
    if " message=" in tag:
        return text
    return text[:end] + attribute + text[end:]


def _xml_value(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


class LineSplitter:
    """Lines out of a byte stream that arrives in arbitrary pieces."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buffer = bytearray()
        self._max_line = max_line

    def feed(self, data: bytes) -> list[bytes]:
        """The complete lines the data finished, each with its newline; ValueError past ``max_line``."""
        # only the new data is searched: a frame's variables can be one line of megabytes, arriving in 64 KiB reads
        end = data.rfind(b"\n")
        if end < 0:
            self._buffer += data
            if len(self._buffer) > self._max_line:
                raise ValueError(f"pydevd line over {self._max_line} bytes")
            return []
        done = bytes(self._buffer) + data[: end + 1]
        self._buffer = bytearray(data[end + 1 :])
        return [line + b"\n" for line in done[:-1].split(b"\n")]  # "\n" only: pydevd's reader splits on nothing else


ResponseCallback = Callable[[Line], None]


class PydevdHooks(Protocol):
    """What a rank's reverse forward tells (and asks) the attach about each PyCharm connection it carries."""

    def opened(self, session: PydevdTap) -> None:
        """The rank connected through the forward (before any of its messages passed)."""

    def from_ide(self, session: PydevdTap, line: Line) -> None:
        """A message of PyCharm's, about to go to the rank unchanged."""

    def from_rank(self, session: PydevdTap, line: Line) -> Line | None:
        """A message of the rank's, about to go to PyCharm: the message to send (``line`` itself: its bytes
        unchanged), or None to keep it from PyCharm."""

    def closed(self, session: PydevdTap) -> None:
        """The connection is over (either side closed, or :meth:`PydevdTap.close`)."""


class PydevdTap:
    """One rank's connection to PyCharm through its reverse forward (see the module docstring)."""

    def __init__(self, ide: socket.socket, rank: paramiko.Channel | socket.socket, hooks: PydevdHooks) -> None:
        self._ide, self._rank, self._hooks = ide, rank, hooks
        # the pump writes from its thread, injections from the attach's: one writer at a time per side
        self._to_ide = threading.Lock()
        self._to_rank = threading.Lock()
        self._seq_to_rank = itertools.count(INJECTED_SEQ + 1, 2)
        self._seq_to_ide = itertools.count(INJECTED_SEQ, 2)
        self._waiting: dict[int, ResponseCallback] = {}  # our command's seq -> who wants the answer
        self._closed = threading.Event()

    # --- what the attach may do in the connection ------------------------------------------------

    def request(self, cmd: int, text: str, on_response: ResponseCallback | None = None) -> int:
        """Send the rank a command of ours; its answer (if any) goes to ``on_response``, never to PyCharm."""
        seq = next(self._seq_to_rank)
        if on_response is not None:
            self._waiting[seq] = on_response
        self._send(self._rank, self._to_rank, Line(cmd, seq, text))
        return seq

    def tell_ide(self, cmd: int, text: str) -> None:
        """A message of ours to PyCharm, as if the rank had sent it."""
        self._send(self._ide, self._to_ide, Line(cmd, next(self._seq_to_ide), text))

    def say(self, text: str) -> None:
        """A line in the rank's Debug Console in PyCharm."""
        self.tell_ide(CMD_WRITE_TO_CONSOLE, console_text(text))

    def close(self) -> None:
        """End the connection on both sides: PyCharm sees the rank go, the rank sees PyCharm go."""
        for side in (self._ide, self._rank):
            with contextlib.suppress(Exception):
                if isinstance(side, socket.socket):
                    side.shutdown(socket.SHUT_RDWR)
                else:
                    side.close()

    def _send(self, target: Any, lock: threading.Lock, line: Line) -> None:
        if self._closed.is_set():
            return
        try:
            with lock:
                target.sendall(encode(line, quoted=target is self._ide))
        except (OSError, EOFError, paramiko.SSHException) as exc:
            log.debug("pydevd tap send failed: %s", exc)

    # --- the pump ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Carry the connection until either side closes (the forward's thread)."""
        from_ide, from_rank = LineSplitter(), LineSplitter()

        def ide_said(data: bytes) -> None:
            for raw in from_ide.feed(data):
                self._pass_to_rank(raw)

        def rank_said(data: bytes) -> None:
            for raw in from_rank.feed(data):
                self._pass_to_ide(raw)

        self._hooks.opened(self)
        try:
            pump(self._ide, self._rank, ide_said, rank_said)
        except (OSError, EOFError, ValueError, paramiko.SSHException) as exc:  # one side went: the connection is over
            log.debug("pydevd tap ended: %s", exc)
        finally:
            self._closed.set()
            with contextlib.suppress(Exception):  # a hook's bug must not keep the forward's socket open
                self._hooks.closed(self)

    def _pass_to_rank(self, raw: bytes) -> None:
        line = parse(raw, quoted=False)
        if line is not None:
            try:
                self._hooks.from_ide(self, line)
            except Exception as exc:  # a hook's bug: the rank still gets what PyCharm said
                log.debug("pydevd tap hook failed: %s", exc)
        with self._to_rank:
            self._rank.sendall(raw)

    def _pass_to_ide(self, raw: bytes) -> None:
        line = parse(raw)
        if line is None:
            with self._to_ide:
                self._ide.sendall(raw)
            return
        if line.seq > INJECTED_SEQ and line.seq % 2:  # the answer to a command of ours (or pydevd's error about it)
            callback = self._waiting.pop(line.seq, None)
            if callback is not None:
                with contextlib.suppress(Exception):  # never let our bookkeeping end PyCharm's connection
                    callback(line)
            return
        try:
            changed = self._hooks.from_rank(self, line)
        except Exception as exc:  # a hook's bug: PyCharm still gets what the rank said
            log.debug("pydevd tap hook failed: %s", exc)
            changed = line
        if changed is None:
            return
        with self._to_ide:
            self._ide.sendall(raw if changed is line else encode(changed))
