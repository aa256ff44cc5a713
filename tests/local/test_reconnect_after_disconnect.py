"""A debugger that reconnects right after a clean disconnect gets in (VS Code's Restart; ``python -m bench``'s P5,
which debugs through the forward and then straight on the rank's port): the previous session is still being torn
down when it comes - the forward's thread has not let go yet, the node's sshd has not closed the rank's end - and
that must not read as "already has a debugger attached".  A second debugger while the first one stays is still
refused (tests/local/test_ide_faults.py, tests/container/test_dap_server.py)."""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from remote_debug.contract.spec import LOOPBACK
from remote_debug.laptop.connection.tunnels import NodeTunnel
from remote_debug.laptop.ide.dap_client import DapClient, attach_and_configure
from tests.helpers.faults import BEAT_LINE, BeatJob

TEARDOWN_SECONDS = 0.5  # how long ending a debug session's SSH channel takes here (a loaded laptop, a slow link)


@pytest.fixture
def slow_teardown(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[int]]:
    """Ending a debug session through a forward takes TEARDOWN_SECONDS: closing the SSH channel to one of the
    node ports the test puts in the set.  The forward lets go of its session, and the node's sshd closes the
    rank's end, only after that - as on a loaded machine, where this race was seen."""
    slow_ports: set[int] = set()
    slow_channels: weakref.WeakSet[paramiko.Channel] = weakref.WeakSet()
    open_channel, close = NodeTunnel.open_channel, paramiko.Channel.close

    def opening(self: NodeTunnel, remote_port: int, origin: tuple[str, int] = (LOOPBACK, 0)) -> paramiko.Channel:
        chan = open_channel(self, remote_port, origin)
        if remote_port in slow_ports:
            slow_channels.add(chan)
        return chan

    def closing(self: paramiko.Channel) -> None:
        if self in slow_channels:
            slow_channels.discard(self)
            time.sleep(TEARDOWN_SECONDS)
        close(self)

    monkeypatch.setattr(NodeTunnel, "open_channel", opening)
    monkeypatch.setattr(paramiko.Channel, "close", closing)
    yield slow_ports


def _stopped_then_disconnected(job: BeatJob, client: DapClient) -> None:
    """The session stops at the heartbeat's breakpoint, then ends as an IDE ends it: ``disconnect``, close."""
    try:
        stopped = client.wait_stopped(20)
        assert stopped["reason"] == "breakpoint"
        frame = client.stack_trace(stopped["threadId"], levels=1)[0]
        assert frame["line"] == BEAT_LINE
    finally:
        client.disconnect()
        client.close()
    job.wait_beats_advance(10)  # the disconnect let the rank run on


def test_a_debugger_reconnecting_at_once_after_its_disconnect_gets_in(
    home: Path, tmp_path: Path, slow_teardown: set[int]
) -> None:
    del home
    job = BeatJob("restart", tmp_path)
    port = job.start_attach()
    forward = job.attacher.forwards[0]
    slow_teardown.add(forward.remote_port)

    # VS Code's Restart: disconnect, and the next session at once through the same forward
    for _ in range(2):
        _stopped_then_disconnected(job, job.ide(port))
    # P5's way: through the forward, then straight on the rank's own port (a node-local debugger)
    direct = attach_and_configure(
        "127.0.0.1",
        forward.remote_port,
        path_mappings=[(str(job.project), forward.code_dir)],
        breakpoints={str(job.script): [BEAT_LINE]},
        timeout=30,
    )
    _stopped_then_disconnected(job, direct)

    refused = [e for e in job.events_named("warning") if e.get("code") == "debugger-refused"]
    assert not refused, refused
    assert job.finish().job.status == "Completed"
