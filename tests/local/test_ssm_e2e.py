"""End to end, offline, with every part after the network hop real:

real OpenSSH (``ssh -F`` our generated config) and our tunnels -> ``remote-debug proxy`` (a ProxyCommand
subprocess) -> StartSession served by a local fake SSM endpoint (``AWS_ENDPOINT_URL_SSM``) -> a stand-in
``session-manager-plugin`` on PATH that checks the AWS CLI contract -> the real sshd that the container
hook started under a fake ``/opt/ml`` -> debugpy stopped at a breakpoint in each of 2 torchrun ranks.

The node's stdout goes to CloudWatch Logs (moto) as SageMaker would ship it, and the laptop reads the
manifest back from there; DescribeTrainingJob follows the job: Starting -> Downloading -> Training ->
Completed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import textwrap
import threading
import time
from pathlib import Path
from typing import IO, Any

import boto3
import pytest
from moto import mock_aws

from remote_debug.local import aws
from remote_debug.local.attach import Attacher, AttachOptions, AttachResult
from remote_debug.local.backends import SageMakerBackend
from remote_debug.local.backends.sagemaker_logs import LOG_GROUP
from remote_debug.local.headless import HeadlessPlan
from remote_debug.local.keys import ensure_job_key
from remote_debug.local.paths import StatePaths
from tests.container.helpers import PYTHON, REPO, TOKEN_ENV, base_env, free_port, kill_all, pids_with_env, wait_for
from tests.event_log import EventLog
from tests.fake_aws import FakeSsm, ScriptedSageMaker, describe_response, install_fake_plugin, plugin_records

JOB = "e2e-sm-job"
REGION = "us-west-2"
TRAIN = textwrap.dedent(
    """
    import os, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tensor = torch.tensor([float(rank + 1)])
    dist.all_reduce(tensor)
    secret = 1000 + 7 * rank  # BREAK-HERE
    while not os.path.exists(os.environ["RD_RELEASE"]):  # keeps the job up for the ssh checks
        time.sleep(0.1)
    dist.barrier()
    dist.destroy_process_group()
    """
)


def _break_line(path: Path) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "BREAK-HERE" in line)


class Node:
    """One SageMaker-shaped node: the container hook running torchrun under a fake /opt/ml, its stdout
    shipped line by line to the job's CloudWatch log stream."""

    def __init__(self, root: Path, public_key: str, logs: Any) -> None:
        self.root = root
        ml = root / "opt" / "ml"
        (ml / "input" / "config").mkdir(parents=True)
        (ml / "input" / "config" / "resourceconfig.json").write_text(json.dumps(
            {"current_host": "algo-1", "hosts": ["algo-1"], "current_group_name": "homogeneousCluster",
             "network_interface_name": "lo"}))
        self.code = ml / "code"
        self.code.mkdir()
        (self.code / "train.py").write_text(TRAIN)
        self.release = root / "release"
        env = base_env(root, public_key, job=JOB, transport="ssm", wait_seconds=120)
        env.update({
            "SM_INPUT_CONFIG_DIR": str(ml / "input" / "config"),
            "REMOTE_DEBUG_CODE_DIR": str(self.code),
            "TRAINING_JOB_NAME": JOB,
            "TRAINING_JOB_ARN": f"arn:aws:sagemaker:{REGION}:123456789012:training-job/{JOB}",
            "RD_RELEASE": str(self.release),
        })
        self.env = env
        self.token = f"{TOKEN_ENV}={env[TOKEN_ENV]}\0"
        self.logs = logs
        self.stream = f"{JOB}/algo-1-{int(time.time())}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.lines: list[str] = []

    def start(self) -> None:
        self.logs.create_log_group(logGroupName=LOG_GROUP)
        self.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=self.stream)
        command = [PYTHON, "-m", "remote_debug.container", "--", PYTHON, "-m", "torch.distributed.run",
                   "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                   "--master_port", str(free_port()), "train.py"]
        self.proc = subprocess.Popen(command, env=self.env, cwd=self.code, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=open(self.root / "stderr.log", "wb"),  # noqa: SIM115
                                     start_new_session=True)
        assert self.proc.stdout is not None
        threading.Thread(target=self._ship, args=(self.proc.stdout,), daemon=True).start()

    def _ship(self, stdout: IO[bytes]) -> None:
        """What SageMaker does with a container's stdout: one log event per line."""
        for raw in stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            self.logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=self.stream,
                                     logEvents=[{"timestamp": int(time.time() * 1000), "message": line}])

    def status(self, n: int, job: str) -> dict[str, Any]:
        """The job as DescribeTrainingJob reports it; the container starts when Training begins."""
        environment = {k: v for k, v in self.env.items() if k.startswith("REMOTE_DEBUG_")}
        if n >= 4 and self.proc is None:
            self.start()
        code = self.proc.poll() if self.proc is not None else None
        if n < 2:
            step = ("InProgress", "Starting", "Preparing the instances for training")
        elif n < 4:
            step = ("InProgress", "Downloading", "Downloading the training image")
        elif code is None:
            step = ("InProgress", "Training", "Training image download completed. Training in progress.")
        else:
            step = ("Completed", "Completed", "") if code == 0 else ("Failed", "Failed", "")
        return describe_response(job, *step[:2], environment=environment, message=step[2],
                                 failure=None if code in (None, 0) else f"AlgorithmError: exit code {code}")

    def stop(self) -> None:
        self.release.write_text("")
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        kill_all(self.token)
        if self.proc is not None:
            self.proc.wait(10)


def _ssh(paths: StatePaths, *command: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    result = subprocess.run(["ssh", "-F", str(paths.ssh_config), "-o", "BatchMode=yes", f"algo-1.{JOB}", *command],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return time.monotonic() - started, result


def _ssh_direct(paths: StatePaths, port: int, known_hosts: Path) -> float:
    """The same login straight to sshd (no proxy, no SSM): the baseline for the ratio."""
    started = time.monotonic()
    subprocess.run(
        ["ssh", "-F", "/dev/null", "-i", str(paths.job_key(JOB)), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={known_hosts}", "-o", f"HostKeyAlias=remote-debug.algo-1.{JOB}",
         "-o", "StrictHostKeyChecking=yes", "-p", str(port), f"{pwd.getpwuid(os.geteuid()).pw_name}@127.0.0.1",
         "true"], check=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    return time.monotonic() - started


@pytest.mark.skipif(shutil.which("ssh") is None or not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH")
def test_ssh_and_debugger_through_the_fake_ssm_path(home: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    install_fake_plugin(tmp_path / "bin", tmp_path / "plugin-log")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PLUGIN_LOG", str(tmp_path / "plugin-log"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    aws.configure()
    paths = StatePaths.default()
    _, public_key = ensure_job_key(paths, JOB)
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "train.py").write_text(TRAIN)
    line = _break_line(workspace / "train.py")

    with FakeSsm() as fake, mock_aws():
        monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", fake.url)  # how the proxy subprocess finds it
        monkeypatch.setenv(TOKEN_ENV, str(tmp_path))  # proxies, plugins, ssh: found and killed at the end
        sagemaker = boto3.client("sagemaker", region_name=REGION)
        logs = boto3.client("logs", region_name=REGION)
        node = Node(tmp_path / "node", public_key, logs)
        ScriptedSageMaker(sagemaker, node.status)
        backend = SageMakerBackend(paths, clients={"sagemaker": sagemaker, "logs": logs}.__getitem__,
                                   cache_seconds=0.2, log_interval=0.3)
        events = EventLog()
        result: list[AttachResult] = []
        errors: list[BaseException] = []
        plan = HeadlessPlan(breakpoints={str(workspace / "train.py"): [line]}, steps=1)
        options = AttachOptions(workspace=workspace, headless=plan, edit_user_ssh_config=False)

        def attach() -> None:
            try:
                result.append(Attacher(backend, JOB, options, events.append, paths).run())
            except BaseException as exc:
                errors.append(exc)

        try:
            started = time.monotonic()
            thread = threading.Thread(target=attach, daemon=True)
            thread.start()
            wait_for(lambda: errors or len([e for e in events if e["event"] == "stopped"]) >= 2, 240,
                     "both ranks to stop at the breakpoint")
            assert not errors, errors
            to_stops = time.monotonic() - started

            # real OpenSSH with our generated config, through the same ProxyCommand chain
            ssh_seconds, login = _ssh(paths, "echo", "in-job")
            assert login.returncode == 0 and login.stdout.strip() == "in-job", login.stderr
            manifest = backend.manifests(JOB)["algo-1"]
            assert manifest is not None
            direct = _ssh_direct(paths, manifest.sshd_port, paths.job_known_hosts(JOB))
            repeat, again = _ssh(paths, "true")
            assert again.returncode == 0, again.stderr
            print(f"\n[e2e] attach -> both ranks stopped: {to_stops:.2f} s; ssh login + command through "
                  f"proxy/StartSession/plugin: {ssh_seconds:.2f} s and {repeat:.2f} s; straight to sshd: "
                  f"{direct:.2f} s (x{repeat / direct:.1f})")

            node.release.write_text("")
            thread.join(120)
            assert not thread.is_alive() and not errors, errors
        finally:
            node.stop()
            thread_token = f"{TOKEN_ENV}={tmp_path}\0"
            if errors or not result:
                kill_all(thread_token)

        [res] = result
        assert res.job.status == "Completed" and res.exit_code == 0
        assert [r.rank for r in res.reports] == [0, 1]
        for report in res.reports:
            assert report.error is None and report.stops, report
            first = report.stops[0]
            assert Path(first.file) == workspace / "train.py" and first.line == line
            assert first.variables["rank"] == str(report.rank)
            assert first.variables["tensor"].startswith("tensor([3.")
            assert report.stops[1].variables["secret"] == str(1000 + 7 * report.rank)
        progress = [e["secondary_status"] for e in events if e["event"] == "job-status"]
        assert progress[:3] == ["Starting", "Downloading", "Training"]

        # The StartSession requests and the plugin invocations, as the AWS CLI makes them.
        requests = fake.calls("StartSession")
        records = plugin_records(tmp_path / "plugin-log")
        assert len(requests) == len(records) >= 2  # our tunnel and each ssh run
        expected = {"Target": f"sagemaker-training-job:{JOB}_algo-1", "DocumentName": "AWS-StartSSHSession",
                    "Parameters": {"portNumber": [str(manifest.sshd_port)]}}
        assert all(r == expected for r in requests)
        record = records[-1]
        assert record["argv"][:5] == ["AWS_SSM_START_SESSION_RESPONSE", REGION, "StartSession", "",
                                      json.dumps(expected)]
        assert record["argv"][5] == fake.url
        print(f"[e2e] plugin argv: {json.dumps(record['argv'])}")
        # No zombie sessions: ssh sends its ProxyCommand SIGHUP on exit, the proxy stops the plugin and
        # terminates the session.  (The tunnel's session ended with the job: sshd closed it.)
        ssh_sessions = {r["session_id"] for r in records[1:]}
        wait_for(lambda: ssh_sessions <= {b["SessionId"] for b in fake.calls("TerminateSession")}, 30,
                 "the ssh runs' sessions to be terminated")
        assert pids_with_env(f"{TOKEN_ENV}={tmp_path}\0") == []
    aws.configure()
