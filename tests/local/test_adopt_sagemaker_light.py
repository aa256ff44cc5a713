"""``adopt JOB`` without nodes: the SageMaker client and each node's shell faked at their boundaries
(tests/helpers/adopt_fakes.py), so the order of the AWS calls and what stays in the containers can be checked
in milliseconds.  The real thing runs in test_adopt_sagemaker.py (emulator, plugin, gdb)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_debug.laptop.adopt import sagemaker_job as adopt
from remote_debug.laptop.adopt.local_job import AdoptOutcome
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.paths import StatePaths
from tests.helpers.adopt_fakes import FakeShell, PlainJob, denied

OWNER = "AIDAALICE0000000000"


@pytest.fixture(autouse=True)
def small_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adopt, "bundle_tarball", lambda _paths: ("fp0", b"bundle bytes"))


def run_adopt(tmp_path: Path, job: PlainJob, shells: dict[str, FakeShell], **answers: object) -> AdoptOutcome:
    sagemaker = job.client(**answers)  # type: ignore[arg-type]
    run_adopt.sagemaker = sagemaker  # type: ignore[attr-defined]
    return adopt.adopt_sagemaker(
        job.name,
        sagemaker=sagemaker,
        open_shell=shells.__getitem__,  # type: ignore[arg-type]
        owner=OWNER,
        paths=StatePaths(tmp_path / "state"),
        connect_timeout=5,
    )


def test_a_job_nobody_tagged_gets_the_callers_owner_tag_before_remote_debugging_is_turned_on(tmp_path: Path) -> None:
    job = PlainJob()
    shells = {n: FakeShell(n) for n in ("algo-1", "algo-2")}
    outcome = run_adopt(tmp_path, job, shells)
    assert [r.rank for r in outcome.ranks] == [0, 0] and not outcome.already
    calls = [(op, params) for op, params in run_adopt.sagemaker.calls if op != "DescribeTrainingJob"]  # type: ignore[attr-defined]
    assert calls == [
        ("ListTags", {"ResourceArn": job.arn}),
        # the claim: what user-policy.json allows on a job without an owner, and what makes it the caller's
        ("AddTags", {"ResourceArn": job.arn, "Tags": [{"Key": "remote-debug:owner", "Value": OWNER}]}),
        ("UpdateTrainingJob", {"TrainingJobName": job.name, "RemoteDebugConfig": {"EnableRemoteDebug": True}}),
        (
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
    assert all(s.closed for s in shells.values())
    # a private dir per node with a random name (node_dir), the bundle in it
    assert all(s.exists(f"/tmp/remote-debug-adopt-{job.name}.{n}.fake0001/bundle-fp0") for n, s in shells.items())


def test_a_job_with_an_owner_keeps_it(tmp_path: Path) -> None:
    job = PlainJob(tags={"remote-debug:owner": "AIDABOB"})
    run_adopt(tmp_path, job, {n: FakeShell(n) for n in ("algo-1", "algo-2")})
    tagged = [p for op, p in run_adopt.sagemaker.calls if op == "AddTags"]  # type: ignore[attr-defined]
    assert all(t["Key"] != "remote-debug:owner" for p in tagged for t in p["Tags"])
    assert job.tags["remote-debug:owner"] == "AIDABOB"


def test_a_failure_after_the_upload_removes_the_bundle_from_every_container(tmp_path: Path) -> None:
    """The transport tag is denied (as AddTags was for jobs without an owner tag): the bundle that already
    reached both nodes must not stay there."""
    job = PlainJob(tags={"remote-debug:owner": OWNER})
    shells = {n: FakeShell(n) for n in ("algo-1", "algo-2")}
    tag_calls = []

    def add_tags(params: dict[str, object]) -> dict[str, object]:
        tag_calls.append(params)
        raise denied(
            "AddTags",
            f"User: arn:aws:iam::123456789012:user/alice is not authorized to perform: "
            f"sagemaker:AddTags on resource: {job.arn}",
        )

    with pytest.raises(UserError, match=r"tagging job plain-job: .*not authorized"):
        run_adopt(tmp_path, job, shells, AddTags=add_tags)
    assert tag_calls  # it failed where meant: after the upload
    for node, shell in shells.items():
        assert f"/tmp/remote-debug-adopt-{job.name}.{node}.fake0001/bundle.tar.gz" in shell.uploads
        assert shell.files == set(), (node, shell.files)
        assert shell.closed


def test_a_failed_probe_on_one_node_cleans_every_node(tmp_path: Path) -> None:
    from tests.helpers.adopt_fakes import PROBE

    shells = {
        "algo-1": FakeShell("algo-1"),
        "algo-2": FakeShell("algo-2", probe={**PROBE, "refusal": "rank 0 is not a Python process"}),
    }
    with pytest.raises(UserError, match="cannot adopt algo-2: rank 0 is not a Python process"):
        run_adopt(tmp_path, PlainJob(), shells)
    assert all(s.files == set() for s in shells.values())


def test_an_earlier_adoptions_files_are_never_removed(tmp_path: Path) -> None:
    """Adopted before (its ranks may run from that bundle): a failure now removes only what this run made."""
    job = PlainJob(tags={"remote-debug:owner": OWNER})
    shells = {n: FakeShell(n) for n in ("algo-1", "algo-2")}
    earlier = {
        n: {f"/tmp/remote-debug-adopt-{job.name}.{n}.earlier1/bundle-old/remote_debug/__init__.py"} for n in shells
    }
    for node, shell in shells.items():
        shell.files |= earlier[node]
    with pytest.raises(UserError):
        run_adopt(tmp_path, job, shells, AddTags=denied("AddTags"))
    for node, shell in shells.items():
        assert shell.files == earlier[node]


def test_a_node_that_cannot_be_adopted_but_can_be_read_offers_the_ranks_stacks(tmp_path: Path) -> None:
    """The probe found ranks py-spy can read but nothing may inject into (here: another user's): the one line
    names the stacks command for the job instead of a bare refusal, and nothing stays in the containers."""
    from tests.helpers.adopt_fakes import PROBE

    reason = "rank 0 (pid 4243) runs as uid 1000, not as you (uid 0): adopt it as the user that runs the job"
    shells = {
        "algo-1": FakeShell("algo-1"),
        "algo-2": FakeShell("algo-2", probe={**PROBE, "gdb": None, "refusal": reason, "stacks": True}),
    }
    with pytest.raises(UserError) as refused:
        run_adopt(tmp_path, PlainJob(), shells)
    assert str(refused.value) == (
        f"cannot adopt algo-2: {reason}; every rank's stacks can still be read with py-spy on the node "
        "(py-spy dump --pid PID), in a shell there: aws ssm start-session --target "
        "sagemaker-training-job:plain-job_algo-2"
    )
    assert all(s.files == set() for s in shells.values())
