"""pydevd serving DAP in the rank itself, made to keep the promises debugpy's adapter kept.

A rank listens with ``debugpy.listen(in_process_debug_adapter=True)`` by default: pydevd answers the
IDE on the debug port, and no adapter process is started per rank (at 64 ranks on a node those 64
Python start-ups were half of what an attach cost, docs/PERFORMANCE.md).  debugpy's adapter did three
things for a rank that pydevd on its own does differently, and :func:`prepare` puts them back:

* **Our uid only.**  The server socket gets the uid gate (:mod:`remote_debug.container.rank.debugpy_gate`).
* **One debugger at a time.**  pydevd drops the debugger it has for any new connection (it assumes the
  old one went without a ``disconnect``): a second IDE, or a port probe, would silently end the first
  user's session.  The adapter refused the newcomer's ``attach``; :class:`DapServerListener` answers
  its ``initialize`` with ``refusal`` (what VS Code shows) and keeps the first - once the first connection
  stayed open for ``HANDOVER_SECONDS``: a debugger reconnecting right after its ``disconnect`` is no second one.
* **A debugger that vanishes lets the rank run on.**  When the IDE's connection drops without a
  ``disconnect`` (the laptop slept, the tunnel was cut, VS Code was killed), the adapter disconnected
  from pydevd for it: breakpoints gone, threads resumed.  pydevd alone keeps the rank paused at its
  breakpoint - and a paused rank stalls every other rank at the next collective - and goes on calling
  itself attached.  :func:`_resume_when_the_debugger_vanishes` does the adapter's part.

What is lost: debugpy's auto-attach to a rank's Python subprocesses (in-process mode does not patch
``multiprocessing``), which an IDE could not reach through our tunnel anyway (the adapter announced a
node-local port).  ``REMOTE_DEBUG_DEBUGPY_ADAPTER=subprocess`` brings the adapter back.
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from remote_debug.container.log import describe, log
from remote_debug.container.rank.debugpy_gate import GatedListener
from remote_debug.contract import dap_wire
from remote_debug.oskit import peer_uid

_MARK = "_remote_debug_dap_server"
# A debugger that reconnects right after its ``disconnect`` (VS Code's Restart, a script's next session) comes
# while its previous connection is still being closed: through the laptop's forward and the node's sshd that
# takes a moment.  The newcomer waits this long for the previous connection to close before it is refused as a
# second debugger (meanwhile further newcomers queue in the listen backlog).
HANDOVER_SECONDS = 2.5
HANDOVER_POLL = 0.02


class DapServerListener(GatedListener):
    """pydevd's DAP server socket in a rank: our own uid only (where that can be told), one debugger
    at a time."""

    def __init__(self, sock: socket.socket, refusal: str, *, gated: bool) -> None:
        super().__init__(sock.family, sock.type, sock.proto, fileno=sock.detach())
        self.refusal = refusal
        self.gated = gated
        self._debugger: socket.socket | None = None

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            conn, address = super().accept() if self.gated else socket.socket.accept(self)
            if self._debugger is not None and not _closes_within(self._debugger, HANDOVER_SECONDS):
                log(f"refused a second debugger on debug port {self.getsockname()[1]}: one is attached")
                threading.Thread(target=dap_wire.refuse, args=(conn, self.refusal), daemon=True).start()
                continue
            self._debugger = conn
            return conn, address


def _closes_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the debugger's connection is closed, or closes within ``seconds``."""
    deadline = time.monotonic() + seconds
    while _still_open(sock):
        if time.monotonic() >= deadline:
            return False
        time.sleep(HANDOVER_POLL)
    return True


def _still_open(sock: socket.socket) -> bool:
    """Whether the debugger's connection is still up: pydevd has not closed it and neither has the peer."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return True  # open, nothing to read
    except OSError:
        return False  # closed by pydevd (EBADF) or reset


def prepare(refusal: str) -> None:
    """In a rank, before ``debugpy.listen(in_process_debug_adapter=True)``; raises if pydevd cannot be
    patched (the rank then does not listen: never an ungated port)."""
    import debugpy.server  # noqa: F401 - puts debugpy's vendored pydevd on sys.path
    import pydevd

    original: Callable[..., socket.socket] = pydevd.create_server_socket  # maybe nodelay's wrapper already
    if not getattr(original, _MARK, False):
        gated = peer_uid.supported()

        @functools.wraps(original)
        def create_server_socket(*args: Any, **kwargs: Any) -> socket.socket:
            return DapServerListener(original(*args, **kwargs), refusal, gated=gated)

        setattr(create_server_socket, _MARK, True)
        # pydevd imported it by name: its connection thread looks it up in pydevd's globals
        pydevd.create_server_socket = create_server_socket
    _resume_when_the_debugger_vanishes()


def _resume_when_the_debugger_vanishes() -> None:
    """pydevd's reader ends when the debugger's connection does; then disconnect for it, as debugpy's
    adapter did and as pydevd does on a ``disconnect`` request (a repeat after one is harmless)."""
    from _pydevd_bundle import pydevd_comm
    from _pydevd_bundle.pydevd_api import PyDevdAPI

    reader_class = pydevd_comm.ReaderThread
    original = reader_class._terminate_on_socket_close
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def on_socket_close(self: Any) -> None:
        original(self)
        py_db = self.py_db
        # a newer connection has taken over: this one's end is not the debugger's
        if py_db is None or getattr(py_db, "reader", None) is not self:
            return
        try:
            if py_db.is_attached():
                log("the debugger went without a disconnect; breakpoints removed, the rank runs on")
            py_db.enable_output_redirection(False, False)
            PyDevdAPI().request_disconnect(py_db, resume_threads=True)
        except Exception as exc:  # never take the rank down from pydevd's reader thread
            log(f"could not let the rank run on after its debugger went: {describe(exc)}")
        _stop_sending_output()

    setattr(on_socket_close, _MARK, True)
    reader_class._terminate_on_socket_close = on_socket_close


def _stop_sending_output() -> None:
    """Take pydevd's tee off the rank's stdout and stderr once its debugger is gone (a ``disconnect`` or not).

    A debugger that attached with ``redirectOutput`` (VS Code's rank configurations, ``--show-output``) has every
    ``print`` of the rank also sent as a DAP ``output`` event.  pydevd installs that tee once and never takes it
    off: a ``disconnect`` only clears a flag, so every later print of the rank still builds its message (measured:
    3 us -> 170-360 us a print, docs/PERFORMANCE.md), and every later debugger gets the output whether it asked or
    not.  The next debugger that asks puts it back."""
    try:
        from _pydevd_bundle import pydevd_io

        for std in ("stdout", "stderr"):
            pydevd_io.stop_redirect_stream_to_pydb_io_messages(std)
    except Exception as exc:  # the rank's output must not end with its debugger
        log(f"could not stop sending the rank's output to its debugger: {describe(exc)}")
