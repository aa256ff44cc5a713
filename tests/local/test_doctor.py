"""``remote-debug doctor``: a missing plugin and a missing IAM action are reported with their fix, and a
correct setup passes (AWS's real session-manager-plugin on PATH, moto for STS/Logs, a policy-evaluating stand-in
for IAM's SimulatePrincipalPolicy on botocore's model, Stubber for SSM, a scripted DescribeTrainingJob)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from botocore.validate import validate_parameters
from typer.testing import CliRunner

from remote_debug.contract import manifest_lines as mlines
from remote_debug.contract import spec
from remote_debug.emulator.iam_policy import evaluate
from remote_debug.laptop.aws.sagemaker_logs import LOG_GROUP
from remote_debug.laptop.diagnose.doctor import PERMISSIONS, Doctor, passed
from tests.helpers.fake_aws import AWS_VARS, ScriptedSageMaker, describe_response, moto_cloud
from tests.helpers.ssm_plugin import needs_plugin, plugin_bin, plugin_version

REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's
USER_ID = "AKIAIOSFODNN7EXAMPLE"  # what moto's GetCallerIdentity answers as UserId
JOB = "doc-job"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX"
SECRET = "5e" * 32  # the job secret (in its environment; the manifest lines' MAC key)
TEMPLATES = Path(__file__).resolve().parents[2] / "templates" / "iam"
USER_POLICY: dict[str, Any] = json.loads((TEMPLATES / "user-policy.json").read_text())
_IAM = botocore.session.get_session().get_service_model("iam")
TIER = "/ssm/managed-instance/activation-tier"


@pytest.fixture
def cloud(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with moto_cloud(monkeypatch, REGION):
        yield


def _glob(pattern: str, value: str, *, case: bool = True) -> bool:
    """IAM's wildcards: ``*`` any run of characters, ``?`` one."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case else re.IGNORECASE) is not None


class PolicySimulator:
    """IAM's SimulatePrincipalPolicy over ``policies`` (the principal's identity policies), served on a
    real botocore IAM client after botocore validated the request; the answer is checked against the
    output shape.  Enough of IAM's evaluation for templates/iam: Allow/Deny, wildcards in Action
    (case-insensitive) and Resource, ``${...}`` policy variables from the context, StringEquals /
    StringLike / ArnLike.  A condition key (or policy variable) without a context value makes its
    statement not apply and is reported in ``MissingContextValues``: per resource when the call names
    resources, at the top for "*" (as IAM documents it).  A requested "*" matches only "*" resources."""

    def __init__(self, client: Any, policies: list[dict[str, Any]]) -> None:
        self.policies = policies
        self.calls: list[dict[str, Any]] = []
        client.meta.events.register("before-parameter-build.iam.SimulatePrincipalPolicy", self._remember)
        client.meta.events.register("before-call.iam.SimulatePrincipalPolicy", self._answer)

    def _remember(self, params: dict[str, Any], context: dict[str, Any], **_kwargs: Any) -> None:
        context["simulate"] = copy.deepcopy(params)

    def _answer(self, params: dict[str, Any], context: dict[str, Any], model: Any, **_kwargs: Any) -> Any:
        request = context["simulate"]
        self.calls.append(request)
        values = {e["ContextKeyName"]: e["ContextKeyValues"] for e in request.get("ContextEntries", [])}
        resources = request.get("ResourceArns") or ["*"]
        results = []
        for action in request["ActionNames"]:
            per_resource = [(r, *self.evaluate(action, r, values)) for r in resources]
            decisions = [d for _r, d, _m in per_resource]
            overall = (
                "explicitDeny"
                if "explicitDeny" in decisions
                else ("allowed" if all(d == "allowed" for d in decisions) else "implicitDeny")
            )
            result: dict[str, Any] = {
                "EvalActionName": action,
                "EvalResourceName": resources[0],
                "EvalDecision": overall,
            }
            if resources == ["*"]:
                result["MissingContextValues"] = per_resource[0][2]
            else:
                result["ResourceSpecificResults"] = [
                    {"EvalResourceName": r, "EvalResourceDecision": d, "MissingContextValues": m}
                    for r, d, m in per_resource
                ]
            results.append(result)
        parsed = {"EvaluationResults": results, "IsTruncated": False}
        validate_parameters(parsed, model.output_shape)
        return AWSResponse(params["url"], 200, {}, None), parsed

    def evaluate(self, action: str, resource: str, values: dict[str, list[str]]) -> tuple[str, list[str]]:
        result = evaluate(self.policies, action, resource, values)
        return result.decision.value, list(result.missing)


def without(policy: dict[str, Any], *actions: str) -> dict[str, Any]:
    """``policy`` with ``actions`` taken out of every statement."""
    out = copy.deepcopy(policy)
    for statement in out["Statement"]:
        if isinstance(statement["Action"], list):
            statement["Action"] = [a for a in statement["Action"] if a not in actions] or ["none:None"]
        elif statement["Action"] in actions:
            statement["Action"] = "none:None"
    return out


def tier_response(value: str) -> dict[str, Any]:
    return {"ServiceSetting": {"SettingId": TIER, "SettingValue": value, "Status": "Default"}}


class Clients:
    def __init__(
        self, policies: list[dict[str, Any]] | None = None, job_script: Any = None, tier: str | None = "advanced"
    ) -> None:
        self.sts = boto3.client("sts", region_name=REGION)
        self.iam = boto3.client("iam", region_name=REGION)
        self.ssm = boto3.client("ssm", region_name=REGION)
        self.logs = boto3.client("logs", region_name=REGION)
        self.sagemaker = boto3.client("sagemaker", region_name=REGION)
        if job_script is not None:
            ScriptedSageMaker(self.sagemaker, job_script)
        self.simulator = PolicySimulator(self.iam, [USER_POLICY] if policies is None else policies)
        self.ssm_stub = Stubber(self.ssm)
        if tier is not None:
            self.ssm_stub.add_response("get_service_setting", tier_response(tier), {"SettingId": TIER})
        self.ssm_stub.activate()

    def __call__(self, service: str) -> Any:
        return {"sts": self.sts, "iam": self.iam, "ssm": self.ssm, "logs": self.logs, "sagemaker": self.sagemaker}[
            service
        ]


def _by_name(checks: list[Any]) -> dict[str, Any]:
    return {c.name: c for c in checks}


def test_missing_plugin_and_missing_iam_action_say_how_to_fix(cloud: None) -> None:
    clients = Clients([without(USER_POLICY, "ssm:StartSession", "sagemaker:UpdateTrainingJob")])
    checks = _by_name(
        Doctor(
            clients=clients, which=lambda name: None if name == "session-manager-plugin" else shutil.which(name)
        ).run()
    )
    plugin = checks["session-manager-plugin"]
    assert plugin.status == "fail" and "not found" in plugin.detail
    assert "Session Manager plugin" in plugin.fix and plugin.fix.startswith("install")
    iam = checks["iam"]
    assert iam.status == "fail" and "ssm:StartSession" in iam.detail
    assert "sagemaker:UpdateTrainingJob" not in iam.detail  # only recommended: listed in the table
    assert "templates/iam/user-policy.json" in iam.fix
    table = {(row["action"], row["resource"]): row for row in iam.data["actions"]}
    start = table[("ssm:StartSession", "*")]
    assert start["decision"] == "implicitDeny" and start["required"]
    update = table[("sagemaker:UpdateTrainingJob", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/example-job")]
    assert update["decision"] == "implicitDeny" and not update["required"]
    assert checks["credentials"].status == "ok" and checks["credentials"].detail.startswith("arn:aws:")
    assert checks["openssh"].status == "ok" and checks["openssh"].detail.startswith("OpenSSH_")
    assert not passed(list(checks.values()))


def test_the_template_user_policy_passes_the_simulation_of_each_action_on_its_resource(cloud: None) -> None:
    clients = Clients()
    iam = _by_name(Doctor(clients=clients).run())["iam"]
    assert iam.status == "ok", iam.to_json()
    rows = {(row["action"], row["resource"]): row["decision"] for row in iam.data["actions"]}
    job_arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/example-job"
    assert rows == {
        ("sagemaker:DescribeTrainingJob", job_arn): "allowed",
        ("sagemaker:ListTrainingJobs", "*"): "allowed",
        ("sagemaker:ListTags", job_arn): "allowed",
        ("logs:FilterLogEvents", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{LOG_GROUP}:*"): "allowed",
        ("ssm:StartSession", "*"): "allowed",  # the node, by its target-id tag
        ("ssm:StartSession", f"arn:aws:ssm:{REGION}::document/AWS-StartSSHSession"): "allowed",
        ("ssm:TerminateSession", f"arn:aws:ssm:{REGION}:{ACCOUNT}:session/*"): "allowed",
        ("ssm:ResumeSession", f"arn:aws:ssm:{REGION}:{ACCOUNT}:session/*"): "allowed",
        ("sagemaker:CreateTrainingJob", job_arn): "allowed",
        ("sagemaker:AddTags", job_arn): "allowed",
        ("sagemaker:UpdateTrainingJob", job_arn): "allowed",
        ("sagemaker:StopTrainingJob", job_arn): "allowed",
    }
    assert len(rows) == len(PERMISSIONS)
    # what the requests carry: the caller's id, which SSM tags their sessions with and enable() their jobs
    for call in clients.simulator.calls:
        context = {e["ContextKeyName"]: e["ContextKeyValues"] for e in call["ContextEntries"]}
        assert context["aws:userid"] == [USER_ID]
        assert context["ssm:resourceTag/aws:ssmmessages:session-id"] == [USER_ID]
        assert context["ssm:resourceTag/aws:ssmmessages:target-id"] == ["sagemaker-training-job:example-job_algo-1"]
        for owner_tag in ("aws:RequestTag/remote-debug:owner", "aws:ResourceTag/remote-debug:owner"):
            assert context[owner_tag] == [USER_ID]
        assert len(call["ResourceArns"]) == 1


def test_sessions_named_after_the_user_id_never_match(cloud: None) -> None:
    """The form the templates had: a session id starts with the user or role-session name, never with
    ``${aws:userid}`` (AIDA.../AROA...:name), so ending or resuming one's own session was denied."""
    old = copy.deepcopy(USER_POLICY)
    [statement] = [s for s in old["Statement"] if s["Sid"] == "EndAndResumeOwnSessionsOnly"]
    statement.pop("Condition")
    statement["Resource"] = "arn:aws:ssm:*:*:session/${aws:userid}-*"
    iam = _by_name(Doctor(clients=Clients([old])).run())["iam"]
    assert iam.status == "fail" and iam.detail.endswith("lacks ssm:TerminateSession, ssm:ResumeSession")


def test_an_action_iam_cannot_judge_without_a_context_value_is_not_allowed(cloud: None) -> None:
    policy = copy.deepcopy(USER_POLICY)
    [statement] = [s for s in policy["Statement"] if s["Sid"] == "TheSshSessionDocuments"]
    statement["Condition"] = {"StringLike": {"aws:SourceVpce": "vpce-0123*"}}  # a key doctor cannot know
    iam = _by_name(Doctor(clients=Clients([policy])).run())["iam"]
    start = [row for row in iam.data["actions"] if row["resource"].endswith(":document/AWS-StartSSHSession")]
    assert start[0]["decision"] == "undetermined" and start[0]["missing_context"] == ["aws:SourceVpce"]
    assert iam.status == "warn" and "ssm:StartSession" in iam.detail and "aws:SourceVpce" in iam.detail
    assert "every needed action is allowed" not in iam.detail


@needs_plugin
def test_correct_setup_passes_with_a_reachable_job(
    cloud: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = plugin_bin(tmp_path / "bin")  # AWS's real session-manager-plugin, found on PATH
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env = spec.DebugSpec(job_name=JOB, client_public_key=KEY, job_secret=SECRET, transport=spec.Transport.SSM).to_env()
    clients = Clients(
        job_script=lambda _n, job: describe_response(job, "InProgress", "Training", environment=env), tier=None
    )
    node = spec.NodeManifest(
        job_name=JOB,
        node="algo-1",
        hosts=["algo-1"],
        sshd_host="127.0.0.1",
        sshd_port=40022,
        ssh_user="root",
        host_public_key=KEY,
        code_dir="/opt/ml/code",
        state=spec.NodeState.RUNNING,
    )
    clients.logs.create_log_group(logGroupName=LOG_GROUP)
    clients.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=f"{JOB}/algo-1-1700000000")
    clients.logs.put_log_events(
        logGroupName=LOG_GROUP,
        logStreamName=f"{JOB}/algo-1-1700000000",
        logEvents=[
            {
                "timestamp": int(time.time() * 1000),
                "message": mlines.format_manifest_line(
                    "algo-1", node, boot="b", started=int(time.time() * 1000), seq=1, secret=SECRET
                ),
            }
        ],
    )
    target = f"sagemaker-training-job:{JOB}_algo-1"
    clients.ssm_stub.add_response(
        "start_session",
        {"SessionId": "probe-1", "TokenValue": "tok", "StreamUrl": "wss://x"},
        {"Target": target, "DocumentName": "AWS-StartSSHSession", "Parameters": {"portNumber": ["40022"]}},
    )
    clients.ssm_stub.add_response("terminate_session", {"SessionId": "probe-1"}, {"SessionId": "probe-1"})
    checks = Doctor(clients=clients).run(JOB)
    assert passed(checks), [c.to_json() for c in checks if c.status != "ok"]
    by_name = _by_name(checks)
    plugin = by_name["session-manager-plugin"]
    # the version the binary itself prints (1.2.650.0 for the shared build), and where it was found
    assert plugin.detail == f"{plugin_version()} at {bin_dir / 'session-manager-plugin'}"
    assert plugin.data == {"version": plugin_version(), "path": str(bin_dir / "session-manager-plugin")}
    assert by_name["job state"].detail == "InProgress / Training"
    assert by_name["debugging enabled"].detail == "transport ssm"
    assert by_name["manifests"].detail == "published by algo-1"
    assert by_name["ssm target"].detail == f"{target} accepts sessions"
    assert "hybrid instance tier" not in by_name  # an ssm job does not need it
    clients.ssm_stub.assert_no_pending_responses()  # the probe session was terminated at once


def test_job_without_debugging_and_unreachable_target(cloud: None) -> None:
    clients = Clients(
        job_script=lambda _n, job: describe_response(job, "InProgress", "Training", environment={}, remote_debug=False),
        tier=None,
    )
    checks = _by_name(Doctor(clients=clients).run(JOB))
    assert checks["debugging enabled"].status == "fail"
    assert "was not started with remote-debug" in checks["debugging enabled"].detail
    assert "remote_debug.enable" in checks["debugging enabled"].fix
    assert "ssm target" not in checks


def test_assumed_role_is_simulated_as_its_role(cloud: None) -> None:
    iam = boto3.client("iam", region_name=REGION)
    iam.create_role(RoleName="Dev", Path="/team/", AssumeRolePolicyDocument="{}")
    doctor = Doctor(clients=lambda service: iam)
    assert (
        doctor.principal_arn("arn:aws:sts::123456789012:assumed-role/Dev/me@example.com")
        == "arn:aws:iam::123456789012:role/team/Dev"
    )
    assert (
        doctor.principal_arn("arn:aws:sts::123456789012:assumed-role/Gone/x") == "arn:aws:iam::123456789012:role/Gone"
    )
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
    # nor GetServiceSetting: the tier is a warning too, and doctor goes on (no "doctor" failure)
    assert checks["hybrid instance tier"].status == "warn" and "doctor" not in checks


def test_standard_tier_fails_a_hybrid_job_with_the_command_that_fixes_it(cloud: None) -> None:
    hybrid = spec.Transport.HYBRID
    env = spec.DebugSpec(job_name=JOB, client_public_key=KEY, job_secret=SECRET, transport=hybrid).to_env()
    clients = Clients(
        job_script=lambda _n, job: describe_response(
            job, "InProgress", "Downloading", environment=env, remote_debug=False
        ),
        tier="standard",
    )
    checks = _by_name(Doctor(clients=clients).run(JOB))
    tier = checks["hybrid instance tier"]
    assert tier.status == "fail" and f"job {JOB} uses the hybrid transport" in tier.detail
    assert tier.fix.startswith(
        "aws ssm update-service-setting --setting-id /ssm/managed-instance/activation-tier "
        f"--setting-value advanced --region {REGION}"
    )
    assert not passed(list(checks.values()))
    clients.ssm_stub.assert_no_pending_responses()


@pytest.mark.parametrize(("tier", "status"), [("advanced", "ok"), ("standard", "warn")])
def test_without_a_job_the_tier_is_a_warning_at_most(cloud: None, tier: str, status: str) -> None:
    clients = Clients(tier=tier)
    check = _by_name(Doctor(clients=clients).run())["hybrid instance tier"]
    assert check.status == status and (status == "ok" or "transport='hybrid' only" in check.detail)
    assert status == "ok" or "--setting-value advanced" in check.fix
    clients.ssm_stub.assert_no_pending_responses()


def test_an_unreadable_tier_is_a_warning_with_the_permission_to_add(cloud: None) -> None:
    clients = Clients(tier=None)
    clients.ssm_stub.add_client_error("get_service_setting", "AccessDeniedException", "not authorized")
    check = _by_name(Doctor(clients=clients).run())["hybrid instance tier"]
    assert check.status == "warn" and "ssm:GetServiceSetting" in check.fix and "\n" not in check.detail


def test_a_machine_without_aws_passes_on_its_local_pieces(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local jobs need no AWS: its checks are skipped (unless asked for), and doctor exits 0."""
    from remote_debug.cli import app
    from remote_debug.laptop.aws import clients as aws

    for name in (*AWS_VARS, "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    aws.configure()  # no --profile/--region (the CLI sets them again from its own options)
    assert not aws.configured()  # HOME is a fresh one: no ~/.aws
    result = CliRunner().invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    for name in ("openssh", "sshd", "debugpy"):
        assert checks[name]["status"] == "ok", checks[name]
    for name in ("session-manager-plugin", "region", "credentials", "iam"):
        assert (checks[name]["status"], checks[name]["detail"]) == ("skip", "skipped (local only; --aws to check)")

    asked = CliRunner().invoke(app, ["doctor", "--aws", "--json"])
    assert asked.exit_code == 1, asked.output
    checks = {c["name"]: c for c in json.loads(asked.stdout)["checks"]}
    assert checks["region"]["status"] == "fail" and checks["region"]["fix"]


def test_aws_configured_for_other_work_is_advice_unless_asked(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A laptop with a ~/.aws for other work (here: a profile with no region) still passes for local jobs: the AWS
    findings are shown as warnings; --aws (or --profile/--region) makes them failures."""
    from remote_debug.cli import app
    from remote_debug.laptop.aws import clients as aws

    for name in (*AWS_VARS, "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    (home / ".aws").mkdir()
    (home / ".aws" / "config").write_text("[profile other]\noutput = json\n")
    aws.configure()
    assert aws.configured()
    result = CliRunner().invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    region = {c["name"]: c for c in json.loads(result.stdout)["checks"]}["region"]
    assert region["status"] == "warn" and region["fix"].endswith("--aws makes this a failure"), region
    asked = CliRunner().invoke(app, ["doctor", "--aws", "--json"])
    assert asked.exit_code == 1, asked.output
    assert {c["name"]: c for c in json.loads(asked.stdout)["checks"]}["region"]["status"] == "fail"


def test_a_missing_sshd_fails_local_jobs_with_the_fix(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMOTE_DEBUG_SSHD", str(tmp_path / "no-sshd"))
    checks = _by_name(Doctor(check_aws=False).run())
    assert checks["sshd"].status == "fail" and "openssh-server" in checks["sshd"].fix
    assert not passed(list(checks.values()))


@pytest.mark.parametrize("owner", [USER_ID, "AIDASOMEONEELSE0000"])
def test_a_job_is_simulated_with_its_real_tags_and_the_remote_debug_condition_key(cloud: None, owner: str) -> None:
    """doctor JOB: aws:ResourceTag/... are the job's own tags (ListTags), and every simulation carries
    sagemaker:EnableRemoteDebug, the key AWS documents for turning remote debugging on.  Someone else's job
    may be read, not updated, tagged or stopped (user-policy.json)."""
    clients = Clients(tier=None)
    ScriptedSageMaker(
        clients.sagemaker,
        lambda _n, job: describe_response(job, "InProgress", "Training"),
        tags=[{"Key": "remote-debug:owner", "Value": owner}, {"Key": "team", "Value": "vision"}],
    )
    iam = _by_name(Doctor(clients=clients).run(JOB))["iam"]
    for call in clients.simulator.calls:
        context = {e["ContextKeyName"]: (e["ContextKeyValues"], e["ContextKeyType"]) for e in call["ContextEntries"]}
        assert context["sagemaker:EnableRemoteDebug"] == (["true"], "boolean")
        assert context["aws:ResourceTag/remote-debug:owner"] == ([owner], "string")
        assert context["aws:ResourceTag/team"] == (["vision"], "string")
    job_arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{JOB}"
    rows = {row["action"]: row["decision"] for row in iam.data["actions"] if row["resource"] == job_arn}
    changes = {a: rows[a] for a in ("sagemaker:AddTags", "sagemaker:UpdateTrainingJob", "sagemaker:StopTrainingJob")}
    assert rows["sagemaker:DescribeTrainingJob"] == "allowed"
    if owner == USER_ID:
        assert set(changes.values()) == {"allowed"} and iam.status == "ok", iam.to_json()
    else:
        assert set(changes.values()) == {"implicitDeny"}, rows
        assert iam.status == "warn" and "sagemaker:UpdateTrainingJob" in iam.detail


def test_a_condition_on_enable_remote_debug_is_simulated(cloud: None) -> None:
    """An admin's Deny on turning remote debugging on shows up in doctor (it has the key's value)."""
    deny = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "NoRemoteDebug",
                "Effect": "Deny",
                "Action": ["sagemaker:CreateTrainingJob", "sagemaker:UpdateTrainingJob"],
                "Resource": "*",
                "Condition": {"Bool": {"sagemaker:EnableRemoteDebug": "true"}},
            }
        ],
    }
    iam = _by_name(Doctor(clients=Clients([USER_POLICY, deny])).run())["iam"]
    rows = {row["action"]: row["decision"] for row in iam.data["actions"]}
    assert rows["sagemaker:CreateTrainingJob"] == rows["sagemaker:UpdateTrainingJob"] == "explicitDeny"
    assert rows["sagemaker:StopTrainingJob"] == "allowed"


def test_an_sshd_that_cannot_start_fails_not_ok(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found is not enough: an sshd missing a library (or refusing the hook's config) fails every local node."""
    broken = tmp_path / "sshd"
    broken.write_text(
        "#!/bin/sh\necho 'sshd: error while loading shared libraries: libcrypto.so.3: cannot open "
        "shared object file' >&2\nexit 127\n"
    )
    broken.chmod(0o755)
    monkeypatch.setenv("REMOTE_DEBUG_SSHD", str(broken))
    checks = _by_name(Doctor(check_aws=False).run())
    assert checks["sshd"].status == "fail", checks["sshd"]
    assert "does not start" in checks["sshd"].detail and "libcrypto.so.3" in checks["sshd"].detail
    assert "\n" not in checks["sshd"].detail and "openssh-server" in checks["sshd"].fix
    assert not passed(list(checks.values()))
    monkeypatch.delenv("REMOTE_DEBUG_SSHD")  # the machine's own sshd starts: ok
    assert _by_name(Doctor(check_aws=False).run())["sshd"].status == "ok"
