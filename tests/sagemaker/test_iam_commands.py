"""templates/iam/user-policy.json allows exactly what each command sends, evaluated as IAM does.

Each command's AWS calls are the ones the code really makes (recorded through fakes at the client boundary,
with botocore validating every parameter) or, for the transport, built by the very functions the code sends
them with.  Every call becomes the permissions AWS checks for it, with the request's real context
(``remote_debug.emulator.iam_requests``: the caller's aws:userid, the request's tags, the job's real tags,
sagemaker:EnableRemoteDebug, SSM's target and session tags), and each is evaluated with the template
(``remote_debug.emulator.iam_policy``).  Alice may do everything on her jobs, on a job launched with
remote_debug and on one that was not; Bob may not update, tag or stop Alice's jobs, nor end her sessions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from remote_debug.contract.spec import DebugOptions
from remote_debug.emulator.iam_policy import Decision
from remote_debug.emulator.iam_requests import Authorization, Caller, authorizations
from remote_debug.laptop.adopt import sagemaker_job as adopt
from remote_debug.laptop.aws import ssm, ssm_forward
from remote_debug.laptop.aws.enable import update
from remote_debug.laptop.aws.enable.request import draft_request
from remote_debug.laptop.aws.sagemaker_backend import SageMakerBackend
from remote_debug.laptop.aws.sagemaker_logs import LOG_GROUP
from remote_debug.laptop.aws.ssm_shell import ShellSession
from remote_debug.laptop.core.paths import StatePaths
from tests.helpers.adopt_fakes import ACCOUNT, REGION, FakeShell, PlainJob, Recorder

TEMPLATES = Path(__file__).resolve().parents[2] / "templates" / "iam"
USER_POLICY = [json.loads((TEMPLATES / "user-policy.json").read_text())]
ALICE = Caller("AIDAALICE00000000000", f"arn:aws:iam::{ACCOUNT}:user/alice", ACCOUNT)
BOB = Caller(
    "AROABOB0000000000000:bob@example.com", f"arn:aws:sts::{ACCOUNT}:assumed-role/dev/bob@example.com", ACCOUNT
)
Call = tuple[str, str, dict[str, Any]]  # (service, operation, params)


class World:
    """The account's tags as the calls leave them (AddTags lands), and who started each session."""

    def __init__(self, job_tags: dict[str, dict[str, str]]) -> None:
        self.job_tags = job_tags
        self.sessions: dict[str, str] = {}

    def decide(self, caller: Caller, calls: Iterable[Call]) -> list[tuple[str, Authorization, Decision]]:
        out = []
        for service, operation, params in calls:
            needed = authorizations(
                service,
                operation,
                params,
                region=REGION,
                caller=caller,
                tags_of=self.job_tags.get,
                starter_of=self.sessions.get,
            )
            decisions = [(a, a.check(USER_POLICY).decision) for a in needed]
            out += [(operation, a, d) for a, d in decisions]
            if all(d == Decision.ALLOWED for _a, d in decisions):
                self._apply(caller, service, operation, params)
        return out

    def _apply(self, caller: Caller, service: str, operation: str, params: Mapping[str, Any]) -> None:
        if operation == "CreateTrainingJob":
            arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{params['TrainingJobName']}"
            self.job_tags[arn] = {t["Key"]: t["Value"] for t in params.get("Tags", [])}
        elif operation == "AddTags":
            self.job_tags.setdefault(params["ResourceArn"], {}).update({t["Key"]: t["Value"] for t in params["Tags"]})
        elif (service, operation) == ("ssm", "StartSession"):
            self.sessions[f"session-of-{caller.user_id}"] = caller.user_id


def refused(results: list[tuple[str, Authorization, Decision]]) -> list[str]:
    return [f"{op}: {a.action} on {a.resource} -> {d.value}" for op, a, d in results if d != Decision.ALLOWED]


def arn(job: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{job}"


# --- each command's calls, as the code makes them -------------------------------------------------------


def launch_calls(owner: str, job: str = "rd-job") -> list[Call]:
    """launch / remote_debug.enable(): the CreateTrainingJob request enable() sends (tags, RemoteDebugConfig)."""
    base = {
        "TrainingJobName": job,
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/SageMakerExec",
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": "s3://b/out"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "Tags": [{"Key": "team", "Value": "vision"}],
    }
    draft = draft_request(base, DebugOptions(), owner=owner)
    return [("sagemaker", "CreateTrainingJob", draft.request)]


def attach_calls(job: str, tmp_path: Path) -> list[Call]:
    """attach / ssh / proxy: describe, tags, the manifests from CloudWatch, an SSH session, its end."""
    plain = PlainJob(job)
    plain.enabled = True
    sagemaker = plain.client()
    logs = Recorder("logs", {"FilterLogEvents": {"events": []}})
    clients = {"sagemaker": sagemaker, "logs": logs}
    backend = SageMakerBackend(
        clients=lambda service: clients[service], region=REGION, paths=StatePaths(tmp_path / "state")
    )
    backend.describe(job)
    backend.manifests(job)
    session = ssm.session_parameters(ssm.native_target(job, "algo-1"), 40022)
    # where a target refuses AWS-StartSSHSession, the proxy forwards a port instead (laptop/aws/ssm_forward.py)
    forwarding = ssm_forward.forwarding_parameters(ssm.native_target(job, "algo-1"), 40022, 50000)
    recorded = [("sagemaker", op, p) for op, p in sagemaker.calls] + [("logs", op, p) for op, p in logs.calls]
    return [
        *recorded,
        ("ssm", "StartSession", session),
        ("ssm", "StartSession", forwarding),
        ("ssm", "ResumeSession", {"SessionId": "session-of-me"}),
        ("ssm", "TerminateSession", {"SessionId": "session-of-me"}),
    ]


def jobs_calls(tmp_path: Path) -> list[Call]:
    """remote-debug jobs."""
    client = Recorder("sagemaker", {"ListTrainingJobs": {"TrainingJobSummaries": []}})
    SageMakerBackend(clients=lambda _s: client, region=REGION, paths=StatePaths(tmp_path / "state")).list_jobs()
    return [("sagemaker", op, p) for op, p in client.calls]


def enable_calls(job: PlainJob, owner: str | None = None) -> list[Call]:
    """remote-debug enable JOB (``owner``: the caller's id, which the CLI asks STS for)."""
    client = job.client()
    update.enable_running_job(client, job.name, owner=None if owner is None else (lambda: owner))
    return [("sagemaker", op, p) for op, p in client.calls]


def adopt_calls(job: PlainJob, owner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """remote-debug adopt JOB: the SageMaker calls it makes, and a shell session per node (ShellSession:
    StartSession without a DocumentName, TerminateSession when it closes)."""
    monkeypatch.setattr(adopt, "bundle_tarball", lambda _paths: ("fp0", b"bundle"))
    client = job.client()
    adopt.adopt_sagemaker(
        job.name,
        sagemaker=client,
        open_shell=FakeShell,  # type: ignore[arg-type]  # duck-types the ShellSession adopt drives
        owner=owner,
        paths=StatePaths(tmp_path / "state"),
        connect_timeout=5,
    )
    shells = []
    for node in ("algo-1", "algo-2"):
        shell = ShellSession.for_node(Recorder("ssm"), job.name, node)
        shells += [
            ("ssm", "StartSession", {"Target": shell.target}),
            ("ssm", "TerminateSession", {"SessionId": "session-of-me"}),
        ]
    return [("sagemaker", op, p) for op, p in client.calls] + shells


def stop_calls(job: PlainJob, tmp_path: Path) -> list[Call]:
    client = job.client()
    SageMakerBackend(clients=lambda _s: client, region=REGION, paths=StatePaths(tmp_path / "state")).stop(job.name)
    return [("sagemaker", op, p) for op, p in client.calls]


# --- the tests -----------------------------------------------------------------------------------------


def test_a_job_launched_with_remote_debug_is_launched_attached_enabled_and_stopped_by_its_owner(tmp_path: Path) -> None:
    world = World({})
    assert refused(world.decide(ALICE, launch_calls(ALICE.user_id))) == []
    assert world.job_tags[arn("rd-job")]["remote-debug:owner"] == ALICE.user_id
    job = PlainJob("rd-job", tags=world.job_tags[arn("rd-job")])
    for calls in (attach_calls("rd-job", tmp_path), enable_calls(job), stop_calls(job, tmp_path), jobs_calls(tmp_path)):
        assert refused(world.decide(ALICE, [c for c in calls if "session-of-me" not in str(c)])) == []
    world.sessions["session-of-me"] = ALICE.user_id
    assert refused(world.decide(ALICE, attach_calls("rd-job", tmp_path))) == []


def test_launching_for_someone_else_is_refused() -> None:
    assert refused(World({}).decide(ALICE, launch_calls("AIDASOMEONEELSE"))) == [
        f"CreateTrainingJob: sagemaker:CreateTrainingJob on {arn('rd-job')} -> implicitDeny",
        f"CreateTrainingJob: sagemaker:AddTags on {arn('rd-job')} -> implicitDeny",
    ]


def test_adopt_a_job_launched_without_remote_debug_then_stop_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job has no owner tag: adopt claims it (AddTags with the caller's id), turns remote debugging on,
    tags its transport, opens shell sessions (SSM-SessionManagerRunShell); then stop works on it."""
    job = PlainJob("plain-job")
    world = World({job.arn: {}})
    calls = adopt_calls(job, ALICE.user_id, tmp_path, monkeypatch)
    world.sessions["session-of-me"] = ALICE.user_id
    results = world.decide(ALICE, calls)
    assert refused(results) == []
    checked = {(a.action, a.resource) for _op, a, _d in results}
    assert ("ssm:StartSession", f"arn:aws:ssm:{REGION}:{ACCOUNT}:document/SSM-SessionManagerRunShell") in checked
    assert ("sagemaker:UpdateTrainingJob", job.arn) in checked
    assert world.job_tags[job.arn] == {
        "remote-debug:owner": ALICE.user_id,
        "remote-debug:transport": "ssm",
        "remote-debug:adopted": "true",
    }
    assert refused(world.decide(ALICE, stop_calls(job, tmp_path))) == []


def test_enable_a_job_launched_without_remote_debug(tmp_path: Path) -> None:
    """`enable JOB` on a job nobody tagged: refused as it used to be called (UpdateTrainingJob alone); allowed now
    that it claims the job first, as adopt does."""
    job = PlainJob("plain-job")
    assert refused(World({job.arn: {}}).decide(ALICE, enable_calls(job)))
    world = World({job.arn: {}})
    calls = enable_calls(PlainJob("plain-job"), ALICE.user_id)
    assert [c[1] for c in calls] == ["DescribeTrainingJob", "ListTags", "AddTags", "UpdateTrainingJob"]
    assert refused(world.decide(ALICE, calls)) == []
    assert world.job_tags[job.arn] == {"remote-debug:owner": ALICE.user_id}


def test_adopting_with_the_old_order_or_without_the_owner_tag_is_refused() -> None:
    """What adopt sent before: UpdateTrainingJob on a job without an owner tag, then AddTags without one."""
    job = PlainJob("plain-job")
    old: list[Call] = [
        (
            "sagemaker",
            "UpdateTrainingJob",
            {"TrainingJobName": job.name, "RemoteDebugConfig": {"EnableRemoteDebug": True}},
        ),
        (
            "sagemaker",
            "AddTags",
            {
                "ResourceArn": job.arn,
                "Tags": [
                    {"Key": "remote-debug:transport", "Value": "ssm"},
                    {"Key": "remote-debug:adopted", "Value": "true"},
                ],
            },
        ),
    ]
    assert len(refused(World({job.arn: {}}).decide(ALICE, old))) == 2


def test_another_users_job_can_be_read_but_not_claimed_enabled_tagged_or_stopped(tmp_path: Path) -> None:
    job = PlainJob("alices-job", tags={"remote-debug:owner": ALICE.user_id})
    world = World({job.arn: dict(job.tags)})
    world.sessions["session-of-me"] = ALICE.user_id  # Alice's session: Bob may not end or resume it
    bob_attach = world.decide(BOB, attach_calls(job.name, tmp_path))
    assert {(a.action, d) for _op, a, d in bob_attach if d != Decision.ALLOWED} == {
        ("ssm:ResumeSession", Decision.IMPLICIT_DENY),
        ("ssm:TerminateSession", Decision.IMPLICIT_DENY),
    }
    steal = [
        (
            "sagemaker",
            "AddTags",
            {"ResourceArn": job.arn, "Tags": [{"Key": "remote-debug:owner", "Value": BOB.user_id}]},
        )
    ]
    job.enabled = False
    changes = [
        c for c in [*enable_calls(job), *stop_calls(job, tmp_path)] if c[1] in ("UpdateTrainingJob", "StopTrainingJob")
    ]
    assert [c[1] for c in changes] == ["UpdateTrainingJob", "StopTrainingJob"]
    for call in [*steal, *changes]:
        assert refused(world.decide(BOB, [call])), call
    assert world.job_tags[job.arn]["remote-debug:owner"] == ALICE.user_id


def test_the_template_allows_nothing_no_command_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exactly: every action of user-policy.json is one some command (or doctor) is checked for."""
    job = PlainJob("plain-job")
    world = World({job.arn: {}})
    world.sessions["session-of-me"] = ALICE.user_id
    calls = [
        *launch_calls(ALICE.user_id),
        *adopt_calls(job, ALICE.user_id, tmp_path, monkeypatch),
        *attach_calls("plain-job", tmp_path),
        *stop_calls(job, tmp_path),
        *enable_calls(PlainJob("x")),
        *jobs_calls(tmp_path),
    ]
    used = {a.action for _op, a, _d in world.decide(ALICE, calls)}
    doctor = {"iam:SimulatePrincipalPolicy", "iam:GetRole", "ssm:GetServiceSetting"}
    granted = {
        a for s in USER_POLICY[0]["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert granted == used | doctor
    assert {"logs:FilterLogEvents", "sagemaker:AddTags", "sagemaker:UpdateTrainingJob"} <= used
    assert LOG_GROUP in str(calls)


# --- cleanup (the hybrid transport's leftovers) ----------------------------------------------------------

HYBRID_POLICIES = [*USER_POLICY, json.loads((TEMPLATES / "hybrid-user-policy.json").read_text())]
INSTANCE = "mi-0123456789abcdef0"
INSTANCE_ARN = f"arn:aws:ssm:{REGION}:{ACCOUNT}:managed-instance/{INSTANCE}"


def cleanup_calls(owner: str) -> list[Call]:
    """`remote-debug cleanup --yes` for an ended hybrid job of ``owner``: its activation, its leftover managed
    instance (the SageMaker and SSM calls; its S3 files are the user's own bucket, outside these templates)."""
    from remote_debug.laptop.aws.enable.leftovers import Leftovers

    job = "hybrid-job"
    tags = [{"Key": "remote-debug:owner", "Value": owner}, {"Key": "remote-debug:job", "Value": job}]
    sagemaker = Recorder(
        "sagemaker",
        {
            "ListTrainingJobs": {"TrainingJobSummaries": []},
            "DescribeTrainingJob": {
                **PlainJob(job).client().describe_training_job(TrainingJobName=job),
                "TrainingJobStatus": "Completed",
                "SecondaryStatus": "Completed",
            },
            "ListTags": {
                "Tags": [
                    {"Key": "remote-debug:owner", "Value": owner},
                    {"Key": "remote-debug:transport", "Value": "hybrid"},
                ]
            },
        },
    )
    ssm_client = Recorder(
        "ssm",
        {
            "DescribeActivations": {"ActivationList": [{"ActivationId": "a-1", "Tags": tags, "RegistrationLimit": 1}]},
            "DescribeInstanceInformation": {"InstanceInformationList": [{"InstanceId": INSTANCE}]},
            "ListTagsForResource": {"TagList": tags},
        },
    )
    leftovers = Leftovers(sagemaker=sagemaker, ssm=ssm_client, s3=Recorder("s3"), owner=owner)
    for item in leftovers.find(timedelta(days=7)):
        if item.kind != "object":
            assert leftovers.delete(item) is None
    return [("sagemaker", op, p) for op, p in sagemaker.calls] + [("ssm", op, p) for op, p in ssm_client.calls]


def test_cleanup_is_allowed_on_own_leftovers_and_refused_on_someone_elses() -> None:
    calls = cleanup_calls(ALICE.user_id)
    assert {op for _s, op, _p in calls} >= {
        "DescribeActivations",
        "DeleteActivation",
        "DescribeInstanceInformation",
        "ListTagsForResource",
        "DeregisterManagedInstance",
    }
    instance_tags = {INSTANCE_ARN: {"remote-debug:owner": ALICE.user_id, "remote-debug:job": "hybrid-job"}}

    def decide(caller: Caller, calls: list[Call]) -> list[str]:
        out = []
        for service, operation, params in calls:
            for needed in authorizations(
                service, operation, params, region=REGION, caller=caller, tags_of=instance_tags.get
            ):
                decision = needed.check(HYBRID_POLICIES).decision
                if decision != Decision.ALLOWED:
                    out.append(f"{operation}: {needed.action} on {needed.resource} -> {decision.value}")
        return out

    assert decide(ALICE, calls) == []
    bob = [c for c in calls if c[1] == "DeregisterManagedInstance"]
    assert decide(BOB, bob) == [
        f"DeregisterManagedInstance: ssm:DeregisterManagedInstance on {INSTANCE_ARN} -> implicitDeny"
    ]
