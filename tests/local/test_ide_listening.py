"""How the attach knows PyCharm's debug server is back without connecting to it (a connection PyCharm
accepts and that closes without a handshake can end its debug session)."""

from __future__ import annotations

import socket

import pytest

from remote_debug.laptop.connection.reverse import ide_listening


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0"], ids=["loopback", "wildcard"])
def test_a_listener_is_seen_and_never_sees_a_connection(address: str) -> None:
    with socket.socket() as server:
        server.bind((address, 0))
        server.listen(8)
        port = server.getsockname()[1]
        assert ide_listening(port)
        server.setblocking(False)
        with pytest.raises(BlockingIOError):  # the probe made no connection PyCharm would have to accept
            server.accept()


def test_a_closed_port_is_not_listening_even_after_connections_on_it() -> None:
    # SO_REUSEADDR, as Java's ServerSocket (PyCharm's debug server) sets it on Linux and macOS; without it a
    # connection still closing on the port reads as "listening", which costs one needless ask
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            accepted, _ = server.accept()
            accepted.close()  # the server's side closes first: its end waits in TIME_WAIT
    assert not ide_listening(port)
