"""peer_uid tells which local user opened a loopback connection, by both of its sources (sock_diag
netlink and /proc/net/tcp{,6}), for IPv4 and IPv4-mapped IPv6 clients, and refuses what it cannot tell."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.oskit import peer_uid
from tests.helpers.second_user import ATTACKER_PYTHON, as_nobody, needs_second_user, nobody

# Connects to the port over IPv4 or over IPv6 (v4-mapped), says so, and waits for stdin to close.
CLIENT = (
    "import socket, sys\n"
    "family = socket.AF_INET6 if sys.argv[2] == '6' else socket.AF_INET\n"
    "host = '::ffff:127.0.0.1' if sys.argv[2] == '6' else '127.0.0.1'\n"
    "s = socket.socket(family); s.connect((host, int(sys.argv[1])))\n"
    "print('connected', flush=True); sys.stdin.read()\n"
)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server
    finally:
        server.close()


def _connect_as(
    uid: int | None, port: int, family: str, listener: socket.socket
) -> tuple[subprocess.Popen[str], socket.socket]:
    prefix = [] if uid is None else as_nobody()
    proc = subprocess.Popen(
        [*prefix, ATTACKER_PYTHON, "-I", "-S", "-c", CLIENT, str(port), family],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "connected"
    conn, _ = listener.accept()
    return proc, conn


@pytest.mark.parametrize("source", ["netlink", "proc"])
@pytest.mark.parametrize("family", ["4", "6"])
@needs_second_user
def test_the_owner_of_the_peer_socket(
    listener: socket.socket, source: str, family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if source == "proc":
        monkeypatch.setattr(peer_uid, "_diag_owner", _no_netlink)
    stranger = nobody().pw_uid
    for uid, expected in ((stranger, stranger), (None, os.geteuid())):
        proc, conn = _connect_as(uid, listener.getsockname()[1], family, listener)
        try:
            verdict = peer_uid.peer_verdict(conn)
            assert verdict.uid == expected
            assert verdict.allowed == (expected == os.geteuid())
            if not verdict.allowed:
                assert f"belongs to uid {stranger}" in verdict.reason
        finally:
            conn.close()
            proc.communicate(timeout=10)


def _no_netlink(*_args: object) -> int | None:
    raise OSError("no sock_diag here")


@pytest.mark.parametrize("source", ["netlink", "proc"])
def test_a_client_that_sent_and_closed_is_refused(
    listener: socket.socket, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Send a request and close at once: the client's socket lingers (FIN_WAIT/TIME_WAIT) without an
    owner, reported as uid 0 - which must not pass for root's (this test may run as root)."""
    if source == "proc":
        monkeypatch.setattr(peer_uid, "_diag_owner", _no_netlink)
    client = socket.create_connection(listener.getsockname())
    client.sendall(b'{"op": "listen"}\n')
    client.close()
    conn, _ = listener.accept()
    try:
        assert conn.recv(100)  # the request waits in our buffer
        verdict = peer_uid.peer_verdict(conn)
        assert not verdict.allowed and verdict.uid is None, verdict
    finally:
        conn.close()


def test_without_any_source_the_platform_is_unsupported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert peer_uid.supported()  # this machine: Linux
    monkeypatch.delattr(socket, "AF_NETLINK")
    assert not peer_uid.supported(tmp_path)
    assert peer_uid.supported(Path("/proc/net"))
