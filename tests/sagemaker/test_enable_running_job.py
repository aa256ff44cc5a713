"""``remote-debug enable JOB``: DescribeTrainingJob, then UpdateTrainingJob only in Downloading/Training.

moto has no UpdateTrainingJob, so the client is a real botocore client behind ``Stubber``, which
checks every request (and canned response) against the service model.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from remote_debug import cli
from remote_debug.cli import enable as enable_cli
from remote_debug.contract.spec import ContractError
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws.enable import update
from remote_debug.laptop.core.errors import UserError

JOB = "rd-running-1"
ARN = f"arn:aws:sagemaker:eu-west-1:123456789012:training-job/{JOB}"
SPEC_ENV = {"REMOTE_DEBUG_SPEC_VERSION": "1", "REMOTE_DEBUG_JOB": JOB}


def describe(
    secondary: str,
    status: str = "InProgress",
    *,
    enabled: bool = False,
    environment: dict[str, str] | None = None,
    isolation: bool = False,
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "TrainingJobName": JOB,
        "TrainingJobArn": ARN,
        "ModelArtifacts": {"S3ModelArtifacts": "s3://b/m"},
        "TrainingJobStatus": status,
        "SecondaryStatus": secondary,
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "CreationTime": dt.datetime(2026, 1, 1),
        "Environment": SPEC_ENV if environment is None else environment,
        "EnableNetworkIsolation": isolation,
    }
    if enabled:
        response["RemoteDebugConfig"] = {"EnableRemoteDebug": True}
    return response


@pytest.fixture
def stubbed() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("sagemaker", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="y")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def expect_describe(stubber: Stubber, response: dict[str, Any]) -> None:
    stubber.add_response("describe_training_job", response, {"TrainingJobName": JOB})


def expect_update(stubber: Stubber) -> None:
    # Note the parameter: UpdateTrainingJob's member is RemoteDebugConfig (shape RemoteDebugConfigForUpdate).
    stubber.add_response(
        "update_training_job",
        {"TrainingJobArn": ARN},
        {"TrainingJobName": JOB, "RemoteDebugConfig": {"EnableRemoteDebug": True}},
    )


@pytest.mark.parametrize("secondary", ["Downloading", "Training"])
def test_updates_in_the_updatable_states(stubbed: tuple[Any, Stubber], secondary: str) -> None:
    client, stubber = stubbed
    expect_describe(stubber, describe(secondary))
    expect_update(stubber)
    result = update.enable_running_job(client, JOB)
    assert result.to_json() == {
        "job": JOB,
        "updated": True,
        "status": "InProgress",
        "secondary_status": secondary,
        "has_spec": True,
        "claimed": False,
    }


@pytest.mark.parametrize(
    ("secondary", "status"),
    [
        ("Starting", "InProgress"),
        ("Pending", "InProgress"),
        ("Uploading", "InProgress"),
        ("Stopping", "Stopping"),
        ("Completed", "Completed"),
        ("Failed", "Failed"),
        ("Stopped", "Stopped"),
    ],
)
def test_other_states_are_refused_without_an_update(stubbed: tuple[Any, Stubber], secondary: str, status: str) -> None:
    client, stubber = stubbed
    expect_describe(stubber, describe(secondary, status))
    with pytest.raises(UserError, match=rf"job {JOB} is {secondary} \({status}\).*Downloading or Training") as info:
        update.enable_running_job(client, JOB)
    assert "\n" not in str(info.value)


def test_already_enabled_is_not_updated_again(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    expect_describe(stubber, describe("Training", enabled=True, environment={}))
    result = update.enable_running_job(client, JOB)
    assert (result.updated, result.has_spec) == (False, False)


def test_network_isolation_is_refused(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    expect_describe(stubber, describe("Training", isolation=True))
    with pytest.raises(UserError) as info:
        update.enable_running_job(client, JOB)
    message = str(info.value)
    # why (no SSM session can reach it) and what to do, in one line
    assert f"job {JOB}: the job uses network isolation (EnableNetworkIsolation)" in message
    assert "no SSM session" in message and "turn network isolation off for debugging runs" in message
    assert "\n" not in message


def test_job_arns_and_bad_names() -> None:
    assert aws.parse_training_job(ARN) == (JOB, "eu-west-1")
    assert aws.parse_training_job(JOB) == (JOB, None)
    with pytest.raises(ContractError, match="bad job name"):
        aws.parse_training_job("no_underscores")
    with pytest.raises(ContractError, match="bad job name"):  # enable() on a bad name: before any AWS call
        update.enable_running_job(object(), "no_underscores")


# --- the command ----------------------------------------------------------------------------------


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stubbed: tuple[Any, Stubber]) -> Any:
    """``remote-debug ARGS`` in-process, with the stubbed client; returns (exit code, stdout, stderr, region)."""
    client, _stubber = stubbed
    regions: list[str] = []

    def open_client(region: str) -> Any:
        regions.append(region)
        return client

    monkeypatch.setattr(enable_cli, "open_client", open_client)
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> tuple[int, str, str, str | None]:
        monkeypatch.setattr(sys, "argv", ["remote-debug", *args])
        with pytest.raises(SystemExit) as info:
            cli.main()
        out = capsys.readouterr()
        return int(info.value.code or 0), out.out, out.err, regions[-1] if regions else None

    return run


def test_cli_json_and_the_region_from_aws_region(
    run_cli: Any, stubbed: tuple[Any, Stubber], monkeypatch: pytest.MonkeyPatch
) -> None:
    _client, stubber = stubbed
    expect_describe(stubber, describe("Training"))
    expect_update(stubber)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")  # botocore alone would not see this one
    code, out, _err, region = run_cli("enable", JOB, "--json")
    assert (code, region) == (0, "eu-west-1")
    assert json.loads(out) == {
        "job": JOB,
        "updated": True,
        "status": "InProgress",
        "secondary_status": "Training",
        "has_spec": True,
        "claimed": False,
        "region": "eu-west-1",
        "region_source": "AWS_REGION",
    }


def test_cli_takes_the_region_from_an_arn_and_warns_about_jobs_without_the_hook(
    run_cli: Any, stubbed: tuple[Any, Stubber], monkeypatch: pytest.MonkeyPatch
) -> None:
    _client, stubber = stubbed
    monkeypatch.setattr(enable_cli, "caller_id", lambda: "AIDAME")
    expect_describe(stubber, describe("Downloading", environment={}))
    expect_claim(stubber, [{"Key": "team", "Value": "ml"}])
    expect_update(stubber)
    code, out, err, region = run_cli("enable", ARN)
    assert (code, region) == (0, "eu-west-1")
    assert f"remote debugging enabled on job {JOB} (Downloading; region eu-west-1 from the job ARN)" in out
    assert "not created with remote_debug.enable()" in err
    assert "tagged rd-running-1 with remote-debug:owner = you" in err


def expect_claim(stubber: Stubber, tags: list[dict[str, str]], owner: str = "AIDAME") -> None:
    """ListTags, then (no owner tag) AddTags with the caller as owner: what user-policy.json allows on an unowned
    job, and what it requires before UpdateTrainingJob (tests/sagemaker/test_iam_commands.py evaluates it)."""
    stubber.add_response("list_tags", {"Tags": tags}, {"ResourceArn": ARN})
    if not any(t["Key"] == "remote-debug:owner" for t in tags):
        stubber.add_response(
            "add_tags",
            {"Tags": [{"Key": "remote-debug:owner", "Value": owner}]},
            {"ResourceArn": ARN, "Tags": [{"Key": "remote-debug:owner", "Value": owner}]},
        )


def test_a_job_launched_without_remote_debug_is_claimed_before_it_is_updated(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    expect_describe(stubber, describe("Training", environment={}))
    expect_claim(stubber, [])
    expect_update(stubber)
    assert update.enable_running_job(client, JOB, owner=lambda: "AIDAME").claimed
    # someone's job keeps its owner (the update is theirs to allow); a job with our hook is never claimed
    expect_describe(stubber, describe("Training", environment={}))
    expect_claim(stubber, [{"Key": "remote-debug:owner", "Value": "AIDASOMEONE"}])
    expect_update(stubber)
    assert not update.enable_running_job(client, JOB, owner=lambda: "AIDAME").claimed
    expect_describe(stubber, describe("Training"))
    expect_update(stubber)
    asked: list[str] = []

    def owner() -> str:
        asked.append("sts")
        return "AIDAME"

    assert not update.enable_running_job(client, JOB, owner=owner).claimed
    assert asked == []


def test_cli_refusal_is_one_line_and_exit_2(
    run_cli: Any, stubbed: tuple[Any, Stubber], monkeypatch: pytest.MonkeyPatch
) -> None:
    _client, stubber = stubbed
    expect_describe(stubber, describe("Completed", "Completed"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    code, out, err, _region = run_cli("enable", JOB)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"remote-debug: error: job {JOB} is Completed (Completed)")


def test_cli_unknown_job(run_cli: Any, stubbed: tuple[Any, Stubber], monkeypatch: pytest.MonkeyPatch) -> None:
    _client, stubber = stubbed
    stubber.add_client_error(
        "describe_training_job",
        service_error_code="ValidationException",
        service_message="Requested resource not found.",
        expected_params={"TrainingJobName": JOB},
    )
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    code, _out, err, _region = run_cli("enable", JOB)
    assert code == 2
    assert err.strip() == (
        f"remote-debug: error: no training job {JOB} in eu-west-1 (region from AWS_REGION): check the name and --region"
    )


def test_cli_without_a_region_says_where_it_looked(tmp_path: Any) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "remote_debug", "enable", JOB],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("remote-debug: error: no AWS region")
    assert all(where in line for where in ("--region", "AWS_REGION", "AWS_DEFAULT_REGION", "profile")), line
