"""IAM's policy evaluation (remote_debug/emulator/iam_policy.py), and the emulator's --policy mode refusing
calls as AWS does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from remote_debug.emulator.iam_policy import Decision, PolicyError, evaluate
from remote_debug.emulator.service import ACCOUNT_ID, Emulator

JOB = "arn:aws:sagemaker:us-east-1:123456789012:training-job/j1"
ME = {"aws:userid": "AIDAME"}


def policy(*statements: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"Version": "2012-10-17", "Statement": list(statements)}]


def allow(action: Any = "sagemaker:*", resource: Any = "*", **condition: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"Effect": "Allow", "Action": action, "Resource": resource}
    if condition:
        out["Condition"] = condition
    return out


def decide(
    policies: list[dict[str, Any]],
    context: dict[str, Any] | None = None,
    action: str = "sagemaker:AddTags",
    resource: str = JOB,
) -> str:
    return evaluate(policies, action, resource, {**ME, **(context or {})}).decision.value


def test_deny_wins_over_allow_and_nothing_is_an_implicit_deny() -> None:
    assert decide(policy(allow())) == "allowed"
    assert decide(policy(allow(), {**allow(), "Effect": "Deny"})) == "explicitDeny"
    assert decide(policy(allow("ssm:StartSession"))) == "implicitDeny"
    assert decide(policy(allow("SageMaker:addtags"))) == "allowed"  # actions are case-insensitive


def test_not_action_not_resource_and_arn_segments() -> None:
    assert decide(policy({"Effect": "Allow", "NotAction": "ssm:*", "Resource": "*"})) == "allowed"
    assert decide(policy({"Effect": "Allow", "NotAction": "sagemaker:Add*", "Resource": "*"})) == "implicitDeny"
    assert decide(policy({"Effect": "Allow", "Action": "*", "NotResource": JOB})) == "implicitDeny"
    assert decide(policy(allow(resource="arn:aws:sagemaker:*:*:training-job/*"))) == "allowed"
    assert decide(policy(allow(resource="arn:aws:sagemaker:*:*:training-job/k*"))) == "implicitDeny"
    assert decide(policy(allow(resource="arn:aws:sagemaker:us-east-?:*:training-job/j?"))) == "allowed"
    assert decide(policy(allow(resource="arn:aws:sagemaker:*:*:Training-job/*"))) == "implicitDeny"  # case counts


def test_policy_variables_in_resources_and_conditions() -> None:
    mine = allow(resource="arn:aws:ssm:*:*:session/${aws:username}-*")
    session = "arn:aws:ssm:us-east-1:123456789012:session/alice-0abc"
    assert decide(policy(mine), {"aws:username": "alice"}, "sagemaker:X", session) == "allowed"
    assert decide(policy(mine), {"aws:username": "bob"}, "sagemaker:X", session) == "implicitDeny"
    assert decide(policy(mine), {}, "sagemaker:X", session) == "implicitDeny"  # no value: matches nothing
    owner = allow(StringEquals={"aws:ResourceTag/remote-debug:owner": "${aws:userid}"})
    assert decide(policy(owner), {"aws:ResourceTag/remote-debug:owner": "AIDAME"}) == "allowed"
    assert decide(policy(owner), {"aws:resourcetag/remote-debug:owner": "AIDAME"}) == "allowed"  # keys: any case
    assert decide(policy(owner), {"aws:ResourceTag/remote-debug:owner": "AIDAYOU"}) == "implicitDeny"
    # a variable's value is literal, never a wildcard; ${*} is a literal '*'
    like = allow(StringLike={"aws:RequestTag/k": "${aws:userid}"})
    assert decide(policy(like), {"aws:userid": "AIDA*", "aws:RequestTag/k": "AIDAME"}) == "implicitDeny"
    assert decide(policy(allow(StringEquals={"aws:RequestTag/k": "a${*}"})), {"aws:RequestTag/k": "a*"}) == "allowed"
    default = allow(StringEquals={"aws:RequestTag/k": "${aws:username, 'none'}"})
    assert decide(policy(default), {"aws:RequestTag/k": "none"}) == "allowed"


def test_missing_keys_if_exists_null_and_negation() -> None:
    key = "aws:ResourceTag/remote-debug:owner"
    equals = allow(StringEquals={key: "${aws:userid}"})
    result = evaluate(policy(equals), "sagemaker:AddTags", JOB, ME)
    assert result.decision == Decision.IMPLICIT_DENY and result.missing == (key,)
    assert decide(policy(allow(StringEqualsIfExists={key: "${aws:userid}"}))) == "allowed"
    assert decide(policy(allow(StringEqualsIfExists={key: "${aws:userid}"})), {key: "AIDAYOU"}) == "implicitDeny"
    assert decide(policy(allow(Null={key: "true"}))) == "allowed"
    assert decide(policy(allow(Null={key: "true"})), {key: "x"}) == "implicitDeny"
    assert decide(policy(allow(Null={key: "false"})), {key: "x"}) == "allowed"
    assert decide(policy(allow(StringNotEquals={key: "AIDAYOU"}))) == "allowed"  # absent: "not equal" holds
    assert decide(policy(allow(StringNotLike={key: "AIDA*"})), {key: "AIDAYOU"}) == "implicitDeny"
    assert (
        decide(policy(allow(Bool={"sagemaker:EnableRemoteDebug": "false"})), {"sagemaker:EnableRemoteDebug": "true"})
        == "implicitDeny"
    )
    assert (
        decide(policy(allow(Bool={"sagemaker:EnableRemoteDebug": True})), {"sagemaker:EnableRemoteDebug": "true"})
        == "allowed"
    )
    # two keys AND, two values OR
    both = allow(StringEquals={"aws:RequestTag/a": ["1", "2"], "aws:RequestTag/b": "3"})
    assert decide(policy(both), {"aws:RequestTag/a": "2", "aws:RequestTag/b": "3"}) == "allowed"
    assert decide(policy(both), {"aws:RequestTag/a": "2", "aws:RequestTag/b": "4"}) == "implicitDeny"


def test_set_operators_and_arns() -> None:
    ours = allow(**{"ForAllValues:StringLike": {"aws:TagKeys": "remote-debug:*"}})
    assert decide(policy(ours), {"aws:TagKeys": ["remote-debug:owner", "remote-debug:transport"]}) == "allowed"
    assert decide(policy(ours), {"aws:TagKeys": ["remote-debug:owner", "team"]}) == "implicitDeny"
    assert decide(policy(ours)) == "allowed"  # no keys at all: vacuously
    any_of = allow(**{"ForAnyValue:StringEquals": {"aws:TagKeys": "team"}})
    assert decide(policy(any_of), {"aws:TagKeys": ["remote-debug:owner", "team"]}) == "allowed"
    assert decide(policy(any_of)) == "implicitDeny"
    role = allow(ArnLike={"aws:PrincipalArn": "arn:aws:iam::*:role/dev*"})
    assert decide(policy(role), {"aws:PrincipalArn": "arn:aws:iam::123456789012:role/dev-team"}) == "allowed"
    assert decide(policy(role), {"aws:PrincipalArn": "arn:aws:iam::123456789012:user/dev"}) == "implicitDeny"
    assert (
        decide(policy(allow(NumericLessThan={"aws:MultiFactorAuthAge": "3600"})), {"aws:MultiFactorAuthAge": "10"})
        == "allowed"
    )


def test_what_it_cannot_judge_is_an_error_not_a_guess() -> None:
    with pytest.raises(PolicyError, match="unsupported condition operator IpAddress"):
        decide(policy(allow(IpAddress={"aws:SourceIp": "10.0.0.0/8"})), {"aws:SourceIp": "10.1.2.3"})
    with pytest.raises(PolicyError, match="Effect"):
        decide(policy({"Effect": "Maybe", "Action": "*", "Resource": "*"}))


# --- the emulator's --policy mode ------------------------------------------------------------------------

TEMPLATE = json.loads((Path(__file__).resolve().parents[2] / "templates" / "iam" / "user-policy.json").read_text())


def test_the_emulator_refuses_what_the_policy_does_not_allow_in_aws_words(tmp_path: Path) -> None:
    with Emulator(tmp_path / "state", policy=[TEMPLATE]) as emulator:
        iam = boto3.client(
            "iam",
            endpoint_url=emulator.url,
            region_name="us-east-1",
            aws_access_key_id=emulator.keys.access_key_id,
            aws_secret_access_key=emulator.keys.secret_access_key,
        )
        iam.create_user(UserName="alice")
        key = iam.create_access_key(UserName="alice")["AccessKey"]
        session = boto3.Session(
            aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name="us-east-1"
        )
        sagemaker = session.client("sagemaker", endpoint_url=emulator.url)
        logs = session.client("logs", endpoint_url=emulator.url)
        me = session.client("sts", endpoint_url=emulator.url).get_caller_identity()
        assert me["Arn"] == f"arn:aws:iam::{ACCOUNT_ID}:user/alice"  # who the policy is evaluated for
        with pytest.raises(ClientError) as info:  # a job not tagged with its launcher as owner
            sagemaker.create_training_job(
                TrainingJobName="j1",
                RoleArn=f"arn:aws:iam::{ACCOUNT_ID}:role/r",
                AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"},
                OutputDataConfig={"S3OutputPath": "s3://b/o"},
                StoppingCondition={"MaxRuntimeInSeconds": 60},
                ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
            )
        job_arn = f"arn:aws:sagemaker:us-east-1:{ACCOUNT_ID}:training-job/j1"
        assert info.value.response["Error"] == {
            "Code": "AccessDeniedException",
            "Message": f"User: arn:aws:iam::{ACCOUNT_ID}:user/alice is not authorized to perform: "
            f"sagemaker:CreateTrainingJob on resource: {job_arn} because no identity-based policy "
            "allows the sagemaker:CreateTrainingJob action",
        }
        assert sagemaker.list_training_jobs()["TrainingJobSummaries"] == []  # allowed, and served
        with pytest.raises(ClientError, match=r"AccessDeniedException.*sagemaker:StopTrainingJob"):
            sagemaker.stop_training_job(TrainingJobName="j1")
        # forwarded to moto, checked all the same: the training logs may be read, no other group
        with pytest.raises(ClientError, match=r"AccessDeniedException.*logs:FilterLogEvents.*log-group:/other"):
            logs.filter_log_events(logGroupName="/other")
        # allowed: moto answers (ResourceNotFoundException, unless an earlier test in this process made the group:
        # moto's state is per process)
        try:
            logs.filter_log_events(logGroupName="/aws/sagemaker/TrainingJobs")
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ResourceNotFoundException", exc.response


def test_without_a_policy_nothing_is_checked(tmp_path: Path) -> None:
    with Emulator(tmp_path / "state") as emulator:
        sagemaker = boto3.client(
            "sagemaker",
            endpoint_url=emulator.url,
            region_name="us-east-1",
            aws_access_key_id=emulator.keys.access_key_id,
            aws_secret_access_key=emulator.keys.secret_access_key,
        )
        with pytest.raises(ClientError) as info:
            sagemaker.stop_training_job(TrainingJobName="j1")
        assert info.value.response["Error"]["Code"] != "AccessDeniedException"
