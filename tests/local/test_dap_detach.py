"""A headless session that detaches leaves the rank's debug adapter able to take the next debugger.

debugpy's adapter answers ``disconnect`` with a ``terminated`` event, then the response.  A client that
closed its socket on ``terminated`` (or sent a second ``disconnect`` then) made the adapter's handler
raise NoMoreMessages, which ended the adapter: every later attach to that rank (the IDE's F5 after a
headless attach detached) hit a closed port.  A scripted adapter checks the client waits politely.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from remote_debug.contract import dap_wire
from remote_debug.laptop.ide.dap_client import DapClient

# how long the scripted adapter waits between `terminated` and the disconnect response (debugpy: ~1 ms;
# long enough here that a client closing on `terminated` is seen to)
GAP_S = 0.3


class ScriptedAdapter:
    """Answers initialize; on disconnect: `terminated`, a pause, then the response."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.requests: list[str] = []
        self.closed_before_response: bool | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn, conn.makefile("rb") as reader:
            seq = 0

            def send(message: dict[str, Any]) -> None:
                nonlocal seq
                seq += 1
                conn.sendall(dap_wire.encode({**message, "seq": seq}))

            while True:
                request = dap_wire.read_message(reader)
                if request is None:
                    return
                self.requests.append(str(request["command"]))
                if request["command"] == "disconnect" and self.closed_before_response is None:
                    send({"type": "event", "event": "terminated", "body": {}})
                    time.sleep(GAP_S)
                    conn.setblocking(False)
                    try:
                        self.closed_before_response = conn.recv(1, socket.MSG_PEEK) == b""
                    except BlockingIOError:
                        self.closed_before_response = False  # still open, nothing sent meanwhile
                    except OSError:
                        self.closed_before_response = True
                    conn.setblocking(True)
                response = {
                    "type": "response",
                    "request_seq": request["seq"],
                    "success": True,
                    "command": request["command"],
                    "body": {},
                }
                try:
                    send(response)
                except OSError:
                    return

    def close(self) -> None:
        self.server.close()
        self.thread.join(5)


@pytest.fixture
def adapter() -> Iterator[ScriptedAdapter]:
    scripted = ScriptedAdapter()
    try:
        yield scripted
    finally:
        scripted.close()


def test_disconnect_waits_for_its_response_and_is_sent_once(adapter: ScriptedAdapter) -> None:
    client = DapClient.connect("127.0.0.1", adapter.port, timeout=10)
    try:
        client.disconnect(timeout=10)
    finally:
        client.close()
    adapter.thread.join(5)
    assert adapter.closed_before_response is False, "the client went before the adapter's response"
    assert adapter.requests == ["initialize", "disconnect"]
