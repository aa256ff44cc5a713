"""The ProxyCommand (``remote-debug proxy %h %p``) when it cannot relay: one line on ssh's stderr (the
user's terminal, or VS Code Remote-SSH's log), never a Python traceback, and nothing from ssh itself;
through our own tunnels (paramiko), a one-line error from the command too.  Real OpenSSH; local jobs as
their state files."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import paramiko
import pytest

from remote_debug.contract import spec
from remote_debug.laptop.connection import job_connection as connection
from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.connection.tunnels import NodeTunnel
from remote_debug.laptop.core import keys
from remote_debug.laptop.core.paths import StatePaths
from tests.local.test_local_faults import KEY, make_fake_job
from tests.local.test_prune import ended_local_job

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")


def manifest(job: str, port: int = 2222) -> spec.NodeManifest:
    return spec.NodeManifest(
        job_name=job,
        node="algo-1",
        hosts=["algo-1"],
        sshd_host="127.0.0.1",
        sshd_port=port,
        ssh_user="root",
        host_public_key=KEY,
        code_dir="/opt/ml/code",
        state=spec.NodeState.RUNNING,
        hook_pid=1,
    )


def ssh_to(paths: StatePaths, alias: str) -> subprocess.CompletedProcess[str]:
    """OpenSSH through our ProxyCommand, with our generated config, as VS Code Remote-SSH runs it."""
    return subprocess.run(
        ["ssh", "-F", str(paths.ssh_config), "-o", "BatchMode=yes", alias, "true"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@needs_ssh
def test_ssh_to_an_ended_jobs_alias_is_one_line(home: Path) -> None:
    paths = StatePaths.default()
    ended_local_job(paths, "over", status="Failed")
    ssh_config.write_job_entries(paths, "over", connection.host_entries("over", {"algo-1": manifest("over")}, paths))
    refused = ssh_to(paths, "algo-1.over")
    assert refused.returncode == 255  # ssh's own
    assert refused.stderr.splitlines() == [
        "remote-debug: error: job over has ended (Failed); 'remote-debug prune' removes what remote-debug wrote for it"
    ]


@needs_ssh
def test_a_node_the_proxy_cannot_reach_is_one_line(home: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """The job runs but its sshd does not answer: ssh says so in one line; our own tunnels (paramiko) get
    the handshake error they always got, not a server that hangs up (the refusal banner is OpenSSH's only)."""
    paths = StatePaths.default()
    port = closed_port()
    make_fake_job(paths, "stuck", sleeper.pid, sshd_port=port)
    keys.ensure_job_key(paths, "stuck")
    entries = connection.host_entries("stuck", {"algo-1": manifest("stuck", port)}, paths)
    ssh_config.write_job_entries(paths, "stuck", entries)
    refused = ssh_to(paths, "algo-1.stuck")
    assert refused.returncode == 255
    assert refused.stderr.splitlines() == [
        "remote-debug: error: cannot reach node algo-1 of job stuck: Connection refused"
    ], refused.stderr
    tunnel = NodeTunnel(connection.endpoint_for(entries[0], paths))
    with pytest.raises(paramiko.SSHException, match="Error reading SSH protocol banner"):
        tunnel.connect()
    tunnel.close()
