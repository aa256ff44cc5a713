"""IDE faults, with a real debugpy rank behind a live ``attach``: the IDE vanishes at a breakpoint
(the rank must run on), and a second IDE tries a rank that already has one (it must be told why,
in words the IDE shows)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from remote_debug.laptop.ide.dap_client import DapClient, DapRequestFailedError
from tests.helpers.faults import BeatJob


def test_ide_vanishing_at_a_breakpoint_lets_the_rank_run_on(home: Path, tmp_path: Path) -> None:
    job = BeatJob("ide-gone", tmp_path)
    port = job.start_attach()
    ide = job.ide(port)
    assert ide.wait_stopped(20)["reason"] == "breakpoint"
    ide.close()  # the socket just goes: no "disconnect" request (IDE crashed, laptop lid closed)
    job.wait_beats_advance(10)  # debugpy resumes the paused rank once its client is gone
    result = job.finish()
    assert result.job.status == "Completed"
    assert "finished after" in job.job.logs()


def _raw_initialize(port: int) -> tuple[dict[str, object] | None, bool]:
    """A second IDE's first request, on a bare socket: (the response, whether the peer then closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        body = json.dumps(
            {
                "seq": 1,
                "type": "request",
                "command": "initialize",
                "arguments": {"clientID": "vscode", "adapterID": "debugpy"},
            }
        ).encode()
        sock.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        reader = sock.makefile("rb")
        answer = None
        while answer is None:  # events may come first
            length = 0
            while (line := reader.readline()).strip():
                key, _, value = line.decode().partition(":")
                if key.lower() == "content-length":
                    length = int(value)
            if not length:
                return None, True
            message = json.loads(reader.read(length))
            answer = message if message.get("type") == "response" else None
        sock.settimeout(5)
        try:
            closed = reader.read() == b""  # read to EOF: the forward hangs up after answering
        except TimeoutError:
            closed = False
        return answer, closed


def test_second_ide_on_a_rank_is_refused_clearly(home: Path, tmp_path: Path) -> None:
    job = BeatJob("two-ides", tmp_path)
    port = job.start_attach()
    first = job.ide(port)
    assert first.wait_stopped(20)["reason"] == "breakpoint"

    answer, closed = _raw_initialize(port)
    expected = "rank 0 of job two-ides already has a debugger attached; detach it first"
    # debugpy alone would answer this initialize with success and fail only the later "attach"
    # with "Server[pid=N] is already being debugged."
    assert answer is not None and answer["success"] is False, answer
    assert answer["message"] == expected and answer["command"] == "initialize"
    assert closed
    warnings = [e for e in job.events_named("warning") if e.get("code") == "debugger-refused"]
    assert warnings and warnings[0]["message"] == expected and warnings[0]["rank"] == 0
    # our own client reports the refusal at once, not after retrying until its deadline
    with pytest.raises(DapRequestFailedError, match="already has a debugger attached"):
        DapClient.connect("127.0.0.1", port, timeout=20)

    # the first IDE was not disturbed, and once it detaches the rank is free again
    assert first.threads(5)
    first.disconnect()
    first.close()
    job.wait_beats_advance(10)
    second = job.ide(port)
    assert second.wait_stopped(20)["reason"] == "breakpoint"
    second.disconnect()
    second.close()
    assert job.finish().job.status == "Completed"
