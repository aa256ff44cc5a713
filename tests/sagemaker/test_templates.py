"""templates/: IAM policies that IAM would accept, with real action names; Dockerfile snippet; launchers."""

from __future__ import annotations

import json
import py_compile
import re
from pathlib import Path
from typing import Any

import botocore.session
import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
POLICIES = sorted((TEMPLATES / "iam").glob("*.json"))

# IAM service prefix -> botocore service name (the operation names are the API action names).
SERVICES = {"sagemaker": "sagemaker", "ssm": "ssm", "logs": "logs", "iam": "iam", "sts": "sts"}
# Actions that are permissions without an API operation of the same name, as AWS documents them
# (iam:PassRole; the SSM agent's message channels, an API botocore does not model).
PERMISSION_ONLY = {
    "iam:PassRole",
    "ssmmessages:CreateControlChannel", "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel", "ssmmessages:OpenDataChannel",
}
CONDITION_OPERATORS = {"StringEquals", "StringLike", "Bool", "BoolIfExists", "ArnLike", "ArnEquals"}
_SESSION = botocore.session.get_session()


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _actions(policy: dict[str, Any]) -> list[str]:
    return [a for statement in policy["Statement"] for a in _list(statement["Action"])]


def test_there_are_policies_for_the_user_and_the_execution_role() -> None:
    names = {p.name for p in POLICIES}
    assert {"user-policy.json", "execution-role-policy.json"} <= names


@pytest.mark.parametrize("path", POLICIES, ids=[p.name for p in POLICIES])
def test_policy_is_well_formed(path: Path) -> None:
    policy = json.loads(path.read_text())
    assert set(policy) == {"Version", "Statement"} and policy["Version"] == "2012-10-17"
    sids = [s["Sid"] for s in policy["Statement"]]
    assert len(sids) == len(set(sids)) and all(re.fullmatch(r"[A-Za-z0-9]+", s) for s in sids)
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        trust = "Principal" in statement
        assert set(statement) <= {"Sid", "Effect", "Action", "Resource", "Condition", "Principal"}
        assert ("Resource" in statement) != trust  # identity policies name resources; trust policies principals
        for resource in _list(statement.get("Resource", [])):
            assert resource == "*" or resource.startswith("arn:aws:"), resource
        for operator, keys in statement.get("Condition", {}).items():
            assert operator in CONDITION_OPERATORS, operator
            assert all(isinstance(v, str) for value in keys.values() for v in _list(value))
        assert "*" not in "".join(_list(statement["Action"])), "no wildcard actions"


@pytest.mark.parametrize("path", POLICIES, ids=[p.name for p in POLICIES])
def test_actions_are_real(path: Path) -> None:
    available = set(_SESSION.get_available_services())
    for action in _actions(json.loads(path.read_text())):
        prefix, _, name = action.partition(":")
        if action in PERMISSION_ONLY:
            # Checked as far as botocore can: iam:PassRole is indeed no IAM operation, and ssmmessages
            # has no model at all (if one appears, this fails and its actions get checked for real).
            if prefix in available:
                assert name not in _SESSION.get_service_model(SERVICES[prefix]).operation_names, action
            else:
                assert prefix == "ssmmessages", action
            continue
        operations = _SESSION.get_service_model(SERVICES[prefix]).operation_names
        assert name in operations, f"{action} is not an operation of {prefix}"


def test_user_policy_scopes_what_the_issue_asks() -> None:
    policy = json.loads((TEMPLATES / "iam" / "user-policy.json").read_text())
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    sessions = by_sid["SshSessionsToTrainingContainersOnly"]
    assert sessions["Condition"] == {
        "StringLike": {"ssm:resourceTag/aws:ssmmessages:target-id": "sagemaker-training-job:*"}
    }
    own = by_sid["EnableAndStopOwnJobsOnly"]
    assert set(own["Action"]) == {"sagemaker:UpdateTrainingJob", "sagemaker:StopTrainingJob"}
    assert own["Condition"] == {"StringEquals": {"aws:ResourceTag/remote-debug:owner": "${aws:userid}"}}
    assert set(by_sid["EndAndResumeOwnSessionsOnly"]["Action"]) == {"ssm:TerminateSession", "ssm:ResumeSession"}
    assert {"sagemaker:DescribeTrainingJob", "ssm:StartSession"} <= set(_actions(policy))
    role = json.loads((TEMPLATES / "iam" / "execution-role-policy.json").read_text())
    assert sorted(_actions(role)) == sorted(a for a in PERMISSION_ONLY if a.startswith("ssmmessages:"))


def test_byoc_snippet() -> None:
    text = (TEMPLATES / "byoc" / "Dockerfile.snippet").read_text()
    assert "openssh-server" in text and "pip install --no-cache-dir remote-debug" in text
    assert 'ENTRYPOINT ["python", "-m", "remote_debug.container", "--"]' in text
    # amazon-ssm-agent only when asked for (hybrid transport), never started at build time
    assert "ARG REMOTE_DEBUG_HYBRID=0" in text and "amazon-ssm-agent.deb" in text
    assert 'if [ "$REMOTE_DEBUG_HYBRID" = "1" ]' in text


@pytest.mark.parametrize("path", sorted((TEMPLATES / "launchers").rglob("*.py")), ids=lambda p: p.name)
def test_launchers_compile(path: Path, tmp_path: Path) -> None:
    # Importing each against its SDK is tested in the SDK venvs (test_sdk_capture.py).
    py_compile.compile(str(path), cfile=str(tmp_path / "x.pyc"), doraise=True)
