"""The uid gate on debugpy's sockets, piece by piece (the live session in tests/security/test_other_users.py
plays the whole attack): a gated listener hands over only our own connections, and pydevd refuses an
"adapter" that another user accepted it on."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from remote_debug.container.rank import debugpy_gate
from remote_debug.contract import spec
from tests.helpers.hook_runs import PYTHON, HookRun, MiniDap, probe_and_reset, wait_for
from tests.helpers.second_user import needs_second_user, python_as_nobody


def _as_nobody(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        python_as_nobody(code, *args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/"
    )


@pytest.fixture
def stranger_listener() -> Iterator[int]:
    """A port that nobody listens on (and never accepts)."""
    proc = _as_nobody(
        "import socket, sys\ns = socket.create_server(('127.0.0.1', 0))\n"
        "print(s.getsockname()[1], flush=True)\nsys.stdin.read()\n"
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.communicate(timeout=10)


@needs_second_user
def test_a_gated_listener_skips_a_strangers_connection() -> None:
    listener = debugpy_gate.gate(socket.create_server(("127.0.0.1", 0)))
    port = listener.getsockname()[1]
    stranger = _as_nobody(
        "import socket, sys\ns = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
        "s.sendall(b'initialize')\nprint('sent', flush=True)\n"
        "try:\n    print(s.recv(10) or 'closed', flush=True)\n"
        "except OSError:\n    print('closed', flush=True)\n",
        str(port),
    )
    try:
        assert stranger.stdout is not None and stranger.stdout.readline().strip() == "sent"
        ours = socket.create_connection(("127.0.0.1", port))
        listener.settimeout(10)
        conn, _ = listener.accept()  # the stranger's came first: closed, and ours returned
        assert conn.getpeername() == ours.getsockname()
        assert stranger.stdout.readline().strip() == "closed"  # without an answer
        conn.close()
        ours.close()
    finally:
        stranger.kill()
        stranger.wait(10)
        listener.close()


@needs_second_user
def test_pydevd_refuses_an_adapter_another_user_accepted_it_on(stranger_listener: int) -> None:
    def connect(port: int) -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=5)

    checked = debugpy_gate._check_server(connect)
    with pytest.raises(ConnectionRefusedError, match="belongs to uid"):
        checked(stranger_listener)
    ours = socket.create_server(("127.0.0.1", 0))
    try:
        checked(ours.getsockname()[1]).close()  # our own adapter: connected (not even accepted yet)
    finally:
        ours.close()


# A single-process rank that waits for a debugger (eager listener), then runs on.
WAITING_RANK = "import pathlib, sys, time\npathlib.Path(sys.argv[1], 'ran').write_text('yes')\n"


@pytest.mark.parametrize("adapter", spec.DEBUGPY_ADAPTERS)
def test_a_probe_that_closes_at_once_does_not_deafen_the_listener(run: HookRun, adapter: str) -> None:
    """debugpy's adapter runs each client's handler in its accept thread; a client gone within
    milliseconds made the handler's first send raise, which ended the thread: every later F5 then
    hung.  Twenty such probes (our own uid: the gate lets them in), then a real attach; the same for a
    rank serving DAP itself (the default), whose connection thread must go on accepting too."""
    run.env[spec.ENV_WAIT] = "60"
    run.env[spec.ENV_DEBUGPY_ADAPTER] = adapter
    script = run.root / "train.py"
    script.write_text(WAITING_RANK)
    run.start(PYTHON, str(script), str(run.marks))
    rank = wait_for(lambda: run.rank_if_any(0), 30, "the rank document")
    for i in range(20):
        probe_and_reset(rank["port"], i * 0.0005)  # past the gate's check (0-10 ms), before the adapter's first send
    time.sleep(0.5)  # the adapter has met every probe
    dap = MiniDap(rank["port"], timeout=15)
    try:
        assert dap.attach()["success"]
        wait_for(lambda: (run.marks / "ran").exists(), 20, "the rank to run on after the attach")
        dap.send("disconnect", terminateDebuggee=False)
    finally:
        dap.close()
    assert run.wait(30) == 0, run.stderr
