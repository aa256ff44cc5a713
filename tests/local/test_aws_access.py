"""Why SageMaker jobs could not be listed, as ``jobs --json`` tells a program (the VS Code extension's warning):
real botocore, offline, against AWS config files the way users write them (an SSO profile never logged in,
a profile without credentials, a profile that does not exist), and an expired token from the service model
(Stubber)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws.access import PROBLEMS, access_error
from remote_debug.laptop.aws.sagemaker_backend import SageMakerBackend
from remote_debug.laptop.core.errors import AwsAccessError
from remote_debug.laptop.core.paths import StatePaths

CLI = Path(sys.executable).with_name("remote-debug")
AWS_VARS = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)
CONFIG = """\
[profile dev]
sso_session = corp
sso_account_id = 123456789012
sso_role_name = MLEngineer
region = us-west-2

[sso-session corp]
sso_start_url = https://corp.awsapps.com/start
sso_region = us-east-1

[profile keys]
region = eu-west-1

[profile broken]
sso_session = half
region = us-west-2

[sso-session half]
sso_start_url = https://corp.awsapps.com/start
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in AWS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "config").write_text(CONFIG)
    aws.configure()
    yield tmp_path
    aws.configure()


def _jobs_json(home: Path, **env: str) -> tuple[list[object], list[dict[str, object]]]:
    clean = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
    out = subprocess.run(
        [str(CLI), "jobs", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "HOME": str(home), **env},
    )
    assert out.returncode == 0, out.stderr  # local jobs still listed: SageMaker's trouble is not an error
    unlisted = [json.loads(line) for line in out.stderr.splitlines() if line.strip()]
    return json.loads(out.stdout), unlisted


@pytest.mark.parametrize(
    ("profile", "problem", "fix", "region"),
    [
        # an IAM Identity Center profile whose token was never fetched: botocore's SSOTokenLoadError
        ("dev", "sso-expired", "aws sso login --profile dev", "us-west-2"),
        # a profile with a region and no credentials anywhere
        ("keys", "no-credentials", "aws configure --profile keys", "eu-west-1"),
        # a name in neither file: not "no region", which is what botocore's lookup alone concludes
        ("nosuch", "profile-not-found", "aws configure list-profiles", None),
        # an sso-session without sso_region: botocore's InvalidConfigError when the client is made (it was a
        # traceback, and the local jobs went unlisted with it)
        ("broken", "no-credentials", "aws configure sso --profile broken", "us-west-2"),
    ],
)
def test_jobs_json_says_why_sagemaker_was_not_listed_and_the_fix(
    home: Path, profile: str, problem: str, fix: str, region: str | None
) -> None:
    listed, [unlisted] = _jobs_json(home, AWS_PROFILE=profile)
    assert listed == []
    assert unlisted["unlisted"] == "sagemaker"
    assert (unlisted["problem"], unlisted["fix"], unlisted["profile"], unlisted["region"]) == (
        problem,
        fix,
        profile,
        region,
    )
    message = str(unlisted["message"])
    assert "\n" not in message and message
    if problem == "sso-expired":
        assert "aws sso login --profile dev" in message  # the person reading the log line gets it too


def test_no_region_is_its_own_problem(home: Path) -> None:
    (home / ".aws" / "config").write_text("[profile plain]\noutput = json\n")
    _listed, [unlisted] = _jobs_json(
        home, AWS_PROFILE="plain", AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="secret"
    )
    assert (unlisted["problem"], unlisted["fix"]) == ("no-region", None)


def test_the_human_listing_keeps_one_plain_line(home: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
    out = subprocess.run(
        [str(CLI), "jobs"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "HOME": str(home), "AWS_PROFILE": "dev"},
    )
    [line] = out.stderr.splitlines()
    assert line.startswith("remote-debug: error: sagemaker jobs not listed:") and "aws sso login --profile dev" in line


@pytest.mark.parametrize(
    ("profile", "problem", "fix"),
    [
        ("dev", "sso-expired", "aws sso login --profile dev"),  # an SSO profile signs in again
        ("keys", "no-credentials", "aws configure --profile keys"),  # other credentials need new keys
    ],
)
def test_an_expired_token_from_the_service(
    home: Path, monkeypatch: pytest.MonkeyPatch, profile: str, problem: str, fix: str
) -> None:
    monkeypatch.setenv("AWS_PROFILE", profile)
    client = boto3.Session(
        region_name="us-west-2", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret"
    ).client("sagemaker")
    backend = SageMakerBackend(StatePaths(home / ".remote-debug"), clients=lambda _service: client)
    with Stubber(client) as stub:
        stub.add_client_error(
            "list_training_jobs",
            service_error_code="ExpiredTokenException",
            service_message="The security token included in the request is expired",
            http_status_code=400,
        )
        with pytest.raises(AwsAccessError) as info:
            backend.list_jobs()
    assert (info.value.problem, info.value.fix, info.value.profile) == (problem, fix, profile)
    assert info.value.problem in PROBLEMS


def test_a_non_aws_error_is_kept_whole(home: Path) -> None:
    error = access_error(RuntimeError("boom"), "listing SageMaker training jobs")
    assert (error.problem, error.fix, str(error)) == ("error", None, "listing SageMaker training jobs: boom")
