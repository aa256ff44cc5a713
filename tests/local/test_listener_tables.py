"""The port guard of a local job's ranks reads each network namespace's listening sockets once for many ranks
(``rank_control.ListenerTables``), yet sees a listener that has just started and forgets one that is gone."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from remote_debug.laptop.connection import rank_control
from remote_debug.oskit import peer_uid


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times the tables were read (each read is ~2 ms of the kernel walking every socket)."""
    counted: list[int] = []
    real = peer_uid.listening_table

    def counting(*args: object, **kwargs: object) -> dict[int, set[int]]:
        counted.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(peer_uid, "listening_table", counting)
    yield counted


def listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def test_many_ports_of_one_namespace_cost_one_read(reads: list[int]) -> None:
    servers = [listener() for _ in range(8)]
    try:
        tables = rank_control.ListenerTables()
        for server in servers:
            assert tables.owners(os.getpid(), server.getsockname()[1]) == {os.geteuid()}
        assert len(reads) == 1
        # a listener started after the table was read (a rank's debug port after `listen`) is read afresh
        late = listener()
        try:
            assert tables.owners(os.getpid(), late.getsockname()[1]) == {os.geteuid()}
            assert len(reads) == 2
        finally:
            late.close()
    finally:
        for server in servers:
            server.close()


def test_a_closed_listener_is_forgotten_after_the_ttl(reads: list[int]) -> None:
    tables = rank_control.ListenerTables()
    tables.TTL = 0.05
    server = listener()
    port = server.getsockname()[1]
    assert tables.owners(os.getpid(), port) == {os.geteuid()}
    server.close()
    time.sleep(0.1)
    assert tables.owners(os.getpid(), port) == set()
    assert len(reads) == 1 + peer_uid.PROC_READS  # not found: read again, as often as listener_owners would
