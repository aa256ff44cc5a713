"""An ssh session into a node looks like the job and ends with it: the hook's own sshd, real OpenSSH clients.

* a command or a shell over ssh runs in the code dir, with the job's SM_* variables and the job's
  interpreter first on PATH (``import torch`` works when the job's interpreter has it), and without
  our wiring (the job secret);
* sftp, scp (both protocols) and ``-L`` forwards still work through the forced command;
* a ``nohup`` process and a double-forked daemon started over ssh are gone once the job completes or
  is stopped - with the sessions' cgroup (cgroup v2, root) and with the fallback every SageMaker
  container gets (no writable cgroup: the job's mark in the environment, and the session ids).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import socket
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.container.node import ssh_session
from tests.helpers.hook_runs import (
    JOB_SECRET,
    PYTHON,
    WAIT_SCRIPT,
    HookRun,
    alive,
    base_env,
    free_port,
    hook_run,
    wait_for,
)

# A one-connection server: answers with what it sees of the job.
SERVE = (
    'import os, socket, sys; s = socket.create_server(("127.0.0.1", int(sys.argv[1]))); print("listening", '
    'flush=True); c = s.accept()[0]; c.sendall(os.environ["SM_CURRENT_HOST"].encode() + b" " + '
    "os.path.dirname(sys.executable).encode()); c.close()"
)
USER = pwd.getpwuid(os.geteuid()).pw_name
JOB_BIN = os.path.dirname(PYTHON)  # first on a session's PATH
# What a daemon does: fork, new session, fork again, stdio away from the session; then it writes its pid.
DAEMON = textwrap.dedent(
    """
    import os, sys, time
    if os.fork():
        sys.exit(0)
    os.setsid()
    if os.fork():
        sys.exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(300)
    """
)


class Node:
    """The job's sshd, reached as the laptop does: pinned host key, the job's client key, nothing else."""

    def __init__(self, run: HookRun, key: Path) -> None:
        node = run.node()
        self.run = run
        self.port = int(node["sshd_port"])
        self.known = run.root / "known_hosts"
        self.known.write_text(f"[127.0.0.1]:{self.port} {node['host_public_key']}\n")
        self.options = [
            "-F",
            "/dev/null",
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={self.known}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
        ]

    def ssh(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", *self.options, "-p", str(self.port), f"{USER}@127.0.0.1", *args],
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self.ssh(*args, stdin=stdin)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def tool(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        """sftp / scp with the same options (they spell the port -P)."""
        return subprocess.run(
            [tool, *self.options, "-P", str(self.port), *args],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def job_env(root: Path, public_key: str, **extra_env: str) -> dict[str, str]:
    env = base_env(root, public_key, job="session-test")
    env.update({"REMOTE_DEBUG_CODE_DIR": str(root / "code"), "SM_CURRENT_HOST": "algo-1", "SM_HOSTS": '["algo-1"]'})
    env.update(extra_env)
    return env


def start_job(run: HookRun) -> HookRun:
    """The hook running a training script that waits for ``run.release()``; returns once sshd is up."""
    (run.root / "code").mkdir()
    (run.root / "train.py").write_text(WAIT_SCRIPT)
    (run.root / "daemon.py").write_text(DAEMON)
    run.start(PYTHON, str(run.root / "train.py"), str(run.marks))
    wait_for(
        lambda: (run.marks / "started").exists() or run.proc.poll() is not None,  # type: ignore[union-attr]
        60,
        "the training script to start",
    )
    assert run.proc is not None and run.proc.poll() is None, run.stderr
    wait_for(lambda: (run.node_if_any() or {}).get("sshd_port"), 30, "sshd")
    return run


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, client_key: tuple[Path, str]) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("session")
    with hook_run(root, job_env(root, client_key[1])) as run:
        yield Node(start_job(run), client_key[0])


def test_a_command_runs_in_the_code_dir_with_the_jobs_environment_and_interpreter(node: Node) -> None:
    probe = (
        "import os, sys, torch; "
        "print(os.getcwd()); print(os.environ['SM_CURRENT_HOST']); print(sys.executable); "
        "print(sorted(k for k in os.environ if k.startswith('REMOTE_DEBUG_')))"
    )
    out = node.ok("--", "python", "-c", f'"{probe}"').splitlines()
    assert out[0] == str(node.run.root / "code")
    assert out[1] == "algo-1"
    assert os.path.dirname(out[2]) == JOB_BIN  # the job's interpreter, which has torch
    # no job secret, no spec: only the mark, and where `remote-debug run` finds the node (a path, an interpreter)
    assert out[3] == repr(sorted([ssh_session.MARK_ENV, ssh_session.NODE_DIR_ENV, ssh_session.NODE_PYTHON_ENV]))
    saved = node.run.state_dir / ssh_session.SESSION_FILE  # what the session got it from
    assert saved.stat().st_mode & 0o777 == 0o600 and JOB_SECRET not in saved.read_text()


def test_a_shell_without_command_is_the_job_too(node: Node) -> None:
    """What Remote-SSH does: no command, the script on stdin."""
    out = node.ok("-T", stdin='pwd; echo "$SM_HOSTS"; command -v python; echo "${REMOTE_DEBUG_JOB_SECRET-unset}"\n')
    assert out.splitlines() == [str(node.run.root / "code"), '["algo-1"]', JOB_BIN + "/python", "unset"]


def test_sftp_and_scp_still_work(node: Node, tmp_path: Path) -> None:
    source = tmp_path / "notes.txt"
    source.write_text("from the laptop\n")
    batch = tmp_path / "batch"
    batch.write_text(f"put {source} via-sftp.txt\nget via-sftp.txt {tmp_path / 'back.txt'}\n")
    sftp = node.tool("sftp", "-b", str(batch), f"{USER}@127.0.0.1")
    assert sftp.returncode == 0, sftp.stderr
    assert (tmp_path / "back.txt").read_text() == "from the laptop\n"
    assert (node.run.root / "code" / "via-sftp.txt").exists()  # relative paths start in the code dir
    for protocol, name in (([], "via-scp.txt"), (["-O"], "via-legacy-scp.txt")):  # SFTP, then scp's own
        scp = node.tool("scp", *protocol, str(source), f"{USER}@127.0.0.1:{name}")
        assert scp.returncode == 0, scp.stderr
        assert (node.run.root / "code" / name).read_text() == "from the laptop\n"


def test_a_server_started_over_ssh_is_reached_through_a_local_forward(node: Node) -> None:
    """``ssh -L`` with a command, as for a TensorBoard started in the job: the forward works, and the
    server runs with the job's environment."""
    remote, local = free_port(), free_port()
    server = subprocess.Popen(
        [
            "ssh",
            *node.options,
            "-p",
            str(node.port),
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"127.0.0.1:{local}:127.0.0.1:{remote}",
            f"{USER}@127.0.0.1",
            "--",
            "python",
            "-c",
            f"'{SERVE}'",
            str(remote),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == "listening\n", server.stderr
        with socket.create_connection(("127.0.0.1", local), timeout=10) as conn:
            answer = conn.makefile().read()
        assert answer.split() == ["algo-1", JOB_BIN]
        assert server.wait(10) == 0
    finally:
        server.kill()
        server.wait(10)


# --- the end of the job ends the sessions' processes ----------------------------------------------------------


def _cgroup_of(pid: int) -> str:
    try:
        return next(
            line[3:].strip() for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if line.startswith("0::")
        )
    except (OSError, StopIteration):
        return ""


@pytest.mark.parametrize("end", ["completed", "stopped"])
@pytest.mark.parametrize("mode", ["cgroup", "fallback"])
def test_processes_started_over_ssh_end_with_the_job(
    tmp_path: Path, client_key: tuple[Path, str], mode: str, end: str
) -> None:
    if mode == "cgroup" and ssh_session.cgroup_base() is None:
        pytest.skip("no writable cgroup v2 here")
    knob = {ssh_session.ENV_CGROUP: "0"} if mode == "fallback" else {}
    with hook_run(tmp_path, job_env(tmp_path, client_key[1], **knob)) as run:
        node = Node(start_job(run), client_key[0])
        session_file = run.state_dir / ssh_session.SESSION_FILE
        cgroup = json.loads(session_file.read_text())["cgroup"] if session_file.exists() else ""
        assert bool(cgroup) == (mode == "cgroup") and (not cgroup or Path(cgroup).is_dir())
        marks = run.marks
        script = (
            f"nohup sleep 300 >/dev/null 2>&1 & echo $! > {marks / 'nohup'}; "
            f"python {tmp_path / 'daemon.py'} {marks / 'daemon'}"
        )
        if mode == "cgroup":  # leaves the session and drops its environment: only a cgroup still knows it
            escape = f"sh -c 'echo $$ > {marks / 'escaped'}; exec env -i /bin/sleep 301'"
            script += f"; setsid -f {escape} </dev/null >/dev/null 2>&1"
        node.ok(script)
        names = ["nohup", "daemon", *(["escaped"] if mode == "cgroup" else [])]
        pids = {
            n: int(wait_for(lambda n=n: (marks / n).exists() and (marks / n).read_text().strip(), 10, n))  # type: ignore[misc]
            for n in names
        }
        run.extra_pids.extend(pids.values())  # killed by the cleanup if the job did not
        assert all(alive(pid) for pid in pids.values()), pids
        in_cgroup = [ssh_session.CGROUP_PREFIX in _cgroup_of(pid) for pid in pids.values()]
        assert in_cgroup == [mode == "cgroup"] * len(pids)

        if end == "completed":
            run.release()
            assert run.wait(30) == 0
        else:  # what `remote-debug stop` (and StopTrainingJob) does to a node
            os.kill(run.proc.pid, signal.SIGTERM)  # type: ignore[union-attr]
            assert run.wait(30) == 128 + signal.SIGTERM
        assert run.node()["state"] == ("completed" if end == "completed" else "stopped")
        wait_for(lambda: not any(alive(pid) for pid in pids.values()), 5, f"{pids} to be gone")
        assert "process(es) started over ssh" in run.stderr
        assert not cgroup or not Path(cgroup).exists()  # the sessions' cgroup goes with them


def test_a_killed_nodes_session_cgroup_is_cleaned_up_by_the_next(tmp_path: Path) -> None:
    """Node services SIGKILLed (no sweep): the next node on the machine ends what their sessions left."""
    base = ssh_session.cgroup_base()
    if base is None:
        pytest.skip("no writable cgroup v2 here")
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs: the killed owner
    pid_namespace = os.stat("/proc/self/ns/pid").st_ino
    stale = base / f"{ssh_session.CGROUP_PREFIX}{pid_namespace}.{dead.pid}-0123456789abcdef"
    stale.mkdir()
    left = subprocess.Popen(["sleep", "300"])
    try:
        (stale / "cgroup.procs").write_text(str(left.pid))
        scope = ssh_session.SessionScope.create(tmp_path, {}, str(tmp_path))
        try:
            assert left.wait(5) == -signal.SIGKILL
            wait_for(lambda: not stale.exists(), 5, "the stale cgroup to go")
        finally:
            scope.end()
        assert scope.cgroup is not None and not scope.cgroup.exists()
    finally:
        left.kill()
        left.wait()
        with contextlib.suppress(OSError):
            stale.rmdir()
