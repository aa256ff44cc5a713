"""A PyCharm rank's way out to the IDE against fake far ends: it must prove a live pydevd server
before calling settrace, and never wait past its window (settrace alone blocks forever when the
tunnel is up and nobody listens behind it)."""

from __future__ import annotations

import contextlib
import itertools
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from remote_debug.container.rank import pycharm_link
from remote_debug.contract.pycharm_spec import Hello
from tests.helpers.hook_runs import free_port

VERSION_LINE = b"501\t1\t1.1\tUNIX\tID\n"
FarEnd = Callable[[socket.socket], None]


@contextlib.contextmanager
def far_end(behaviour: FarEnd) -> Iterator[int]:
    """A listener on a free port that treats each connection with ``behaviour`` (in a thread)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conns.append(conn)
            threading.Thread(target=behaviour, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        server.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()


def close_at_once(conn: socket.socket) -> None:  # ssh -R with nothing behind it
    conn.close()


def silent(conn: socket.socket) -> None:
    time.sleep(30)


def refusing_forwarder(conn: socket.socket) -> None:
    conn.sendall(Hello(ok=False, error="nothing listens on the laptop's 127.0.0.1:1").encode())
    conn.close()


def forwarder_then_ide(conn: socket.socket) -> None:
    conn.sendall(Hello(ok=True, ide_root="/ide/project", build="263.7307.50").encode() + VERSION_LINE)
    time.sleep(30)


def forwarder_in_pieces(conn: socket.socket) -> None:
    line = Hello(ok=True, ide_root="/ide/project").encode()
    conn.sendall(line[:30])  # past the prefix, short of the newline: the rank must wait for the rest
    time.sleep(0.3)
    conn.sendall(line[30:] + VERSION_LINE)
    time.sleep(30)


def plain_ide(conn: socket.socket) -> None:
    conn.sendall(VERSION_LINE)
    time.sleep(30)


def not_pydevd(conn: socket.socket) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
    time.sleep(30)


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (close_at_once, "nothing answered on the laptop"),
        (silent, "nothing answered through the tunnel in time"),
        (refusing_forwarder, "nothing listens on the laptop's 127.0.0.1:1"),
        (not_pydevd, "does not speak pydevd"),
    ],
    ids=["eof", "silence", "forwarder-says-no-ide", "not-pydevd"],
)
def test_no_debugger_is_detected_within_the_deadline(
    behaviour: FarEnd, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pycharm_link, "HANDSHAKE_GRACE", 0.3)
    with far_end(behaviour) as port:
        started = time.monotonic()
        with pytest.raises(pycharm_link.NoDebugger, match=reason):
            pycharm_link.connect(port, time.monotonic() + 1.0)
        assert time.monotonic() - started < 5


def test_refused_port_means_no_tunnel() -> None:
    with pytest.raises(pycharm_link.NoDebugger, match="no tunnel"):
        pycharm_link.connect(free_port(), time.monotonic() + 1)


@pytest.mark.parametrize(
    "behaviour", [forwarder_then_ide, forwarder_in_pieces, plain_ide], ids=["our-forwarder", "in-pieces", "plain-ssh-R"]
)
def test_live_ide_is_proven_and_its_first_command_left_for_pydevd(behaviour: FarEnd) -> None:
    with far_end(behaviour) as port:
        conn = pycharm_link.connect(port, time.monotonic() + 5)
        try:
            if behaviour is not plain_ide:
                assert conn.hello is not None and conn.hello.ide_root == "/ide/project"
            else:
                assert conn.hello is None
            conn.sock.settimeout(5)
            assert conn.sock.recv(len(VERSION_LINE), socket.MSG_WAITALL) == VERSION_LINE  # pydevd reads it
        finally:
            conn.sock.close()


def test_retries_until_the_tunnel_appears_and_gives_up_at_the_deadline() -> None:
    port = free_port()
    holder: list[contextlib.ExitStack] = []

    def later() -> None:
        time.sleep(1.0)
        stack = contextlib.ExitStack()
        stack.enter_context(far_end_on(port, plain_ide))
        holder.append(stack)

    threading.Thread(target=later, daemon=True).start()
    try:
        conn, reason = pycharm_link.connect_within(port, time.monotonic() + 10)
        assert conn is not None, reason
        conn.sock.close()
    finally:
        for stack in holder:
            stack.close()
    started = time.monotonic()
    conn, reason = pycharm_link.connect_within(free_port(), time.monotonic() + 1.5)
    assert conn is None and "no tunnel" in reason
    assert time.monotonic() - started < 3


@contextlib.contextmanager
def far_end_on(port: int, behaviour: FarEnd) -> Iterator[int]:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(8)

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            behaviour(conn)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield port
    finally:
        server.close()


def test_a_free_node_port_is_one_no_outgoing_connection_can_take() -> None:
    # The laptop's sshd listens on the port a moment after the rank chose it: a port from the ephemeral
    # range could meanwhile become the local end of one of the ranks' own connections (gloo's), and the
    # reverse forward was denied in a loaded 2-node PyCharm run.
    from remote_debug.container.rank.reporter import RankIdentity
    from remote_debug.contract.spec import DebugSpec
    from tests.test_spec import KEY, SECRET

    floor = pycharm_link._ephemeral_floor()
    identity = RankIdentity(rank=0, local_rank=0, world_size=1)
    debug = DebugSpec(job_name="j", client_public_key=KEY, job_secret=SECRET)  # no port base: a free port
    ports = {pycharm_link.node_port(debug, identity) for _ in range(20)}
    assert all(port < floor for port in ports), (ports, floor)
    assert len(ports) > 1  # random, not one fixed number every rank of a node would share
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # and free when chosen


def test_a_taken_low_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        # the taken port first, then the ports above it: under load a neighbour may be taken too (a CI run
        # had busy + 1 in use), so the function may skip more than one before it finds a free one
        choices = itertools.chain([busy], range(busy + 1, 65535), range(1024, busy))
        monkeypatch.setattr(random.SystemRandom, "randint", lambda self, a, b: next(choices))
        monkeypatch.setattr(pycharm_link, "_ephemeral_floor", lambda: 65535)
        monkeypatch.setattr(pycharm_link, "_LOW_PORTS", (1024, 65534))
        assert pycharm_link._free_port_below_ephemeral() != busy
