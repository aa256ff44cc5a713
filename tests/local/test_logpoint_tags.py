"""Logpoints through a rank's forward: the IDE's logpoint messages marked on their way to the rank, their hits tagged
``[rank N]`` (with the logpoint's source and line) on their way back, every other message the same bytes."""

from __future__ import annotations

import socket
import threading
from typing import Any

from remote_debug.contract import dap_wire
from remote_debug.laptop.attach.rank_group import RankGroup
from remote_debug.laptop.connection.dap_tap import DapTap
from remote_debug.laptop.connection.logpoint_tags import LOGPOINT_KEY, MARK, LogpointTags
from remote_debug.laptop.wire import events
from tests.local.test_dap_tap import _read

SOURCE = {"path": "/ws/train.py", "name": "train.py"}


def _set(*breakpoints: dict[str, Any]) -> dict[str, Any]:
    arguments = {"source": SOURCE, "breakpoints": list(breakpoints)}
    return {"seq": 4, "type": "request", "command": "setBreakpoints", "arguments": arguments}


def _output(text: str, category: str = "stdout") -> dict[str, Any]:
    return {"seq": 9, "type": "event", "event": "output", "body": {"category": category, "output": text}}


def test_a_logpoint_hit_comes_back_tagged_with_its_rank_and_place() -> None:
    tags = LogpointTags(rank=2)
    sent = tags.request(_set({"line": 3}, {"line": 7, "logMessage": "loss={loss}"}))
    assert sent is not None
    plain, logpoint = sent["arguments"]["breakpoints"]
    assert plain == {"line": 3}  # a breakpoint as it was
    assert logpoint["logMessage"].endswith("loss={loss}") and logpoint["logMessage"].startswith(MARK)
    # pydevd prints the evaluated message (our mark included) as an output event
    hit = tags.output(_output(logpoint["logMessage"].replace("{loss}", "0.31") + "\n"))
    assert hit is not None
    assert hit["body"] == {
        "category": "stdout",
        "output": "[rank 2] loss=0.31\n",
        "source": SOURCE,
        "line": 7,
        LOGPOINT_KEY: True,
    }
    # the same logpoint sent again keeps its id; the rank's own prints are not touched
    again = tags.request(_set({"line": 7, "logMessage": "loss={loss}"}))
    assert again is not None and again["arguments"]["breakpoints"][0]["logMessage"] == logpoint["logMessage"]
    assert tags.output(_output("[rank 2] loss=0.5\n")) is None
    assert tags.output(_output(f"{MARK}99{MARK}unknown id\n")) is None
    assert tags.request(_set({"line": 3})) is None and tags.request({"type": "request", "command": "threads"}) is None


def test_through_a_ranks_forward_only_logpoints_change() -> None:
    ide, ide_end = socket.socketpair()
    rank, rank_end = socket.socketpair()
    group = RankGroup(events.ignore, all_stop=False)
    tap = DapTap(ide_end, rank_end, group.hooks(5))  # type: ignore[arg-type]  # a socket plays the paramiko channel
    pump = threading.Thread(target=tap.run, daemon=True)
    pump.start()
    try:
        threads = dap_wire.encode({"seq": 1, "type": "request", "command": "threads"})
        ide.sendall(threads)
        assert rank.recv(len(threads), socket.MSG_WAITALL) == threads  # the same bytes
        ide.sendall(dap_wire.encode(_set({"line": 7, "logMessage": "step {step}"})))
        marked = _read(rank)["arguments"]["breakpoints"][0]["logMessage"]
        assert marked.startswith(MARK) and marked.endswith("step {step}")

        printed = dap_wire.encode(_output("epoch 1\n"))
        rank.sendall(printed)
        assert ide.recv(len(printed), socket.MSG_WAITALL) == printed  # a print: the same bytes
        rank.sendall(dap_wire.encode(_output(marked.replace("{step}", "3") + "\n")))
        hit = _read(ide)["body"]
        assert hit["output"] == "[rank 5] step 3\n" and hit["line"] == 7 and hit[LOGPOINT_KEY] is True
    finally:
        ide.close()
        rank.close()
        pump.join(5)
        group.close()
