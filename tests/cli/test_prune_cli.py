"""After a job ends, as users meet it through the command line (subprocesses, a real local job, real
OpenSSH): ``jobs`` shows its whole name, ``stop`` says what it waits for, ``ssh`` to its alias is one line,
``prune`` removes what we wrote for it in sentences, and ``ssh-config --remove`` undoes the rest.  (The
proxy's side of ``ssh``: test_proxy_cli.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.core import keys
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide import vscode_launch
from tests.cli.test_cli import SLEEPER, assert_one_line_error, wait_for
from tests.cli.test_proxy_cli import ssh_to
from tests.local.test_prune import USER_LAUNCH, ended_local_job, launch_configs, ssh_entries

USER_SSH = b"# mine\r\nHost *\r\n    ServerAliveInterval 30\r\n"
LONG_NAME = "a-sagemaker-style-training-job-name-that-runs-to-the-full-63-ch"  # 63 characters


def cli(*args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_DEBUG_"))}
    env["COLUMNS"] = str(columns)  # rich reads it: what a terminal that wide shows
    return subprocess.run(
        [sys.executable, "-m", "remote_debug", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_jobs_never_cuts_a_job_name(home: Path) -> None:
    paths = StatePaths.default()
    default_name = "local-20260101-120000"  # what launch --local names a job
    for name in (default_name, LONG_NAME):
        ended_local_job(paths, name)
    for columns in (60, 80, 100, 150):
        listed = cli("jobs", columns=columns)
        assert listed.returncode == 0, listed.stderr
        assert default_name in listed.stdout and LONG_NAME in listed.stdout, (columns, listed.stdout)
        assert "…" not in listed.stdout, listed.stdout


needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")


@needs_ssh
def test_an_ended_job_from_stop_to_prune(home: Path, tmp_path: Path) -> None:
    paths = StatePaths.default()
    src = tmp_path / "src"
    src.mkdir()
    (src / "sleeper.py").write_text(SLEEPER)
    workspace = tmp_path / "ws"
    (workspace / ".vscode").mkdir(parents=True)
    launch_json = vscode_launch.launch_json_path(workspace)
    launch_json.write_bytes(USER_LAUNCH.encode())
    (home / ".ssh").mkdir(mode=0o700)
    user_config = home / ".ssh" / "config"
    user_config.write_bytes(USER_SSH)

    launched = cli("launch", "--local", "--source-dir", str(src), "--json", "--", "python", "sleeper.py")
    assert launched.returncode == 0, launched.stderr
    job = json.loads(launched.stdout)["name"]  # the default name, local-<date>-<time>
    assert job.startswith("local-20")
    ended_local_job(paths, LONG_NAME)  # and a long one that ended
    node_json = paths.job_dir(job) / "nodes" / "algo-1" / "remote-debug" / "manifest" / "node.json"
    wait_for(lambda: node_json.exists())
    written = cli("ssh-config", job, "--json")
    assert written.returncode == 0, written.stderr
    assert json.loads(written.stdout)["aliases"] == [f"algo-1.{job}"]
    with_include = user_config.read_bytes()
    launch_configs(paths, workspace, job)  # what attach writes
    keys.ensure_job_key(paths, "other")  # a job we cannot ask about (no AWS here): prune keeps it
    ssh_entries(paths, "other")

    stopped = cli("stop", job)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stderr.startswith(f"remote-debug: stopping job {job}, waiting for it to end...\n"), stopped.stderr
    assert stopped.stdout == f"job {job} has ended: Stopped\n"

    refused = ssh_to(paths, f"algo-1.{job}")  # its sshd is gone, its port may be anyone's by now
    assert refused.returncode == 255
    assert refused.stderr.splitlines() == [
        f"remote-debug: error: job {job} has ended (Stopped); 'remote-debug prune' removes what remote-debug "
        "wrote for it"
    ], refused.stderr

    before = {p: p.read_bytes() for p in [*paths.root.rglob("*"), *workspace.rglob("*")] if p.is_file()}
    what = f"job dir, key, 1 Host entry, 1 known_hosts line, 3 launch.json configs in {launch_json}"
    dry = cli("prune", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"would remove job {LONG_NAME} (Completed): job dir",
        f"would remove job {job} (Stopped): {what}",
        "kept job other: cannot tell whether it has ended: not a local job, and AWS is not configured to ask "
        "SageMaker about it (pass --region / --profile)",
        "nothing removed (--dry-run): 'remote-debug prune' would remove 2 jobs",
    ]
    assert {p: p.read_bytes() for p in before} == before
    pruned = cli("prune")
    assert pruned.returncode == 0, pruned.stderr
    assert f"removed job {job} (Stopped): {what}\n" in pruned.stdout
    assert not paths.job_dir(job).exists() and not paths.job_key(job).exists()
    assert ssh_config.job_entries(paths, job).empty and not ssh_config.job_entries(paths, "other").empty
    assert launch_json.read_bytes() == USER_LAUNCH.encode()  # the user's bytes, comments and CRLFs included
    assert user_config.read_bytes() == with_include  # job "other" still has entries behind our Include
    listed = json.loads(cli("jobs", "--json").stdout)
    assert listed == []

    assert_one_line_error(cli("ssh-config", "--remove", "nosuchjob"), "job nosuchjob has no ssh entries to remove")
    dry = cli("ssh-config", "--remove", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith(
        f"would remove the ssh entries of 1 job (other)\nwould take our Include line out of {user_config}:\n"
    ), dry.stdout
    assert user_config.read_bytes() == with_include and ssh_config.jobs_with_entries(paths) == ["other"]
    removed = cli("ssh-config", "--remove")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.splitlines() == [
        "removed the ssh entries of 1 job (other)",
        f"restored {user_config}: our Include line is gone, the rest is as it was",
    ]
    assert user_config.read_bytes() == USER_SSH
    assert ssh_config.jobs_with_entries(paths) == [] and not paths.ssh_config.exists()
