"""``remote-debug doctor``: a missing plugin and a missing IAM action are reported with their fix, and a
correct setup passes (moto for STS/Logs, Stubber for IAM's SimulatePrincipalPolicy and SSM, a scripted
DescribeTrainingJob)."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from typer.testing import CliRunner

from remote_debug import manifest_lines as mlines
from remote_debug import spec
from remote_debug.local.backends.sagemaker_logs import LOG_GROUP
from remote_debug.local.doctor import RECOMMENDED_ACTIONS, REQUIRED_ACTIONS, Doctor, passed
from tests.fake_aws import ScriptedSageMaker, describe_response, install_fake_plugin, moto_cloud

REGION = "us-west-2"
JOB = "doc-job"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX"
ALL_ACTIONS = sorted({**REQUIRED_ACTIONS, **RECOMMENDED_ACTIONS})


@pytest.fixture
def cloud(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with moto_cloud(monkeypatch, REGION):
        yield


def _simulation(denied: set[str]) -> dict[str, Any]:
    return {"EvaluationResults": [
        {"EvalActionName": a, "EvalResourceName": "*", "EvalDecision": "implicitDeny" if a in denied else "allowed"}
        for a in ALL_ACTIONS
    ], "IsTruncated": False}


class Clients:
    def __init__(self, denied: set[str], job_script: Any = None) -> None:
        self.sts = boto3.client("sts", region_name=REGION)
        self.iam = boto3.client("iam", region_name=REGION)
        self.ssm = boto3.client("ssm", region_name=REGION)
        self.logs = boto3.client("logs", region_name=REGION)
        self.sagemaker = boto3.client("sagemaker", region_name=REGION)
        if job_script is not None:
            ScriptedSageMaker(self.sagemaker, job_script)
        self.iam_stub = Stubber(self.iam)
        caller = self.sts.get_caller_identity()["Arn"]
        self.iam_stub.add_response("simulate_principal_policy", _simulation(denied), {
            "PolicySourceArn": caller, "ActionNames": ALL_ACTIONS, "ContextEntries": ANY,
        })
        self.iam_stub.activate()
        self.ssm_stub = Stubber(self.ssm)
        self.ssm_stub.activate()

    def __call__(self, service: str) -> Any:
        return {"sts": self.sts, "iam": self.iam, "ssm": self.ssm, "logs": self.logs,
                "sagemaker": self.sagemaker}[service]


def _by_name(checks: list[Any]) -> dict[str, Any]:
    return {c.name: c for c in checks}


def test_missing_plugin_and_missing_iam_action_say_how_to_fix(cloud: None) -> None:
    clients = Clients(denied={"ssm:StartSession", "sagemaker:UpdateTrainingJob"})
    checks = _by_name(Doctor(clients=clients, which=lambda name: None if name == "session-manager-plugin"
                             else shutil.which(name)).run())
    plugin = checks["session-manager-plugin"]
    assert plugin.status == "fail" and "not found" in plugin.detail
    assert "Session Manager plugin" in plugin.fix and plugin.fix.startswith("install")
    iam = checks["iam"]
    assert iam.status == "fail" and "ssm:StartSession" in iam.detail
    assert "sagemaker:UpdateTrainingJob" not in iam.detail  # only recommended: listed in the table
    assert "templates/iam" in iam.fix
    table = {row["action"]: row for row in iam.data["actions"]}
    assert table["ssm:StartSession"]["decision"] == "implicitDeny" and table["ssm:StartSession"]["required"]
    assert table["sagemaker:UpdateTrainingJob"]["decision"] == "implicitDeny"
    assert not table["sagemaker:UpdateTrainingJob"]["required"]
    assert checks["credentials"].status == "ok" and checks["credentials"].detail.startswith("arn:aws:")
    assert checks["openssh"].status == "ok" and checks["openssh"].detail.startswith("OpenSSH_")
    assert not passed(list(checks.values()))
    clients.iam_stub.assert_no_pending_responses()


def test_correct_setup_passes_with_a_reachable_job(cloud: None, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_plugin(tmp_path / "bin", tmp_path / "log")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env = spec.DebugSpec(job_name=JOB, client_public_key=KEY, transport="ssm").to_env()
    clients = Clients(denied=set(), job_script=lambda _n, job: describe_response(
        job, "InProgress", "Training", environment=env))
    node = spec.NodeManifest(job_name=JOB, node="algo-1", hosts=["algo-1"], sshd_host="127.0.0.1", sshd_port=40022,
                             ssh_user="root", host_public_key=KEY, code_dir="/opt/ml/code", state="running")
    clients.logs.create_log_group(logGroupName=LOG_GROUP)
    clients.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=f"{JOB}/algo-1-1700000000")
    clients.logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=f"{JOB}/algo-1-1700000000", logEvents=[
        {"timestamp": int(time.time() * 1000),
         "message": mlines.format_manifest_line("algo-1", node, boot="b", seq=1)}])
    target = f"sagemaker-training-job:{JOB}_algo-1"
    clients.ssm_stub.add_response(
        "start_session", {"SessionId": "probe-1", "TokenValue": "tok", "StreamUrl": "wss://x"},
        {"Target": target, "DocumentName": "AWS-StartSSHSession", "Parameters": {"portNumber": ["40022"]}})
    clients.ssm_stub.add_response("terminate_session", {"SessionId": "probe-1"}, {"SessionId": "probe-1"})
    checks = Doctor(clients=clients).run(JOB)
    assert passed(checks), [c.to_json() for c in checks if c.status != "ok"]
    by_name = _by_name(checks)
    assert by_name["session-manager-plugin"].detail.startswith("1.2.707.0 at ")
    assert by_name["job state"].detail == "InProgress / Training"
    assert by_name["debugging enabled"].detail == "transport ssm"
    assert by_name["manifests"].detail == "published by algo-1"
    assert by_name["ssm target"].detail == f"{target} accepts sessions"
    clients.ssm_stub.assert_no_pending_responses()  # the probe session was terminated at once


def test_job_without_debugging_and_unreachable_target(cloud: None) -> None:
    clients = Clients(denied=set(), job_script=lambda _n, job: describe_response(
        job, "InProgress", "Training", environment={}, remote_debug=False))
    checks = _by_name(Doctor(clients=clients).run(JOB))
    assert checks["debugging enabled"].status == "fail"
    assert "was not started with remote-debug" in checks["debugging enabled"].detail
    assert "remote_debug.enable" in checks["debugging enabled"].fix
    assert "ssm target" not in checks


def test_assumed_role_is_simulated_as_its_role(cloud: None) -> None:
    iam = boto3.client("iam", region_name=REGION)
    iam.create_role(RoleName="Dev", Path="/team/", AssumeRolePolicyDocument="{}")
    doctor = Doctor(clients=lambda service: iam)
    assert doctor.principal_arn("arn:aws:sts::123456789012:assumed-role/Dev/me@example.com") == \
        "arn:aws:iam::123456789012:role/team/Dev"
    assert doctor.principal_arn("arn:aws:sts::123456789012:assumed-role/Gone/x") == \
        "arn:aws:iam::123456789012:role/Gone"
    assert doctor.principal_arn("arn:aws:iam::123456789012:user/alice") == "arn:aws:iam::123456789012:user/alice"
    assert doctor.principal_arn("arn:aws:iam::123456789012:root") is None


def test_cli_json_and_exit_code(cloud: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from remote_debug.cli import app

    monkeypatch.setenv("PATH", str(tmp_path))  # neither the plugin nor ssh: both fail with a fix
    result = CliRunner().invoke(app, ["--region", "eu-west-1", "doctor", "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    checks = _by_name([type("C", (), c) for c in data["checks"]])
    assert data["ok"] is False
    assert checks["region"].detail == "eu-west-1 (from --region)"
    assert checks["session-manager-plugin"].status == "fail" and checks["openssh"].status == "fail"
    assert all(c["fix"] for c in data["checks"] if c["status"] == "fail")
    # moto does not implement SimulatePrincipalPolicy: reported as a warning with what to allow
    assert checks["iam"].status == "warn" and "iam:SimulatePrincipalPolicy" in checks["iam"].fix
