"""The socket through which ``remote-debug ranks`` drives a running attach: our uid only, and a dead attach's
leftover never trusted."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.laptop.attach import group_socket
from remote_debug.laptop.attach.rank_group import RankGroup
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.wire.documents import GroupAction
from tests.helpers.event_log import EventLog
from tests.helpers.second_user import needs_second_user, python_as_nobody

Served = tuple[group_socket.GroupServer, EventLog, StatePaths]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Served]:
    paths = StatePaths(tmp_path / ("a-state-dir-deep-enough-that-its-socket-path-would-be-over-107-bytes" * 2))
    paths.root.mkdir(parents=True)
    log = EventLog()
    srv = group_socket.GroupServer(RankGroup(log.append, all_stop=True), paths, "job-1")
    srv.start()
    yield srv, log, paths
    srv.close()


def test_a_command_reaches_the_running_attach_even_from_a_deep_state_dir(server: Served) -> None:
    srv, log, paths = server
    assert len(str(srv.folder / srv.name)) > 107  # the /proc/self/fd path is what makes it bindable
    reply = group_socket.ask(paths, "job-1", "pause")
    assert reply.attaches == 1 and reply.ranks == [] and reply.status == []
    assert log[-1]["event"] == "group-action" and log[-1]["action"] == GroupAction.PAUSE
    assert (srv.folder / srv.name).stat().st_mode & 0o077 == 0  # ours alone (the folder is 0700 too)


def test_no_attach_is_one_line_and_a_dead_attachs_socket_is_removed(
    server: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, _log, paths = server
    srv.close()
    # a killed attach leaves its socket file: nobody answers there
    dead = socket.socket(socket.AF_UNIX)
    stale = srv.folder / f"{group_socket._prefix('job-1')}.999999.sock"
    monkeypatch.chdir(srv.folder)  # a relative name: the folder's path is too long for a socket
    dead.bind(stale.name)
    dead.close()
    with pytest.raises(UserError, match="no attach to job job-1 is running"):
        group_socket.ask(paths, "job-1", "status")
    assert not stale.exists()


@needs_second_user
def test_another_user_cannot_drive_the_attach_even_through_a_loosened_folder() -> None:
    base = Path(tempfile.mkdtemp(prefix="rd-group-socket-", dir="/tmp"))
    srv: group_socket.GroupServer | None = None
    try:
        os.chmod(base, 0o755)
        paths = StatePaths(base / "state")
        paths.root.mkdir()
        log = EventLog()
        srv = group_socket.GroupServer(RankGroup(log.append, all_stop=True), paths, "job-1")
        srv.start()
        # the folder is 0700: loosen it (as a careless chmod would) so that only the peer check stands between
        # the other user and the socket
        for loosened in (paths.root, srv.folder):
            os.chmod(loosened, 0o777)
        os.chmod(srv.folder / srv.name, 0o666)
        code = (
            "import os, socket, sys\n"
            "os.chdir(sys.argv[1])\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "s.connect(sys.argv[2])\n"
            "try:\n"
            '    s.sendall(b\'{"action": "pause"}\\n\')\n'
            "    print(repr(s.recv(100)))\n"
            "except (ConnectionResetError, BrokenPipeError):\n"
            "    print(repr(b''))\n"
        )
        out = subprocess.run(
            python_as_nobody(code, str(srv.folder), srv.name), capture_output=True, text=True, timeout=30
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "b''"  # closed (or reset) without an answer
        assert not [e for e in log if e["event"] == "group-action"]  # and nothing was done
        assert group_socket.ask(paths, "job-1", "status").attaches == 1  # while we are answered
    finally:
        if srv is not None:
            srv.close()
        shutil.rmtree(base)
