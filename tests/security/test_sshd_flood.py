"""Idle connections from another local user must not lock developers out of a job's sshd (issue 29, item 6).

sshd keeps at most ``MaxStartups`` unauthenticated connections (default 10:30:100: past 10 it drops new
ones at random, past 100 all of them) for up to ``LoginGraceTime`` (default 120 s) each.  A local job's
sshd listens on loopback, which every user of the machine reaches: ``nobody`` held 100 idle
connections and every ``ssh`` of the developer was closed before it began, for two minutes at a time.

Now the job's sshd bounds them (``LoginGraceTime 20``, ``MaxStartups 20:30:200``) and our relay
(``remote-debug proxy``) connects again when sshd drops it without a greeting.  Played here: the job's
sshd as the hook configures it (``container/node/sshd.py``), a fake local job pointing at it, the ssh config
that ``remote-debug ssh-config`` writes, ``nobody`` holding 100 idle connections, then a real ``ssh``.

For jobs on this machine the hook also puts a uid gate in front of sshd (``container/node/sshd_gate.py``):
it holds the port, closes every connection of another uid unread and runs ``sshd -i`` for our own.
Played here through the hook's own node services (``NodeServices``, local transport): ``nobody``'s
connection got sshd's ``SSH-2.0-OpenSSH`` greeting before; now it is closed without a byte, and 100
of them (which sshd would have counted against ``MaxStartups``) leave our ``ssh`` as fast as ever.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.container.node import sshd as job_sshd
from remote_debug.container.node import sshd_gate
from remote_debug.container.node.services import NodeServices
from remote_debug.contract import spec
from remote_debug.laptop.core.keys import ensure_job_key
from remote_debug.laptop.core.paths import StatePaths
from tests.helpers.second_user import needs_second_user, nobody, python_as_nobody
from tests.local.test_local_faults import make_fake_job

SSH = shutil.which("ssh")
pytestmark = [
    needs_second_user,
    pytest.mark.skipif(SSH is None or not os.path.exists(job_sshd.find_sshd()), reason="needs OpenSSH"),
]
JOB = "flooded"
IDLE = 100
LOGIN_BOUND_S = 45.0  # the relay's greeting wait (30 s) and a login, with room for a slow machine
GATED_LOGIN_BOUND_S = 10.0  # a login through the gate: under a second, with room for a loaded machine
SECRET = "6f" * 32

# nobody: hold IDLE unauthenticated connections (reconnecting the ones sshd drops), say how many, then
# hold them until stdin closes
FLOOD = textwrap.dedent(
    """
    import socket, sys, time
    port, want = int(sys.argv[1]), int(sys.argv[2])
    held, deadline = [], time.monotonic() + 60
    while len(held) < want and time.monotonic() < deadline:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.settimeout(5)
        try:
            greeted = s.recv(64).startswith(b"SSH-")  # else "Exceeded MaxStartups", then closed
        except OSError:
            greeted = False
        if greeted:
            held.append(s)
        else:
            s.close()
    print(len(held), flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture
def job_node(home: Path, tmp_path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """A running local job (fake supervisor) whose node is a real sshd started as the hook starts it,
    and the ssh config written by ``remote-debug ssh-config``; yields (sshd port, env for ssh)."""
    paths = StatePaths.default()
    _, public = ensure_job_key(paths, JOB)
    server = job_sshd.start_sshd(tmp_path / "sshd-state", public)
    supervisor = subprocess.Popen(["sleep", "300"])
    try:
        make_fake_job(
            paths, JOB, supervisor.pid, sshd_port=server.port, host_key=server.host_public_key, user=server.user
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_")}
        env["HOME"] = str(home)
        out = subprocess.run(
            [sys.executable, "-m", "remote_debug", "ssh-config", JOB, "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        yield server.port, env
    finally:
        supervisor.kill()
        supervisor.wait()
        server.stop()


def test_our_ssh_logs_in_while_another_user_holds_100_idle_connections(
    home: Path, job_node: tuple[int, dict[str, str]]
) -> None:
    port, env = job_node
    flood = subprocess.Popen(
        python_as_nobody(FLOOD, str(port), str(IDLE)), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert flood.stdout is not None
        held = int(flood.stdout.readline() or 0)
        assert held == IDLE, f"the attacker could hold only {held} connections"
        started = time.monotonic()
        proc = subprocess.run(
            [SSH or "ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes", f"algo-1.{JOB}", "echo reached"],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=LOGIN_BOUND_S + 15,
        )
        took = time.monotonic() - started
        assert proc.returncode == 0 and proc.stdout.strip() == "reached", proc.stderr[-500:]
        assert took < LOGIN_BOUND_S, took
    finally:
        flood.kill()
        flood.wait()


def test_the_job_sshd_bounds_unauthenticated_connections(tmp_path: Path) -> None:
    """What sshd itself makes of the config we render (``sshd -T``): idle connections end in 20 s."""
    state = job_sshd.prepare_state_dir(tmp_path / "state")
    config = state / "sshd_config"
    config.write_text(job_sshd.render_config(state, 2222, job_sshd.current_user()))
    (state / job_sshd.HOST_KEY_NAME).touch()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(state / "k")], check=True)
    shutil.copy(state / "k", state / job_sshd.HOST_KEY_NAME)
    shown = subprocess.run([job_sshd.find_sshd(), "-T", "-f", str(config)], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    settings = dict(line.split(" ", 1) for line in shown.stdout.splitlines() if " " in line)
    assert settings["logingracetime"] == "20" and settings["maxstartups"] == "20:30:200"


# nobody: open N connections and keep them all open at once, then say how many got sshd's greeting (a
# connection the gate refused reads as closed at once), then hold them until stdin closes
HOLD = textwrap.dedent(
    """
    import socket, sys
    port, want = int(sys.argv[1]), int(sys.argv[2])
    held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(want)]
    greeted = 0
    for s in held:
        s.settimeout(3)
        try:
            greeted += s.recv(64).startswith(b"SSH-")
        except OSError:
            pass
    print(greeted, flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture
def local_node(home: Path, tmp_path: Path) -> Iterator[tuple[NodeServices, dict[str, str]]]:
    """A local job's node services as the hook starts them (local transport: sshd behind the uid gate),
    a fake local job pointing at them and the ssh config of ``remote-debug ssh-config``; yields
    (services, env for ssh)."""
    paths = StatePaths.default()
    _, public = ensure_job_key(paths, JOB)
    node_env = {
        **spec.DebugSpec(
            job_name=JOB, client_public_key=public, job_secret=SECRET, transport=spec.Transport.LOCAL
        ).to_env(),
        spec.ENV_MANIFEST_DIR: str(tmp_path / "manifest"),
        spec.ENV_STATE_DIR: str(tmp_path / "sshd-state"),
        "SM_INPUT_CONFIG_DIR": str(tmp_path),
        "PATH": os.environ["PATH"],
    }
    debug_spec = spec.DebugSpec.from_env(node_env)
    assert debug_spec is not None
    services = NodeServices(debug_spec, node_env)
    supervisor = subprocess.Popen(["sleep", "300"])
    try:
        services.start()
        assert services.sshd is not None, (tmp_path / "manifest" / "node.json").read_text()
        make_fake_job(
            paths,
            JOB,
            supervisor.pid,
            sshd_port=services.sshd.port,
            host_key=services.sshd.host_public_key,
            user=services.sshd.user,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_")}
        env["HOME"] = str(home)
        out = subprocess.run(
            [sys.executable, "-m", "remote_debug", "ssh-config", JOB, "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        yield services, env
    finally:
        supervisor.kill()
        supervisor.wait()
        services.finish(spec.NodeState.COMPLETED, 0)


def _our_ssh(home: Path, env: dict[str, str], timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [SSH or "ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes", f"algo-1.{JOB}", "echo reached"],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    return proc, time.monotonic() - started


def test_another_users_connection_to_a_local_jobs_sshd_is_closed_without_a_greeting(
    local_node: tuple[NodeServices, dict[str, str]],
) -> None:
    services, _ = local_node
    assert services.sshd is not None
    port = services.sshd.port
    probe = textwrap.dedent(
        """
        import socket, sys
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
        s.settimeout(10)
        try:
            print(repr(s.recv(64)))
        except OSError as exc:
            print(type(exc).__name__)
        """
    )
    seen = subprocess.run(python_as_nobody(probe, str(port)), capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0, seen.stderr
    assert "SSH-" not in seen.stdout and seen.stdout.strip() in ("b''", "ConnectionResetError"), seen.stdout
    with socket.create_connection(("127.0.0.1", port), timeout=5) as ours:  # the job's own user: sshd answers
        ours.settimeout(10)
        assert ours.recv(64).startswith(b"SSH-2.0-")
    log = services.sshd.log_path.read_text(errors="replace")
    assert f"belongs to uid {nobody().pw_uid}" in log


def test_100_idle_connections_of_another_user_do_not_delay_our_ssh_to_a_local_job(
    home: Path,
    local_node: tuple[NodeServices, dict[str, str]],
) -> None:
    services, env = local_node
    assert services.sshd is not None
    flood = subprocess.Popen(
        python_as_nobody(HOLD, str(services.sshd.port), str(IDLE)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert flood.stdout is not None
        greeted = int(flood.stdout.readline() or -1)
        assert greeted == 0, f"sshd greeted {greeted} of the other user's {IDLE} connections"
        proc, took = _our_ssh(home, env, GATED_LOGIN_BOUND_S + 50)
        assert proc.returncode == 0 and proc.stdout.strip() == "reached", proc.stderr[-500:]
        assert took < GATED_LOGIN_BOUND_S, took
    finally:
        flood.kill()
        flood.wait()


def test_the_gate_refuses_connections_past_its_cap(tmp_path: Path) -> None:
    """At most ``max_sessions`` sshds at once: one more connection of our own is closed, and is served
    again once a session ended.  (``cat`` stands in for ``sshd -i``: it echoes what the client sends.)"""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    gate = sshd_gate.Gate(listener, ["cat"], 2, os.geteuid())
    server = threading.Thread(target=gate.serve, daemon=True)
    server.start()
    clients: list[socket.socket] = []
    try:
        for _ in range(2):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            clients[-1].sendall(b"hi")
            assert clients[-1].recv(2) == b"hi"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
            assert third.recv(2) == b""  # refused: closed
        clients.pop(0).close()  # cat sees EOF and ends; the gate reaps it within a second
        deadline = time.monotonic() + 20
        while True:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as again:
                again.sendall(b"hi")
                try:
                    if again.recv(2) == b"hi":
                        break
                except ConnectionResetError:  # still refused: closed with our "hi" unread, which is a reset
                    pass
            assert time.monotonic() < deadline, "the gate never served again after a session ended"
            time.sleep(0.2)
    finally:
        for c in clients:
            c.close()
        listener.close()  # serve() returns within a second
        server.join(10)
        gate.stop()


def test_the_gate_and_its_sshds_die_with_the_hook(tmp_path: Path) -> None:
    """A SIGKILLed hook leaves no gate listening with the job's host key, nor an ``sshd -i`` of it (whose
    client, this test, is still connected)."""
    key = tmp_path / "client"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        from remote_debug.container.node.sshd import _children_of, start_sshd
        s = start_sshd(Path({str(tmp_path / "state")!r}), {key.with_suffix(".pub").read_text().strip()!r},
                       uid_gate=True)
        print(s.pid, s.port, flush=True)
        sys.stdin.readline()  # the test has connected
        print(*_children_of(s.pid), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    hook = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert hook.stdin is not None and hook.stdout is not None
    gate_pid, port = (int(word) for word in hook.stdout.readline().split())
    sshds: list[int] = []
    client = socket.create_connection(("127.0.0.1", port), timeout=10)  # an sshd -i, waiting for our key exchange
    try:
        assert client.recv(64).startswith(b"SSH-")
        hook.stdin.write("go\n")
        hook.stdin.flush()
        sshds = [int(word) for word in hook.stdout.readline().split()]
        assert len(sshds) == 1, sshds
        hook.wait(30)
        deadline = time.monotonic() + 15
        while any(os.path.exists(f"/proc/{pid}") for pid in (gate_pid, *sshds)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{gate_pid}"), "the gate outlived its hook"
        assert not os.path.exists(f"/proc/{sshds[0]}"), "an sshd -i outlived the gate"
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        client.close()
        if hook.poll() is None:
            hook.kill()
        hook.wait()
        for pid in (gate_pid, *sshds):
            if os.path.exists(f"/proc/{pid}"):
                os.kill(pid, 9)
