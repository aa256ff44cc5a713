"""Idle connections from another local user must not lock developers out of a job's sshd (issue 29, item 6).

sshd keeps at most ``MaxStartups`` unauthenticated connections (default 10:30:100: past 10 it drops new
ones at random, past 100 all of them) for up to ``LoginGraceTime`` (default 120 s) each.  A local job's
sshd listens on loopback, which every user of the machine reaches: ``nobody`` held 100 idle
connections and every ``ssh`` of the developer was closed before it began, for two minutes at a time.

Now the job's sshd bounds them (``LoginGraceTime 20``, ``MaxStartups 20:30:200``) and our relay
(``remote-debug proxy``) connects again when sshd drops it without a greeting.  Played here: the job's
sshd as the hook configures it (``container/sshd.py``), a fake local job pointing at it, the ssh config
that ``remote-debug ssh-config`` writes, ``nobody`` holding 100 idle connections, then a real ``ssh``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.container import sshd as job_sshd
from remote_debug.local.keys import ensure_job_key
from remote_debug.local.paths import StatePaths
from tests.local.test_local_faults import make_fake_job
from tests.second_user import needs_second_user, python_as_nobody

SSH = shutil.which("ssh")
pytestmark = [
    needs_second_user,
    pytest.mark.skipif(SSH is None or not os.path.exists(job_sshd.find_sshd()), reason="needs OpenSSH"),
]
JOB = "flooded"
IDLE = 100
LOGIN_BOUND_S = 45.0  # the relay's greeting wait (30 s) and a login, with room for a slow machine

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
        make_fake_job(paths, JOB, supervisor.pid, sshd_port=server.port, host_key=server.host_public_key,
                      user=server.user)
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_")}
        env["HOME"] = str(home)
        out = subprocess.run([sys.executable, "-m", "remote_debug", "ssh-config", JOB, "--json"],
                             capture_output=True, text=True, env=env, timeout=60)
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
    flood = subprocess.Popen(python_as_nobody(FLOOD, str(port), str(IDLE)), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert flood.stdout is not None
        held = int(flood.stdout.readline() or 0)
        assert held == IDLE, f"the attacker could hold only {held} connections"
        started = time.monotonic()
        proc = subprocess.run(
            [SSH or "ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes", f"algo-1.{JOB}",
             "echo reached"],
            capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=LOGIN_BOUND_S + 15,
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
    shown = subprocess.run([job_sshd.find_sshd(), "-T", "-f", str(config)], capture_output=True, text=True,
                           timeout=30)
    assert shown.returncode == 0, shown.stderr
    settings = dict(line.split(" ", 1) for line in shown.stdout.splitlines() if " " in line)
    assert settings["logingracetime"] == "20" and settings["maxstartups"] == "20:30:200"
