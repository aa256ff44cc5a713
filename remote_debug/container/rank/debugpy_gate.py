"""Our uid gate on debugpy's own listeners (see ``remote_debug.oskit.peer_uid``).

debugpy has no client token in ``listen`` mode: whoever connects to the port runs code in the rank.
On a SageMaker node that is only the job itself (and sshd on the laptop's behalf), but on a shared
machine a local job's ports are on the loopback every user can reach.  So the listeners debugpy opens
accept only sockets of our own uid:

* in debugpy's adapter subprocess (from our ``sitecustomize``, like ``nodelay``): the client port
  the IDE connects to, and the port pydevd connects back to.  Both come from
  ``debugpy.common.sockets.create_server``; the listener it returns gets an ``accept`` that closes a
  stranger's connection and waits for the next one.
* in a rank that serves DAP itself (debugpy's in-process adapter, our default): pydevd's own server
  socket, a :class:`GatedListener` that also takes one debugger at a time
  (:mod:`remote_debug.container.rank.dap_server`).
* in a rank with an adapter subprocess, before ``debugpy.listen()``: pydevd's connection to "its
  adapter".  The adapter reports its ports on a loopback listener of the rank, and a stranger who
  got there first could name a server of its own, which would then drive pydevd.  Gating that
  listener does not work: the adapter writes and closes at once, so its socket may have no owner
  left by the time we look.  So pydevd's own connection is checked instead: the socket that
  accepted it must be ours (a socket accepted by a listener has the listener's owner, and a fake
  adapter must keep it open to do anything).

Where the owner of a socket cannot be told (not Linux) nothing is patched: the laptop says so at attach.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable
from typing import Any

from remote_debug.container.log import log
from remote_debug.oskit import peer_uid

_MARK = "_remote_debug_uid_gate"


class GatedListener(socket.socket):
    """A listening socket whose ``accept`` returns only connections from our own uid."""

    __slots__ = ()  # the layout of socket.socket, so an existing listener can take this class

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            conn, address = super().accept()
            verdict = peer_uid.peer_verdict(conn)
            if verdict.allowed:
                return conn, address
            log(f"refused a connection to debug listener port {self.getsockname()[1]}: {verdict.reason}")
            conn.close()


def gate(listener: socket.socket) -> socket.socket:
    """``listener`` with the uid gate (in place; returned for convenience)."""
    if type(listener) is socket.socket:
        listener.__class__ = GatedListener
    return listener


def _wrap(create_server: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(create_server, _MARK, False):
        return create_server

    @functools.wraps(create_server)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return gate(create_server(*args, **kwargs))

    setattr(wrapper, _MARK, True)
    return wrapper


def gate_debugpy() -> bool:
    """Gate every listener debugpy creates in this process from now on; False where the platform
    cannot tell a socket's owner.  Raises if debugpy cannot be patched (the caller decides)."""
    if not peer_uid.supported():
        return False
    from debugpy.common import sockets

    sockets.create_server = _wrap(sockets.create_server)
    return True


def _check_server(connect: Callable[..., Any]) -> Callable[..., Any]:
    """pydevd's ``start_client`` -> the same, refusing a server that another uid accepted us on."""
    if getattr(connect, _MARK, False):
        return connect

    @functools.wraps(connect)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sock = connect(*args, **kwargs)
        owner = peer_uid.server_owner(sock)
        if owner != os.geteuid():
            sock.close()
            who = "an unknown user" if owner is None else f"uid {owner}"
            log(f"refused to connect pydevd to a debug adapter of {who}")
            raise ConnectionRefusedError(f"the debug adapter's port belongs to {who}")
        return sock

    setattr(wrapper, _MARK, True)
    return wrapper


def gate_debuggee() -> bool:
    """In a rank, before ``debugpy.listen()``: pydevd connects only to an adapter of our own uid.
    False where the platform cannot tell; raises if pydevd cannot be patched."""
    if not peer_uid.supported():
        return False
    import debugpy.server  # noqa: F401 - puts debugpy's vendored pydevd on sys.path
    import pydevd
    from _pydevd_bundle import pydevd_comm

    # pydevd imported start_client by name; PyDB.connect looks it up in pydevd's globals.
    pydevd.start_client = _check_server(pydevd.start_client)
    pydevd_comm.start_client = _check_server(pydevd_comm.start_client)
    return True


def keep_accepting() -> None:
    """In debugpy's adapter: a connection that fails at once cannot end its accept loop.

    debugpy's accept thread runs the handler inline (``debugpy.common.sockets.serve``); for the client
    port that is ``Client(sock)``, which sends two "output" events right after it starts reading.  A
    client that connects and closes within a few ms (a port probe) makes that send raise, the exception
    ends the accept thread, and the adapter never answers anyone again: every later F5 hangs."""
    from debugpy.common import sockets

    serve = sockets.serve
    if getattr(serve, _MARK, False):
        return

    @functools.wraps(serve)
    def wrapper(name: str, handler: Callable[[socket.socket], Any], *args: Any, **kwargs: Any) -> Any:
        def sturdy(sock: socket.socket) -> None:
            try:
                handler(sock)
            except Exception as exc:
                log(f"debugpy adapter pid {os.getpid()}: a {name} connection failed at once ({exc!r}); still accepting")
                try:
                    sock.close()
                except OSError:
                    pass

        return serve(name, sturdy, *args, **kwargs)

    setattr(wrapper, _MARK, True)
    sockets.serve = wrapper


def gate_adapter(argv: list[str] | None = None) -> None:
    """In debugpy's adapter subprocess of one of our ranks (``sitecustomize``): gate its listeners.

    Fails closed: an adapter that cannot be gated exits, so the rank's ``debugpy.listen()`` fails and
    reports it, rather than serving anyone who connects."""
    from remote_debug.container.rank import nodelay

    parent = nodelay.our_rank_adapter(argv)
    if parent is None:
        return
    try:
        nodelay.import_adapter_debugpy(parent)
        keep_accepting()
        gate_debugpy()
    except Exception as exc:
        log(f"debugpy adapter pid {os.getpid()}: cannot gate its listeners, exiting: {exc}")
        os._exit(3)
