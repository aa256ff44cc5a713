"""One real job under the hook: its sshd (real ssh client) and its rank's debugpy listener (raw DAP).

The job runs a script that waits for a release file, so every check happens while training runs;
the last test releases it and checks how the node and the rank report the end.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.contract import spec
from tests.helpers.hook_runs import (
    PYTHON,
    WAIT_SCRIPT,
    HookRun,
    MiniDap,
    alive,
    base_env,
    hook_run,
    listen_addresses,
    make_key,
    non_loopback_ipv4,
    refuses,
    wait_for,
)

CHILD_SCRIPT = """\
import os, pathlib, sys
pathlib.Path(sys.argv[1]).write_text(os.environ.get("REMOTE_DEBUG_CLAIMED_BY", "<unset>"))
"""
# The training script: starts a Python subprocess first (it must not claim a rank), then waits.
JOB_SCRIPT = """\
import os, pathlib, subprocess, sys, time
marks = pathlib.Path(sys.argv[1])
subprocess.run([sys.executable, str(marks.parent / "child.py"), str(marks / "child-saw")], check=True)
""" + WAIT_SCRIPT.split("\n", 1)[1]


class Job:
    def __init__(self, run: HookRun, key: Path) -> None:
        self.run = run
        self.key = key
        node = run.node()
        self.port: int = node["sshd_port"]
        self.host_key: str = node["host_public_key"]
        self.sshd_pid = int((run.state_dir / "sshd.pid").read_text())

    def ssh(
        self,
        *extra: str,
        known_hosts: Path | None = None,
        command: str = "echo hi",
        env: dict[str, str] | None = None,
        key: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        if known_hosts is None:
            known_hosts = self.run.root / "known_hosts"
            known_hosts.write_text(f"[127.0.0.1]:{self.port} {self.host_key}\n")
        argv = [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            str(key or self.key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "BatchMode=yes",
            *extra,
            "-p",
            str(self.port),
            f"{pwd.getpwuid(os.geteuid()).pw_name}@127.0.0.1",
            command,
        ]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory, client_key: tuple[Path, str]) -> Iterator[Job]:
    root = tmp_path_factory.mktemp("job")
    (root / "train.py").write_text(JOB_SCRIPT)
    (root / "child.py").write_text(CHILD_SCRIPT)
    env = base_env(root, client_key[1], job="ssh-test")
    env["REMOTE_DEBUG_CODE_DIR"] = str(root)
    with hook_run(root, env) as run:
        run.start(PYTHON, str(root / "train.py"), str(root / "marks"))
        wait_for(
            lambda: (run.marks / "started").exists() or run.proc.poll() is not None,  # type: ignore[union-attr]
            60,
            "the training script to start",
        )
        assert run.proc is not None and run.proc.poll() is None, run.stderr
        yield Job(run, client_key[0])


def test_node_manifest_has_sshd_and_host_key(job: Job) -> None:
    manifest = spec.read_node_manifest(job.run.manifest_dir)
    assert manifest is not None
    assert manifest.state == "running"
    assert manifest.job_name == "ssh-test" and manifest.node == "algo-1" and manifest.hosts == ["algo-1"]
    assert manifest.sshd_host == "127.0.0.1"
    assert 0 < manifest.sshd_port != 22
    assert manifest.ssh_user == pwd.getpwuid(os.geteuid()).pw_name
    assert manifest.code_dir == str(job.run.root)
    assert manifest.hook_pid == job.run.proc.pid  # type: ignore[union-attr]
    assert manifest.errors == []
    published = (job.run.state_dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    assert manifest.host_public_key == " ".join(published)
    assert [r.rank for r in manifest.ranks] == [0]


def test_ssh_login_with_pinned_host_key(job: Job) -> None:
    result = job.ssh()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hi"


def test_ssh_login_with_host_key_alias(job: Job) -> None:
    """The laptop's layout: HostKeyAlias + own known_hosts file."""
    known = job.run.root / "known_hosts_alias"
    known.write_text(f"ssh-test.algo-1 {job.host_key}\n")
    result = job.ssh("-o", "HostKeyAlias=ssh-test.algo-1", known_hosts=known, command="true")
    assert result.returncode == 0, result.stderr


def test_password_auth_is_refused(job: Job) -> None:
    askpass = job.run.root / "askpass.sh"
    asked = job.run.root / "askpass-called"
    askpass.write_text(f"#!/bin/sh\ntouch {asked}\necho hunter2\n")
    askpass.chmod(0o755)
    env = {**os.environ, "SSH_ASKPASS": str(askpass), "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"}
    result = job.ssh(
        "-o",
        "BatchMode=no",
        "-o",
        "PreferredAuthentications=password,keyboard-interactive",
        "-o",
        "PubkeyAuthentication=no",
        "-o",
        "NumberOfPasswordPrompts=1",
        env=env,
    )
    assert result.returncode == 255
    assert "Permission denied (publickey)" in result.stderr  # the server offers nothing else
    assert not asked.exists()  # ...so no password was ever asked for


def test_unknown_client_key_is_refused(job: Job) -> None:
    other = job.run.root / "other_client"
    make_key(other)
    result = job.ssh(key=other)
    assert result.returncode == 255
    assert "Permission denied" in result.stderr


def test_wrong_host_key_is_refused(job: Job) -> None:
    impostor = job.run.root / "impostor_host_key"
    public = make_key(impostor)
    known = job.run.root / "known_hosts_wrong"
    known.write_text(f"[127.0.0.1]:{job.port} {' '.join(public.split()[:2])}\n")
    result = job.ssh(known_hosts=known)
    assert result.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr or "verification failed" in result.stderr


def test_sshd_listens_on_loopback_only(job: Job) -> None:
    assert listen_addresses(job.port) == ["0100007F"]  # 127.0.0.1, and nothing on IPv6 or 0.0.0.0
    other = non_loopback_ipv4()
    if other is not None:
        assert refuses(other, job.port)


def test_rank_listener_loopback_only_and_speaks_dap(job: Job) -> None:
    rank = job.run.rank(0)
    assert rank["state"] == "listening" and rank["world_size"] == 1 and rank["local_rank"] == 0
    assert rank["pid"] == int((job.run.marks / "started").read_text())
    port = rank["port"]
    assert port > 0
    assert listen_addresses(port) == ["0100007F"]
    other = non_loopback_ipv4()
    if other is not None:
        assert refuses(other, port)
    dap = MiniDap(port)
    try:
        response = dap.initialize()
    finally:
        dap.close()
    assert response["success"] is True and response["command"] == "initialize"
    assert "supportsConfigurationDoneRequest" in response.get("body", {})


def test_subprocesses_of_a_rank_do_not_claim(job: Job) -> None:
    claimed_by = (job.run.marks / "child-saw").read_text()
    assert claimed_by == str(job.run.rank(0)["pid"])
    assert job.run.rank_files() == ["rank-0.json"]  # neither the child nor debugpy's adapter added one


def test_job_end_stops_sshd_and_reports(job: Job) -> None:
    assert alive(job.sshd_pid)
    job.run.release()
    assert job.run.wait(30) == 0
    assert not alive(job.sshd_pid)
    node = job.run.node()
    assert node["state"] == "completed" and node["exit_code"] == 0
    assert job.run.rank(0)["state"] == "finished"
    assert refuses("127.0.0.1", job.port)
    assert "frozen modules" not in job.run.stderr  # PYDEVD_DISABLE_FILE_VALIDATION reached the rank
    ours = [line for line in job.run.stderr.splitlines() if line.startswith("[remote-debug]")]
    assert len(ours) == 1 and "sshd on 127.0.0.1:" in ours[0]  # one line on the happy path
