"""Attack: the launch.json entries of an attach that has ended name ports nobody of ours holds.

``remote-debug attach`` writes one configuration per rank (plus compounds) naming its forwarded loopback
port.  An attach ends by Ctrl-C, by its terminal closing (SIGHUP), by SIGTERM (the VS Code extension's
escalation) or is killed (SIGKILL).  Each time its ports are free; another local user (``nobody``) binds
them and waits for the user's next F5 - which would talk DAP to a stranger (whose ``runInTerminal``
reverse request runs commands in the user's VS Code).  These tests play it through the real CLI on a real
local job: after each end no configuration may name a port that no process of ours holds, the user's
own launch.json bytes are given back, and what the next F5 would connect to never reaches the attacker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import json5
import pytest

from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.machine.job_dir import NodeLayout
from remote_debug.laptop.prune import Pruner
from tests.helpers.hook_runs import listeners_of, wait_for, with_descendants
from tests.helpers.jobs import launch_job
from tests.helpers.live_session import IDLE_UNTIL_DONE
from tests.helpers.second_user import needs_second_user, python_as_nobody
from tests.local.test_prune import USER_LAUNCH

pytestmark = needs_second_user

JOB = "staleports"
SCRIPT = IDLE_UNTIL_DONE

# As nobody: bind every given port on loopback (a stale entry's), then report each connection it gets.
ATTACKER = textwrap.dedent(
    """
    import select, socket, sys
    socks = []
    for port in map(int, sys.argv[1:]):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
            socks.append(s)
            print("bound", port, flush=True)
        except OSError:
            print("busy", port, flush=True)
    print("ready", flush=True)
    while socks:
        readable, _, _ = select.select(socks, [], [], 60)
        if not readable:
            break
        for s in readable:
            conn, _ = s.accept()
            print("reached", s.getsockname()[1], flush=True)
            conn.close()
    """
)


class Attach:
    """``remote-debug attach`` (VS Code mode: it writes launch.json) in its own session, as in a terminal."""

    def __init__(self, workspace: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "remote_debug", "attach", JOB, "--no-ssh-include", "--workspace", str(workspace)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
            start_new_session=True,
        )
        self.err: list[str] = []
        assert self.proc.stderr is not None
        stream = self.proc.stderr
        self._reader = threading.Thread(target=lambda: self.err.extend(iter(stream.readline, "")), daemon=True)
        self._reader.start()

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"attach exited ({self.proc.returncode}): {''.join(self.err)}")
            return any("ready: ranks [0]" in line for line in self.err)

        wait_for(ready, 90, "the attach to be ready")

    def end(self, how: signal.Signals) -> int:
        if how in (signal.SIGINT, signal.SIGHUP, signal.SIGKILL):  # a terminal's: its whole foreground group
            os.killpg(self.proc.pid, how)
        else:  # the extension's child.kill('SIGTERM'): the process alone
            os.kill(self.proc.pid, how)
        code = self.proc.wait(30)
        self._reader.join(5)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def attaches() -> Iterator[list[Attach]]:
    started: list[Attach] = []
    try:
        yield started
    finally:
        for attach in started:
            attach.stop()


def configured_ports(workspace: Path) -> list[int]:
    """Every port a configuration of the workspace's launch.json connects to (what an F5 can reach)."""
    path = workspace / ".vscode" / "launch.json"
    if not path.exists():
        return []
    data = json5.loads(path.read_text())
    return sorted(int(c["connect"]["port"]) for c in data.get("configurations", []) if "connect" in c)


def unheld(workspace: Path, holders: list[int]) -> list[int]:
    """The configured ports that no listener of ``holders`` (our live attaches) holds."""
    held = {listener.port for listener in listeners_of(holders)}
    return [port for port in configured_ports(workspace) if port not in held]


def play_attacker(old_ports: list[int], workspaces: list[Path]) -> list[str]:
    """As nobody, bind the ended attach's ports; then do what F5 does with every configuration left in
    the workspaces (connect to its port).  Returns the attacker's lines ("bound", "reached"...)."""
    attacker = subprocess.Popen(python_as_nobody(ATTACKER, *map(str, old_ports)), stdout=subprocess.PIPE, text=True)
    try:
        assert attacker.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1] != "ready":
            line = attacker.stdout.readline()
            assert line, f"the attacker exited: {lines}"
            lines.append(line.strip())
        # the attack is real: nothing of ours holds these ports any more, another user can take them
        assert lines[:-1] == [f"bound {port}" for port in old_ports], lines
        stream = attacker.stdout
        reader = threading.Thread(
            target=lambda: lines.extend(line.strip() for line in iter(stream.readline, "")), daemon=True
        )
        reader.start()
        for workspace in workspaces:  # the user's next F5, on any configuration there
            for port in configured_ports(workspace):
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=3):
                        pass
                except OSError:
                    continue
                deadline = time.monotonic() + 5  # the attacker's port: give it the time to say so
                while port in old_ports and f"reached {port}" not in lines and time.monotonic() < deadline:
                    time.sleep(0.05)
        attacker.kill()
        attacker.wait(10)
        reader.join(5)
        return lines
    finally:
        if attacker.poll() is None:
            attacker.kill()
            attacker.wait(10)


def start(tmp_path: Path, attaches: list[Attach]) -> tuple[Path, Attach, list[int]]:
    """A running 1-rank job, the user's launch.json in the workspace, an attach ready with its ports."""
    project = tmp_path / "project"
    (project / ".vscode").mkdir(parents=True)
    (project / "train.py").write_text(SCRIPT.format(done=str(tmp_path / "done")))
    (project / ".vscode" / "launch.json").write_bytes(USER_LAUNCH.encode())
    launch_job(JOB, project, nproc_per_node=1)
    attach = Attach(project)
    attaches.append(attach)
    attach.wait_ready()
    ports = configured_ports(project)
    assert ports and unheld(project, [attach.proc.pid]) == []  # live: every entry's port is the attach's
    return project, attach, ports


def assert_given_back(project: Path, old_ports: list[int], also: list[Path] | None = None) -> None:
    reached = [line for line in play_attacker(old_ports, [project, *(also or [])]) if line.startswith("reached")]
    assert reached == [], f"the next F5 reached the attacker: {reached}"
    assert unheld(project, []) == [], json.dumps(configured_ports(project))
    assert (project / ".vscode" / "launch.json").read_bytes() == USER_LAUNCH.encode()


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM], ids=lambda s: s.name)
def test_an_attach_ended_by_a_signal_gives_its_ports_back(
    home: Path, tmp_path: Path, attaches: list[Attach], how: signal.Signals
) -> None:
    project, attach, ports = start(tmp_path, attaches)
    code = attach.end(how)
    assert_given_back(project, ports)
    assert code == 130, (code, attach.err)  # it ended as by Ctrl-C (a default SIGHUP/SIGTERM dies with -N)


def test_a_killed_attach_s_entries_go_at_prune(home: Path, tmp_path: Path, attaches: list[Attach]) -> None:
    project, attach, ports = start(tmp_path, attaches)
    attach.end(signal.SIGKILL)  # no clean-up can run: prune notices its lock is held by nobody
    result = Pruner().run()
    [outcome] = result.outcomes
    assert outcome.kept == "it is still running"  # the job and its files stay; only the dead ports go
    assert_given_back(project, ports)


def test_a_killed_attach_s_entries_go_at_the_next_attach(home: Path, tmp_path: Path, attaches: list[Attach]) -> None:
    project, attach, ports = start(tmp_path, attaches)
    attach.end(signal.SIGKILL)
    elsewhere = tmp_path / "elsewhere"  # the next attach of the job, from another workspace
    elsewhere.mkdir()
    second = Attach(elsewhere)
    attaches.append(second)
    second.wait_ready()
    assert configured_ports(elsewhere) and unheld(elsewhere, [second.proc.pid]) == []
    assert_given_back(project, [p for p in ports if p not in configured_ports(elsewhere)], also=[elsewhere])
    # and that one, ended, leaves the other workspace as it found it (no launch.json at all)
    assert second.end(signal.SIGINT) == 130
    assert not (elsewhere / ".vscode").exists()


def test_the_clean_up_does_not_hang_on_a_dead_tunnel(home: Path, tmp_path: Path, attaches: list[Attach]) -> None:
    """The job's sshd frozen (a node that stopped answering): SIGTERM still gives the entries back at
    once, and the attach exits in bounded time (the extension's SIGKILL would follow otherwise)."""
    project, attach, ports = start(tmp_path, attaches)
    hook = NodeLayout(StatePaths.default().job_dir(JOB), "algo-1").hook_dir
    frozen = with_descendants([int((hook / "sshd.pid").read_text())])
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        os.kill(attach.proc.pid, signal.SIGTERM)
        wait_for(lambda: configured_ports(project) == [], 5, "the entries to be given back")
        given_back = time.monotonic() - began
        code = attach.proc.wait(30)
        took = time.monotonic() - began
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    print(f"\ndead tunnel: entries given back after {given_back:.2f} s, attach exited after {took:.2f} s")
    assert code == 130 and took < 10, (code, took)
    assert_given_back(project, ports)
