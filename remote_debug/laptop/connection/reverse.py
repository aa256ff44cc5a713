"""The laptop end of a reverse forward: ranks on a node connect out, we connect them to the IDE.

Each rank's connection arrives as an SSH channel from the node (``NodeTunnel.reverse_forward``).
We connect it to the port where PyCharm's "Python Debug Server" listens on this machine and pump
bytes both ways - but first we write one hello line (``pycharm_spec.Hello``) on the channel:

* IDE not listening -> ``ok: false`` + the reason, then close.  The rank logs it and retries
  within its wait window instead of calling ``settrace`` on a tunnel with nobody behind it (which
  blocks forever).  We never open a "probe" connection to PyCharm: a connection that closes
  without a handshake can end PyCharm's debug session, so the only connection PyCharm ever sees
  from us is the rank's own.
* IDE listening -> ``ok: true`` + the IDE project root (the rank maps it to the job's code dir)
  + the PyCharm build (the rank checks its pydevd-pycharm against it), then the IDE's bytes.

With a rank group (all-stop, the group actions) the bytes pass through a :class:`pydevd_tap.PydevdTap`, which
reads pydevd's line protocol and lets the group act in the connection; without one, a plain pump.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import paramiko

from remote_debug.contract.pycharm_spec import Hello
from remote_debug.contract.spec import LOOPBACK
from remote_debug.laptop.connection.pump import pump
from remote_debug.laptop.connection.pydevd_tap import PydevdHooks, PydevdTap
from remote_debug.laptop.connection.tunnels import ReverseHandler
from remote_debug.laptop.wire import events as ev
from remote_debug.laptop.wire.events import Emit
from remote_debug.oskit import peer_uid

log = logging.getLogger(__name__)


def ide_listening(port: int, host: str = LOOPBACK) -> bool:
    """Whether something listens on ``host:port`` here, found out without connecting to it.

    A connection that PyCharm accepts and that closes without a handshake can end its debug session, so
    the attach never probes PyCharm's port: it tries to *bind* it, and lets go at once.  On Linux a bind
    with SO_REUSEADDR fails only where a socket listens (wildcard or loopback).  BSD and macOS let that
    bind succeed beside a wildcard listener, so there a plain wildcard bind is tried too; it also fails
    for a recently closed connection on that port, which costs one needless ask (tested on Linux only).
    """
    attempts = [(host, True)] if sys.platform == "linux" else [(host, True), ("", False)]
    for address, reuse in attempts:
        with socket.socket() as probe:
            if reuse:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


@dataclass(frozen=True)
class RankOrigin:
    rank: int
    node: str
    node_port: int


class IdeBridge:
    """Connects every reverse-forwarded rank connection to one IDE port on this machine."""

    def __init__(
        self,
        ide_port: int,
        *,
        ide_root: str,
        build: str = "",
        emit: Emit | None = None,
        ide_host: str = LOOPBACK,
        connect_timeout: float = 5.0,
    ) -> None:
        self.ide_host, self.ide_port = ide_host, ide_port
        self.ide_root, self.build = ide_root, build
        self.emit: Emit = emit or ev.ignore
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        # our local port of each connection to the IDE -> the rank behind it: lets an in-process
        # stand-in IDE (the headless server) tell which rank a connection comes from.
        self._origins: dict[int, RankOrigin] = {}
        self._told_no_ide: set[int] = set()  # ranks already reported as "IDE not listening"
        self._live: dict[int, int] = {}  # rank -> its connections to the IDE open now
        self.connections = 0
        # called when a rank's connection to the IDE ends (PyCharm stopped, restarted, or the rank ended)
        self.on_end: Callable[[RankOrigin], None] | None = None

    def handler_for(self, rank: int, node: str, node_port: int, tap: PydevdHooks | None = None) -> ReverseHandler:
        """``tap``: who reads the pydevd protocol of the rank's connections (the attach's rank group)."""
        origin = RankOrigin(rank, node, node_port)
        return lambda chan, _from: self._serve(chan, origin, tap)

    def connected(self, rank: int) -> bool:
        """Whether the rank has a connection to the IDE open now."""
        with self._lock:
            return self._live.get(rank, 0) > 0

    def origin_of(self, local_port: int) -> RankOrigin | None:
        with self._lock:
            return self._origins.get(local_port)

    def _serve(self, chan: paramiko.Channel, origin: RankOrigin, tap: PydevdHooks | None = None) -> None:
        counted = False
        try:
            ide = socket.create_connection((self.ide_host, self.ide_port), timeout=self.connect_timeout)
        except OSError as exc:
            self._refuse(
                chan,
                origin,
                (
                    f"nothing listens on the laptop's {self.ide_host}:{self.ide_port} "
                    f"({type(exc).__name__}): start PyCharm's Python Debug Server on that port"
                ),
            )
            return
        stranger = self._stranger(ide)
        if stranger:
            with contextlib.suppress(OSError):
                ide.close()
            self._refuse(chan, origin, stranger)
            return
        try:
            ide.settimeout(None)
            ide.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            local_port = int(ide.getsockname()[1])
            with self._lock:
                self._origins[local_port] = origin
                self._told_no_ide.discard(origin.rank)
                self.connections += 1
                self._live[origin.rank] = self._live.get(origin.rank, 0) + 1
            counted = True
            # The IDE may already have sent its first command: it waits in `ide` until the pump
            # starts, so the hello is always the first line the rank reads.
            chan.sendall(Hello(ok=True, ide_root=self.ide_root, build=self.build).encode())
            self.emit(ev.RankConnected(rank=origin.rank, node=origin.node, ide_port=self.ide_port))
            if tap is not None:
                PydevdTap(ide, chan, tap).run()
            else:
                pump(ide, chan, chan.sendall, ide.sendall)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            log.debug("rank %s connection to the IDE ended: %s", origin.rank, exc)
        finally:
            with contextlib.suppress(OSError):
                ide.close()
            chan.close()
            if counted:
                with self._lock:
                    self._live[origin.rank] -= 1
                if self.on_end is not None:
                    self.on_end(origin)

    def _stranger(self, ide: socket.socket) -> str:
        """Why the program behind ``ide`` is not ours to hand a rank to ("" if it is).

        Whoever accepts the rank's connection drives pydevd in the rank, i.e. runs code in the job.
        PyCharm's port is a well-known one, and when PyCharm is not running another local user may
        listen there: the socket that accepted us (in the kernel, it has its listener's owner) must
        belong to our own uid.  Checked before the rank's first byte goes anywhere."""
        if not peer_uid.supported():
            return ""  # attach said so once
        owner = peer_uid.server_owner(ide)
        if owner == os.geteuid():
            return ""
        who = "an unknown user" if owner is None else f"uid {owner}"
        return (
            f"the program listening on the laptop's {self.ide_host}:{self.ide_port} belongs to {who}, not to "
            "you: not connecting the rank to it (start PyCharm's Python Debug Server there yourself)"
        )

    def _refuse(self, chan: paramiko.Channel, origin: RankOrigin, reason: str) -> None:
        try:
            chan.sendall(Hello(ok=False, error=reason).encode())
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            chan.close()
        with self._lock:
            first = origin.rank not in self._told_no_ide
            self._told_no_ide.add(origin.rank)
        if first:  # ranks retry every second while they wait: say it once per rank
            self.emit(ev.IdeNotListening(rank=origin.rank, node=origin.node, message=reason))
