"""The DAP tap: framing in arbitrary pieces, the IDE's bytes unchanged, our requests' answers kept from the IDE."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from remote_debug.contract import dap_wire
from remote_debug.laptop.connection.dap_tap import INJECTED_SEQ, DapTap, FrameSplitter


def test_frames_split_across_reads_and_glued_together() -> None:
    a, b = dap_wire.encode({"seq": 1, "type": "request", "command": "x"}), dap_wire.encode({"seq": 2, "type": "event"})
    splitter = FrameSplitter()
    stream = a + b
    got: list[tuple[bytes, dict[str, Any]]] = []
    for i in range(0, len(stream), 7):  # seven bytes at a time
        got += splitter.feed(stream[i : i + 7])
    assert [raw for raw, _ in got] == [a, b]
    assert [m["seq"] for _, m in got] == [1, 2]


@pytest.mark.parametrize("data", [b"Content-Length: 99999999999\r\n\r\n", b"X" * 5000, b"Content-Length: 2\r\n\r\n[]"])
def test_a_peer_that_speaks_no_dap_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        FrameSplitter(max_body=1 << 20).feed(data)


class Hooks:
    def __init__(self) -> None:
        self.from_ide_seen: list[dict[str, Any]] = []
        self.session: DapTap | None = None
        self.ended = threading.Event()

    def opened(self, session: DapTap) -> None:
        self.session = session

    def from_ide(self, session: DapTap, message: dict[str, Any]) -> None:
        self.from_ide_seen.append(message)

    def from_rank(self, session: DapTap, message: dict[str, Any]) -> dict[str, Any] | None:
        if message.get("event") == "hidden":
            return None
        if message.get("event") == "stopped":
            return {**message, "body": {"description": "rewritten"}}
        return message

    def closed(self, session: DapTap) -> None:
        self.ended.set()


def _read(sock: socket.socket) -> dict[str, Any]:
    with sock.makefile("rb") as reader:
        message = dap_wire.read_message(reader)
    assert message is not None
    return message


def test_the_tap_carries_both_ways_and_keeps_our_answers_from_the_ide() -> None:
    ide, ide_end = socket.socketpair()
    rank, rank_end = socket.socketpair()
    hooks = Hooks()
    tap = DapTap(ide_end, rank_end, hooks)  # type: ignore[arg-type]  # a socket plays the paramiko channel
    pump = threading.Thread(target=tap.run, daemon=True)
    pump.start()
    try:
        request = dap_wire.encode({"seq": 1, "type": "request", "command": "threads"})
        ide.sendall(request)
        assert rank.recv(len(request), socket.MSG_WAITALL) == request  # the same bytes
        answers: list[dict[str, Any]] = []
        assert hooks.session is not None
        seq = hooks.session.request("pause", {"threadId": "*"}, answers.append)
        assert seq >= INJECTED_SEQ and _read(rank)["command"] == "pause"
        rank.sendall(dap_wire.encode({"type": "response", "request_seq": seq, "command": "pause", "success": True}))
        rank.sendall(dap_wire.encode({"type": "event", "event": "hidden"}))
        rank.sendall(dap_wire.encode({"type": "event", "event": "stopped", "body": {"reason": "pause"}}))
        # the IDE sees neither our answer nor the hidden event: the rewritten stop comes first
        assert _read(ide)["body"] == {"description": "rewritten"}
        assert answers and answers[0]["request_seq"] == seq
        assert [m["command"] for m in hooks.from_ide_seen] == ["threads"]
    finally:
        ide.close()
        pump.join(5)
        for sock in (rank, ide_end, rank_end):
            sock.close()
    assert hooks.ended.is_set()
