"""One SSH connection per node, carrying a local forward per rank.

Why paramiko in-process rather than an ``ssh -L`` subprocess: setting up takes 0.05-0.16 s instead
of 0.3-0.65 s (lab-facts), forwards can be added as ranks appear without reconnecting, a channel
open tells us whether a rank's listener answers, and the later PyCharm reverse forwards need one
handler per transport.  Why not sshtunnel: it cannot add forwards to a live connection, and it does
not verify host keys unless told to.  The connection goes through exactly the same ProxyCommand and
the same pinned known_hosts file that the user's OpenSSH uses, so both paths trust the same key.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import paramiko

from remote_debug.contract import dap_wire
from remote_debug.contract.spec import ALREADY_ATTACHED, LOOPBACK
from remote_debug.laptop.connection.dap_tap import DapTap, TapHooks
from remote_debug.laptop.connection.pump import pump
from remote_debug.laptop.core.errors import HostKeyMismatchError as HostKeyMismatchError
from remote_debug.laptop.core.errors import UserError
from remote_debug.oskit import peer_uid

log = logging.getLogger(__name__)
# paramiko logs every failed connection attempt as an ERROR with a traceback; with no logging set up
# (the CLI) Python's last-resort handler would print those on the user's terminal each time a
# dropped link is retried.  attach reports "tunnel-down" itself; a configured root logger still
# receives paramiko's records.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

# A link can die without EOF or RST (laptop Wi-Fi gone, an SSM session that hangs): only a missing
# answer tells.  Every KEEPALIVE_INTERVAL s the tunnel sends sshd a global request that wants a reply
# (OpenSSH answers with REQUEST_FAILURE, any answer will do); none within KEEPALIVE_TIMEOUT s and the
# transport is dropped, so that the forwards reconnect.  A slow link still answers (tested with
# 2 x 0.3 s of added latency).  Read at run time so tests can shorten them.
KEEPALIVE_INTERVAL = 5.0
KEEPALIVE_TIMEOUT = 15.0
# While a node is unreachable, reconnect attempts are spaced 0.5, 1, 2, 2, ... s apart: each one
# starts a ProxyCommand (an SSM StartSession call on SageMaker), and 2 s keeps the time from "the path
# is back" to "the forward works again" well under 5 s.
RETRY_FIRST = 0.5
RETRY_MAX = 2.0

# Serves one connection that arrived on a reverse-forwarded node port: (channel, origin on the node).
ReverseHandler = Callable[[paramiko.Channel, tuple[str, int]], None]


@dataclass(frozen=True)
class NodeEndpoint:
    """How to reach one node: the same facts the generated ssh Host entry holds."""

    alias: str
    host_key_alias: str
    user: str
    port: int
    identity_file: Path
    known_hosts: Path
    proxy_command: str  # with %h and %p, as written into the ssh config


class _ProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand with socket semantics at end of file.

    paramiko's own ``recv`` ignores EOF from the relay: it spins on ``select`` until its timeout,
    so a dead relay (an SSM session that dropped) is never noticed and burns a core.  Returning
    b"" at EOF, as a socket does, makes the transport end and our reconnect logic take over.
    """

    def recv(self, size: int) -> bytes:
        stdout = self.process.stdout
        assert stdout is not None
        if stdout.closed:  # closed by close() while the transport thread was still reading
            return b""
        try:
            readable, _, _ = select.select([stdout], [], [], self.timeout)
            if not readable:
                raise TimeoutError()
            return os.read(stdout.fileno(), size)  # b"" at EOF: the relay is gone
        except TimeoutError:
            raise
        except ValueError:  # the pipe was closed by close() between the check above and select()
            return b""
        except OSError as exc:
            raise paramiko.ProxyCommandFailure(" ".join(self.cmd), exc.strerror or str(exc)) from exc

    def close(self) -> None:
        """Stop the relay AND reap it and its pipes.

        paramiko's own close only sends SIGTERM: every dropped or failed connection then left a zombie
        and three pipe descriptors behind until garbage collection got to them (measured: 20 cut/restore
        flaps of a live attach).
        """
        process = self.process
        if process.poll() is None:
            with contextlib.suppress(OSError):
                process.terminate()
            try:
                process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=2)
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _expand_proxy_command(template: str, host: str, port: int) -> list[str]:
    # ssh expands %h/%p/%% in one left-to-right pass (so "%%h" is a literal "%h") and runs the result
    # with the shell; the words we generate are shell-quoted, so splitting with shell rules yields
    # the same argv without a shell in between.
    tokens = {"%h": host, "%p": str(port), "%%": "%"}
    return shlex.split("".join(tokens.get(part, part) for part in re.split(r"(%[hp%])", template)))


class NodeTunnel:
    """A pinned, authenticated SSH transport to one node plus local forwards to its ranks."""

    def __init__(self, endpoint: NodeEndpoint, *, connect_timeout: float = 30.0) -> None:
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout
        self._transport: paramiko.Transport | None = None
        self._proxy: _ProxyCommand | None = None
        self._lock = threading.Lock()
        self._listeners: dict[int, socket.socket] = {}  # remote port -> local listening socket
        self._targets: dict[socket.socket, int] = {}  # local listening socket -> the remote port it serves now
        # node port -> handler.  paramiko keeps ONE reverse-forward handler per transport (a second
        # request_port_forward(handler=...) silently replaces the first), so every reverse forward
        # goes through _dispatch_reverse, which picks the handler by the node port.
        self._reverse: dict[int, ReverseHandler] = {}
        self._reverse_pending: set[int] = set()  # forwards to re-request on the current transport
        self._closed = threading.Event()
        # Global requests share ONE completion event per transport in paramiko: a keepalive probe
        # and a request_port_forward in flight together would lose one's answer.
        self._global_lock = threading.Lock()
        self._ever_connected = False
        self.reconnects = 0  # new transports after the first, whoever triggered them
        self._reported_reconnects = 0
        self.dead_links = 0  # transports dropped because sshd stopped answering keepalives
        self._failures = 0  # failed reconnect attempts in a row
        self._retry_at = 0.0
        self._watchdog: threading.Thread | None = None
        # remote port -> (what the forward carries, called with the message when a 2nd debugger is refused)
        self._exclusive: dict[int, tuple[str, Callable[[str], None] | None]] = {}
        self._sessions: dict[int, int] = {}  # remote port -> connections the forward carries now
        self._taps: dict[int, TapHooks] = {}  # remote port -> who reads the DAP its sessions carry
        self._session_lock = threading.Lock()  # not self._lock: a reconnect holds that one for long
        # Told (with a one-line message) when a connection from another local user is refused.
        self.on_foreign: Callable[[str], None] | None = None
        self.refused_foreign = 0

    # --- connection -----------------------------------------------------------------------------

    def _pinned_key(self) -> paramiko.PKey:
        keys = paramiko.HostKeys()
        if self.endpoint.known_hosts.exists():
            keys.load(str(self.endpoint.known_hosts))
        entry = keys.lookup(self.endpoint.host_key_alias)
        if not entry:
            raise UserError(f"no pinned host key for {self.endpoint.alias}: run 'remote-debug ssh-config' again")
        return next(iter(entry.values()))

    def connect(self) -> None:
        with self._lock:
            self._connect_locked()

    def _connect_locked(self) -> None:
        if self.alive:
            return
        self._drop_transport_locked()
        argv = _expand_proxy_command(self.endpoint.proxy_command, self.endpoint.alias, self.endpoint.port)
        proxy = _ProxyCommand(shlex.join(argv))
        transport = paramiko.Transport(proxy)
        # the proxy may wait for the node's SSM agent before the first byte (ssm.start_when_ready, up to 15 s):
        # paramiko's own 15 s banner timeout would give up on a session that is about to open
        transport.banner_timeout = self.connect_timeout
        try:
            transport.start_client(timeout=self.connect_timeout)
            presented = transport.get_remote_server_key()
            pinned = self._pinned_key()
            if presented.get_name() != pinned.get_name() or presented.asbytes() != pinned.asbytes():
                raise HostKeyMismatchError(
                    f"host key of {self.endpoint.alias} does not match the key the job published: refusing to connect"
                )
            pkey = paramiko.Ed25519Key.from_private_key_file(str(self.endpoint.identity_file))
            transport.auth_publickey(self.endpoint.user, pkey)
            # No paramiko keepalive: the watchdog's probes (every KEEPALIVE_INTERVAL s) keep idle
            # SSM sessions alive too, and unlike paramiko's they want an answer.
        except BaseException:
            transport.close()
            proxy.close()
            raise
        self._transport, self._proxy = transport, proxy
        if self._ever_connected:
            self.reconnects += 1
        self._ever_connected = True
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, daemon=True, name=f"keepalive-{self.endpoint.alias}")
            self._watchdog.start()
        # A new transport has no reverse forwards: sshd dropped them with the old session.
        self._reverse_pending = set(self._reverse)
        self._restore_reverse_locked()

    def _restore_reverse_locked(self) -> None:
        transport = self._transport
        if transport is None:
            return
        for port in sorted(self._reverse_pending):
            try:
                with self._global_lock:
                    transport.request_port_forward(LOOPBACK, port, handler=self._dispatch_reverse)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                # sshd may still hold the port for the session that just died: retried later.
                log.debug("re-requesting reverse forward %s:%s failed: %s", self.endpoint.alias, port, exc)
                continue
            self._reverse_pending.discard(port)

    def _drop_transport_locked(self) -> None:
        if self._transport is not None:
            self._transport.close()
        if self._proxy is not None:
            with contextlib.suppress(Exception):
                self._proxy.close()
        self._transport = self._proxy = None

    @property
    def alive(self) -> bool:
        t, proxy = self._transport, self._proxy
        return t is not None and t.is_active() and proxy is not None and proxy.process.poll() is None

    def ensure_connected(self) -> bool:
        """Reconnect a dropped transport (the local listeners, and so the IDE's ports, stay).

        True when the tunnel reconnected since the last call, here or because an IDE connection
        needed it; False when nothing changed, or while waiting to retry after a failed attempt
        (attempts are spaced RETRY_FIRST..RETRY_MAX s apart).  Raises what the attempt raised.
        """
        if not self.alive:
            with self._lock:
                if not self.alive and time.monotonic() >= self._retry_at:
                    self._attempt_locked()
        if not self.alive:
            return False
        self._failures, self._retry_at = 0, 0.0
        if self._reverse_pending:
            with self._lock:
                self._restore_reverse_locked()
        news = self.reconnects > self._reported_reconnects
        self._reported_reconnects = self.reconnects
        return news

    # --- liveness -------------------------------------------------------------------------------

    def _watch(self) -> None:
        while not self._closed.wait(KEEPALIVE_INTERVAL):
            transport = self._transport
            if transport is None or not transport.is_active() or self._answers(transport, KEEPALIVE_TIMEOUT):
                continue
            if transport is self._transport and not self._closed.is_set():
                log.warning(
                    "%s: no answer from sshd for %.0f s: dropping the connection",
                    self.endpoint.alias,
                    KEEPALIVE_TIMEOUT,
                )
                self.dead_links += 1
                # Closing kills the relay; alive turns False and the next use or ensure_connected
                # reconnects.  Not under self._lock: a reconnect attempt may hold it for long.
                transport.close()

    def _answers(self, transport: paramiko.Transport, timeout: float) -> bool:
        """Whether sshd answers a global request within ``timeout`` s (or the transport ended anyway)."""
        answered = threading.Event()

        def ask() -> None:
            # paramiko's global_request has no timeout: it waits until an answer or the transport's
            # end, which the watchdog brings about when the answer does not come.
            with self._global_lock, contextlib.suppress(Exception):
                transport.global_request("keepalive@openssh.com", wait=True)
            answered.set()

        threading.Thread(target=ask, daemon=True, name=f"keepalive-probe-{self.endpoint.alias}").start()
        return answered.wait(timeout) or not transport.is_active()

    def _attempt_locked(self) -> None:
        """One connection attempt; a failed one delays the next (RETRY_FIRST..RETRY_MAX s): on
        SageMaker each attempt is a StartSession call."""
        try:
            self._connect_locked()
        except BaseException:
            self._failures += 1
            self._retry_at = time.monotonic() + min(RETRY_MAX, RETRY_FIRST * 2 ** (self._failures - 1))
            raise

    def open_channel(self, remote_port: int, origin: tuple[str, int] = (LOOPBACK, 0)) -> paramiko.Channel:
        """A channel to the node's 127.0.0.1:remote_port (connecting first if the link is down)."""
        with self._lock:
            wait = self._retry_at - time.monotonic()
            if not self.alive and wait > 0:  # an IDE, `stacks` or pause-safe during an outage: no extra attempt
                raise paramiko.SSHException(f"{self.endpoint.alias}: the link is down; next attempt in {wait:.1f} s")
            self._attempt_locked()
            assert self._transport is not None
            transport = self._transport
        return transport.open_channel("direct-tcpip", (LOOPBACK, remote_port), origin, timeout=10)

    def open_sftp(self) -> paramiko.SFTPClient:
        """An SFTP session on this node's connection (connecting first if the link is down): ``sync``
        copies files through it when the node has no rsync.  The caller closes it."""
        with self._lock:
            self._attempt_locked()
            assert self._transport is not None
            transport = self._transport
        client = paramiko.SFTPClient.from_transport(transport)
        if client is None:
            raise paramiko.SSHException(f"{self.endpoint.alias}: sshd refused an sftp session")
        return client

    def probe(self, remote_port: int) -> bool:
        """Whether something listens on the node's 127.0.0.1:remote_port (sshd opens the channel only then).

        Not for debugpy ports: a bare connect+close there can leave its adapter deaf to the next client.
        """
        try:
            chan = self.open_channel(remote_port)
        except (paramiko.ChannelException, paramiko.SSHException, OSError, EOFError):
            return False
        chan.close()
        return True

    # --- forwards -------------------------------------------------------------------------------

    def forward(
        self,
        remote_port: int,
        local_port: int = 0,
        *,
        exclusive: str | None = None,
        on_refuse: Callable[[str], None] | None = None,
        tap: TapHooks | None = None,
    ) -> int:
        """Listen on 127.0.0.1:local_port (0 = any) and forward each connection to the rank's port.

        ``exclusive`` (e.g. "rank 1 of job my-job") makes it a one-debugger forward: while one
        connection is open, another one is answered in DAP with a clear refusal and closed, and
        ``on_refuse`` gets the message.  debugpy itself would accept the second client's
        ``initialize`` and fail only its ``attach`` with "Server[pid=N] is already being debugged."
        (debugpy 1.8), which names neither the rank nor what to do.

        ``tap``: each connection's DAP is carried by a :class:`DapTap` that tells it what passes (the
        attach's all-stop and group actions), not as plain bytes.
        """
        if exclusive is not None:
            self._exclusive[remote_port] = (exclusive, on_refuse)
        if tap is not None:
            self._taps[remote_port] = tap
        existing = self._listeners.get(remote_port)
        if existing is not None:
            return int(existing.getsockname()[1])
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((LOOPBACK, local_port))
        server.listen(8)
        self._listeners[remote_port] = server
        self._targets[server] = remote_port
        threading.Thread(
            target=self._accept_loop,
            args=(server, remote_port),
            daemon=True,
            name=f"fwd-{self.endpoint.alias}-{remote_port}",
        ).start()
        return int(server.getsockname()[1])

    def retarget(self, old_remote: int, new_remote: int) -> bool:
        """The rank behind the forward of ``old_remote`` restarted on ``new_remote`` (``remote-debug run``):
        the same local port serves the new process, so the IDE's configuration stays valid.  False when it
        cannot (no such forward, or ``new_remote`` is another forward's): then forward it afresh."""
        if old_remote == new_remote:
            return old_remote in self._listeners
        server = self._listeners.get(old_remote)
        if server is None or new_remote in self._listeners:
            return False
        del self._listeners[old_remote]
        self._listeners[new_remote] = server
        self._targets[server] = new_remote
        exclusive = self._exclusive.pop(old_remote, None)
        if exclusive is not None:
            self._exclusive[new_remote] = exclusive
        tap = self._taps.pop(old_remote, None)
        if tap is not None:
            self._taps[new_remote] = tap
        return True

    def reverse_forward(self, remote_port: int, handler: ReverseHandler) -> int:
        """Have the node's sshd listen on its 127.0.0.1:remote_port (0 = any) and pass each
        connection to ``handler`` in a thread of its own; returns the node port.  Re-requested
        after a reconnect."""
        with self._lock:
            self._connect_locked()
            assert self._transport is not None
            if remote_port in self._reverse:
                self._reverse[remote_port] = handler
                return remote_port
            with self._global_lock:
                port = self._transport.request_port_forward(LOOPBACK, remote_port, handler=self._dispatch_reverse)
            self._reverse[port] = handler
            return port

    def _dispatch_reverse(self, chan: paramiko.Channel, origin: tuple[str, int], server: tuple[str, int]) -> None:
        # Runs in paramiko's transport thread: hand off at once, a handler may block for long.
        handler = self._reverse.get(server[1])
        if handler is None:
            chan.close()
            return
        threading.Thread(
            target=handler, args=(chan, origin), daemon=True, name=f"rev-{self.endpoint.alias}-{server[1]}"
        ).start()

    def _accept_loop(self, server: socket.socket, remote_port: int) -> None:
        while not self._closed.is_set():
            try:
                client, origin = server.accept()
            except OSError:
                return
            remote_port = self._targets.get(server, remote_port)  # a restarted rank's new port (retarget)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(client, origin, remote_port), daemon=True).start()

    def _serve(self, client: socket.socket, origin: tuple[str, int], remote_port: int) -> None:
        if not self._admit(client, remote_port):
            return
        exclusive = self._exclusive.get(remote_port)
        if exclusive is not None and not self._take_session(remote_port):
            what, on_refuse = exclusive
            message = f"{what} {ALREADY_ATTACHED}"
            if on_refuse is not None:  # first: the log line is there by the time the IDE shows it
                with contextlib.suppress(Exception):  # a callback's bug must not kill the forward
                    on_refuse(message)
            dap_wire.refuse(client, message)
            return
        try:
            try:
                chan = self.open_channel(remote_port, origin)
            except Exception as exc:  # listener not up yet, or the node is unreachable: the client retries
                log.debug("forward to %s:%s failed: %s", self.endpoint.alias, remote_port, exc)
                client.close()
                return
            try:
                tap = self._taps.get(remote_port)
                if tap is not None:
                    DapTap(client, chan, tap).run()
                else:
                    pump(client, chan, chan.sendall, client.sendall)
            except Exception as exc:  # one side went mid-transfer (an IDE quitting, Ctrl-C on attach):
                # the connection is over either way; a thread traceback on the user's terminal is no news
                log.debug("forward to %s:%s ended: %s", self.endpoint.alias, remote_port, exc)
            finally:
                # closing a channel sends a message: on a transport that just dropped (the ProxyCommand
                # gone) that raises, and the forward thread must still end quietly
                with contextlib.suppress(Exception):
                    chan.close()
                client.close()
        finally:
            if exclusive is not None:
                with self._session_lock:
                    self._sessions[remote_port] = 0

    # A debugger that reconnects right after its ``disconnect`` (VS Code's Restart, a script's next session) can
    # come before the previous session's thread has seen the old connection close and let go: it waits this
    # long for that before it is refused as a second debugger (one that stays is refused after the wait).
    SESSION_HANDOVER_SECONDS = 2.5
    SESSION_HANDOVER_POLL = 0.02

    def _take_session(self, remote_port: int) -> bool:
        """Take the one-debugger forward's session; False while another connection keeps it past the handover."""
        deadline = time.monotonic() + self.SESSION_HANDOVER_SECONDS
        while True:
            with self._session_lock:
                if self._sessions.get(remote_port, 0) == 0:
                    self._sessions[remote_port] = 1
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.SESSION_HANDOVER_POLL)

    def _admit(self, client: socket.socket, remote_port: int) -> bool:
        """Whether the connection comes from our own uid (see ``peer_uid``); closes it if not.

        127.0.0.1 keeps other machines out, not other users of this one, and whoever reaches a
        rank's debugpy runs code in the job.  Where the owner of a socket cannot be told, everyone
        is let in: attach said so when it started."""
        if not peer_uid.supported():
            return True
        verdict = peer_uid.peer_verdict(client)
        if verdict.allowed:
            return True
        self.refused_foreign += 1
        message = f"refused a connection to the forward of {self.endpoint.alias} port {remote_port}: {verdict.reason}"
        log.warning("%s", message)
        if self.on_foreign is not None:
            with contextlib.suppress(Exception):  # a callback's bug must not kill the forward
                self.on_foreign(message)
        with contextlib.suppress(OSError):
            client.close()
        return False

    def close(self) -> None:
        self._closed.set()
        self._reverse.clear()
        for server in self._listeners.values():
            with contextlib.suppress(OSError):
                server.close()
        self._listeners.clear()
        with self._lock:
            self._drop_transport_locked()
