"""Env-only injection (no hook: the SDK's own launcher runs the script): the first Python process on the
node starts the node daemon once; sshd works, every rank listens, and all of it stops with the launcher."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from pathlib import Path

import pytest

from remote_debug.container.node.bootstrap import DAEMON_FLAG, LOCK_NAME, is_helper, watched_pid
from remote_debug.contract import manifest_lines as mlines
from remote_debug.contract import spec
from tests.helpers.hook_runs import PYTHON, REPO, TOKEN_ENV, alive, base_env, kill_all, pids_with_env, wait_for

# An SDK v3-style driver (it lives in an sm_drivers dir, so it is a launcher, not a rank) that runs
# two ranks the way torchrun would, and waits for them.
DRIVER = """\
import os, pathlib, subprocess, sys
marks, rank_script = pathlib.Path(sys.argv[1]), sys.argv[2]
(marks / "driver-saw").write_text(os.environ.get("REMOTE_DEBUG_HOOK_PID", ""))
procs = [subprocess.Popen([sys.executable, rank_script, str(marks)],
                          env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2"))
         for r in range(2)]
sys.exit(max(p.wait() for p in procs))
"""
RANK = """\
import os, pathlib, sys, time
marks = pathlib.Path(sys.argv[1])
(marks / f"rank-{os.environ['RANK']}-saw").write_text(os.environ.get("REMOTE_DEBUG_HOOK_PID", ""))
deadline = time.monotonic() + 120
while not (marks / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def _daemons(token: str) -> list[int]:
    found = []
    for pid in pids_with_env(token):
        try:
            if DAEMON_FLAG.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def test_first_python_process_starts_one_node_daemon(tmp_path: Path, client_key: tuple[Path, str]) -> None:
    if not Path("/usr/sbin/sshd").exists():
        pytest.skip("sshd is not installed")
    drivers = tmp_path / "input" / "data" / "sm_drivers"
    drivers.mkdir(parents=True)
    (drivers / "driver.py").write_text(DRIVER)
    (tmp_path / "rank.py").write_text(RANK)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = base_env(tmp_path, client_key[1], job="daemon-job", transport="ssm")
    env.pop(spec.ENV_STATE_DIR)  # the daemon makes (and removes) its own private dir
    env["TMPDIR"] = str(tmp_path)
    env["PYTHONPATH"] = str(REPO / "remote_debug" / "container" / "inject")  # what enable() puts in the job
    token = f"{TOKEN_ENV}={env[TOKEN_ENV]}\0"
    manifest_dir = Path(env[spec.ENV_MANIFEST_DIR])
    started = time.monotonic()
    driver = subprocess.Popen(
        [PYTHON, str(drivers / "driver.py"), str(marks), str(tmp_path / "rank.py")],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=open(tmp_path / "stdout.log", "wb"),  # noqa: SIM115 - the child owns it
        stderr=open(tmp_path / "stderr.log", "wb"),  # noqa: SIM115
        start_new_session=True,
    )
    try:

        def ready() -> spec.NodeManifest | None:
            try:
                node = spec.read_node_manifest(manifest_dir)
            except spec.ContractError:
                return None
            return node if node and node.sshd_port and len([r for r in node.ranks if r.port]) == 2 else None

        node = wait_for(ready, 90, "sshd and both rank listeners")
        print(f"daemon: sshd and 2 ranks ready {time.monotonic() - started:.2f} s after the driver started")
        wait_for(lambda: all((marks / f"rank-{r}-saw").exists() for r in (0, 1)), 30, "both ranks to run")
        [daemon] = _daemons(token)
        assert node.hook_pid == daemon and node.state == "running"
        assert (marks / "driver-saw").read_text() == str(daemon)  # set for everything the driver starts
        assert {(marks / f"rank-{r}-saw").read_text() for r in (0, 1)} == {str(daemon)}
        assert sorted((r.rank, r.state) for r in node.ranks) == [(0, "listening"), (1, "listening")]
        assert (manifest_dir / LOCK_NAME).read_text().strip() == str(daemon)

        # sshd: a real login with the client key, the host key pinned from the manifest
        known = tmp_path / "known_hosts"
        known.write_text(f"[127.0.0.1]:{node.sshd_port} {node.host_public_key}\n")
        login = subprocess.run(
            [
                "ssh",
                "-F",
                "/dev/null",
                "-i",
                str(client_key[0]),
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                f"UserKnownHostsFile={known}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                "-p",
                str(node.sshd_port),
                f"{pwd.getpwuid(os.geteuid()).pw_name}@127.0.0.1",
                "echo",
                "in-node",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        assert login.returncode == 0 and login.stdout.strip() == "in-node", login.stderr
        assert len(_daemons(token)) == 1

        # The launcher ends -> the daemon stops sshd, cleans up, and publishes the end.
        (marks / "release").write_text("")
        assert driver.wait(60) == 0
        wait_for(lambda: not alive(daemon), 30, "the daemon to exit after its parent")
        final = spec.read_node_manifest(manifest_dir)
        assert final is not None and final.state == "completed"
        assert not alive(int(node.hook_pid)) and (manifest_dir / LOCK_NAME).read_text() == ""
        assert not list(tmp_path.glob("remote-debug-sshd-*"))  # its private dir (host key) is gone
        assert pids_with_env(token) == []  # sshd, adapters, ranks: nothing outlived the job
        lines = [
            mlines.parse_manifest_line(line, secret=env[spec.ENV_JOB_SECRET])
            for line in (tmp_path / "stdout.log").read_text().splitlines()
        ]
        boots = {line.boot for line in lines if line}
        assert len(boots) == 1  # exactly one daemon ever published for this node
        merged = mlines.merge_manifest_lines(line for line in lines if line)
        assert merged["algo-1"].state == "completed" and len(merged["algo-1"].ranks) == 2
        err = (tmp_path / "stderr.log").read_text()
        assert err.count("node daemon for pid") == 1, err
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, 9)
        kill_all(token)
        driver.wait(10)


def test_second_process_finds_the_running_daemon(tmp_path: Path, client_key: tuple[Path, str]) -> None:
    """A Python process that is not a child of the first one (so no REMOTE_DEBUG_HOOK_PID) starts no
    second daemon: the lock file names a live one."""
    if not Path("/usr/sbin/sshd").exists():
        pytest.skip("sshd is not installed")
    env = base_env(tmp_path, client_key[1], job="daemon-two", transport="local", ranks=(0,))
    env["PYTHONPATH"] = str(REPO / "remote_debug" / "container" / "inject")
    token = f"{TOKEN_ENV}={env[TOKEN_ENV]}\0"
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "rank.py").write_text(RANK)
    first = subprocess.Popen(
        [PYTHON, str(tmp_path / "rank.py"), str(marks)],
        env={**env, "RANK": "0"},
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: (
                len(_daemons(token)) == 1
                and (Path(env[spec.ENV_MANIFEST_DIR]) / LOCK_NAME).exists()
                and (Path(env[spec.ENV_MANIFEST_DIR]) / LOCK_NAME).read_text().strip()
            ),
            60,
            "the first daemon",
        )
        second = subprocess.run(
            [PYTHON, str(tmp_path / "rank.py"), str(marks)],
            env={**env, "RANK": "1"},
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            timeout=60,
            preexec_fn=lambda: (marks / "release").write_text(""),
        )
        assert second.returncode == 0
        assert (marks / "rank-1-saw").read_text() == str(_daemons(token)[0])
        assert len(_daemons(token)) == 1
        assert first.wait(60) == 0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, 9)
        kill_all(token)
        first.wait(10)


@pytest.mark.parametrize(
    ("argv", "helper"),
    [
        (["python", "-c", "print(1)"], True),
        (["python", "-m", "pip", "install", "x"], True),
        (["python", "-m", "remote_debug.container", DAEMON_FLAG], True),
        (["python", "-m", "debugpy.adapter"], True),
        (["/usr/bin/pip3", "list"], False),  # argv[0] is the interpreter slot: only later words count
        (["python", "/usr/bin/pip3", "list"], True),
        (["python", "train.py"], False),
        (["python", "-m", "torch.distributed.run", "train.py"], False),  # a launcher lives long: it may start it
        (["python3", "/opt/ml/input/data/sm_drivers/distributed_drivers/torchrun_driver.py"], False),
    ],
)
def test_helpers_never_start_the_daemon(argv: list[str], helper: bool) -> None:
    assert is_helper(argv) is helper


def test_daemon_follows_the_shell_that_runs_the_job() -> None:
    """SDK v3's sm_train.sh runs a short helper script before the driver: the daemon follows the shell."""
    shell = subprocess.Popen(["sh", "-c", "sleep 30; true"], stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: Path(f"/proc/{shell.pid}/comm").read_text().strip() == "sh", 10, "the shell")
        assert watched_pid(4242, shell.pid) == shell.pid
        assert watched_pid(4242, os.getpid()) == 4242  # a Python parent (pytest here) is not a shell
        assert watched_pid(4242, 0) == 4242
    finally:
        shell.kill()
        shell.wait()
