"""A PyCharm rank's way out to the IDE: a connection to its node port, proven to reach a live pydevd server.

With debugpy a rank listens and the IDE connects in; PyCharm's "Python Debug Server" is the other
way round: the rank connects to a port on its node's loopback (published in its rank document),
which the laptop's SSH connection reverse-forwards to the port PyCharm listens on.

The hazard (measured): with the reverse tunnel up but nothing listening in the IDE, ``settrace``
blocks forever - sshd accepts the connection, the far end closes it, and pydevd spins waiting for
the IDE's "run" command that never comes.  So nothing calls ``settrace`` on an unproven path:

1. connect to the node port ourselves, retrying within a window (the laptop may set the tunnel
   up, and the user start PyCharm's debug server, while the rank tries);
2. prove the far end is a live pydevd server: our laptop forwarder writes a hello line first
   (``pycharm_spec.Hello``: IDE reachable?  project root?  build?), then the IDE's own first
   command arrives (PyCharm's handshake sends CMD_VERSION as soon as it accepts).  EOF, a
   "not ok" hello, or silence until the deadline mean: no debugger, run on;
3. only then may ``pycharm_rank`` call ``settrace``, on that very socket.

Stdlib only.
"""

from __future__ import annotations

import random
import re
import socket
import threading
import time
from dataclasses import dataclass

from remote_debug.container.log import describe
from remote_debug.container.rank.reporter import RankIdentity
from remote_debug.contract.pycharm_spec import HELLO_MAX_BYTES, HELLO_PREFIX, Hello
from remote_debug.contract.spec import LOOPBACK, ContractError, DebugSpec, check_port

RETRY_REFUSED = 0.5  # no tunnel on the node port yet: cheap to retry (a refused connect on loopback)
RETRY_NO_IDE = 1.0  # tunnel up, IDE not answering: each try costs an SSH channel and a laptop connect
HANDSHAKE_GRACE = 3.0  # a connection made just before the window closes still gets this long to answer
# The IDE's first bytes on a pydevd connection: a command id and a tab ("501\t1\t1.1\tUNIX\tID").
_PYDEVD_LINE = re.compile(rb"^\d{3}\t")


@dataclass
class Connection:
    sock: socket.socket
    hello: Hello | None  # None: the far end is a plain `ssh -R`, not our forwarder


class NoDebugger(Exception):
    """This attempt found no debugger behind the node port (the message says why, one line)."""


def node_port(spec: DebugSpec, identity: RankIdentity) -> int:
    """The node-loopback port this rank connects to: ``port_base + local_rank``, or a free port.

    A free port is only free when we look; the laptop asks the node's sshd to listen on it a
    moment later.  Losing that race shows up on the laptop as a failed forward for this rank.
    """
    if spec.port_base:
        return check_port(spec.port_base + identity.local_rank, f"PyCharm port for local rank {identity.local_rank}")
    return _free_port_below_ephemeral()


# Below the kernel's ephemeral range, a port we found free can only be taken by a program that binds it by
# number: the kernel never hands it to bind(0) or to an outgoing connect.  With bind(0) a rank's own peers
# (gloo opens a connection per peer, each from an ephemeral port) took the port in the moment before the
# laptop's sshd could listen on it: "TCP forwarding request denied" in a loaded 2-node run.
_LOW_PORTS = (20000, 32767)
_LOW_PORT_TRIES = 32


def _ephemeral_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts here


def _free_port_below_ephemeral() -> int:
    low, high = _LOW_PORTS[0], min(_LOW_PORTS[1], _ephemeral_floor() - 1)
    rng = random.SystemRandom()  # (two ranks of a node must not walk the same sequence)
    for _ in range(_LOW_PORT_TRIES if high - low >= 1000 else 0):
        port = rng.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a tuned range leaves no room below it: any free port
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


# --- proving the path ----------------------------------------------------------------------------


def _recv_peek(sock: socket.socket, deadline: float, enough: int) -> bytes:
    """Peek (without consuming) until ``enough`` bytes or a newline are buffered, EOF, or deadline."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        data = sock.recv(HELLO_MAX_BYTES, socket.MSG_PEEK)
        if not data or len(data) >= enough or b"\n" in data:
            return data
        time.sleep(0.01)  # a partial line is buffered: MSG_PEEK would return at once, so pace the loop


def _read_exact(sock: socket.socket, count: int) -> bytes:
    out = b""
    while len(out) < count:
        chunk = sock.recv(count - len(out))
        if not chunk:
            raise NoDebugger("the tunnel closed during the hello")
        out += chunk
    return out


def _await_ide(sock: socket.socket, deadline: float) -> Hello | None:
    """Consume our forwarder's hello (if any) and wait for the IDE's first command (left unread)."""
    try:
        data = _recv_peek(sock, deadline, len(HELLO_PREFIX))
    except TimeoutError:
        raise NoDebugger("connected, but nothing answered through the tunnel in time") from None
    if not data:
        raise NoDebugger("the tunnel is up but nothing answered on the laptop (is PyCharm's debug server running?)")
    hello: Hello | None = None
    if data.startswith(HELLO_PREFIX):
        try:  # the rest of the line may still be on its way
            data = _recv_peek(sock, deadline, HELLO_MAX_BYTES)
        except TimeoutError:
            raise NoDebugger("the laptop's hello did not arrive in time") from None
        end = data.find(b"\n")
        if end < 0:
            raise NoDebugger("malformed hello from the laptop")
        try:
            hello = Hello.decode(_read_exact(sock, end + 1))
        except ContractError as exc:
            raise NoDebugger(str(exc)) from None
        if not hello.ok:
            raise NoDebugger(hello.error or "the laptop reports no debugger")
        try:
            data = _recv_peek(sock, deadline, 4)
        except TimeoutError:
            raise NoDebugger("the IDE accepted the connection but did not start the pydevd handshake") from None
        if not data:
            raise NoDebugger("the IDE closed the connection right away")
    if not _PYDEVD_LINE.match(data):
        raise NoDebugger("the far end of the tunnel does not speak pydevd's protocol")
    return hello


def connect(port: int, deadline: float) -> Connection:
    """One attempt: a connection whose far end is proven to be a pydevd debug server."""
    remaining = deadline - time.monotonic()
    try:
        sock = socket.create_connection((LOOPBACK, port), timeout=max(0.5, min(5.0, remaining)))
    except ConnectionRefusedError:
        raise NoDebugger(f"no tunnel on localhost:{port} (run 'remote-debug attach JOB --ide pycharm')") from None
    except OSError as exc:
        raise NoDebugger(f"cannot connect to localhost:{port}: {describe(exc)}") from None
    try:
        # pydevd sends one small message per event: without this each waits for the previous ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        hello = _await_ide(sock, max(deadline, time.monotonic() + HANDSHAKE_GRACE))
    except OSError as exc:  # reset while waiting: the same as EOF
        sock.close()
        raise NoDebugger(f"the tunnel failed: {describe(exc)}") from None
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)  # pydevd's reader blocks on recv
    return Connection(sock, hello)


def connect_within(port: int, deadline: float, stop: threading.Event | None = None) -> tuple[Connection | None, str]:
    """Try until ``deadline`` (at least once) or until ``stop`` is set; returns the connection or the
    last reason for none."""
    while True:
        try:
            return connect(port, deadline), ""
        except NoDebugger as exc:
            reason = str(exc)
        pause = RETRY_REFUSED if reason.startswith("no tunnel") else RETRY_NO_IDE
        if time.monotonic() + pause >= deadline:
            return None, reason
        if stop is None:
            time.sleep(pause)
        elif stop.wait(pause):
            return None, reason
