"""``prune``: what we wrote for ended jobs goes (job dir, key, Host entries, pinned keys, SageMaker hint,
launch.json configurations); running jobs, jobs nobody can vouch for, other jobs' entries and the user's
own bytes stay.  Real files in a throwaway HOME, the real ssh-config and launch.json editors; local jobs as
their state files (a live ``sleep`` stands in for a running supervisor); SageMaker through the backend
interface on moto, with a scripted DescribeTrainingJob for the statuses moto lacks."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.core import keys
from remote_debug.laptop.core.jobinfo import JobInfo
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide import launch_record, vscode_launch
from remote_debug.laptop.platforms import SageMakerBackend
from remote_debug.laptop.prune import Pruner
from tests.helpers.fake_aws import AWS_VARS, ScriptedSageMaker, describe_response, moto_cloud
from tests.local.test_local_faults import make_fake_job

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7dnjpCsVN6hQ7kBQQ2XyvqtWFm8qv4U3s0DgV2c9m1"
USER_LAUNCH = (
    "{\r\n"
    "  // my own configurations: remote-debug must give these bytes back\r\n"
    '  "version": "0.2.0",\r\n'
    '  "configurations": [\r\n'
    '    {"name": "mine", "type": "debugpy", "request": "launch", "program": "x.py"}, // trailing comma next\r\n'
    "  ],\r\n"
    "}\r\n"
)
USER_SSH = b"Host *\n    ServerAliveInterval 30\n# mine\n"
REGION = "us-west-2"


def snapshot(*roots: Path) -> dict[str, bytes | None]:
    return {str(p): (p.read_bytes() if p.is_file() else None) for root in roots for p in sorted(root.rglob("*"))}


def ended_local_job(paths: StatePaths, job: str, *, status: str = "Completed", ended: float | None = None) -> Path:
    """A local job whose supervisor recorded its end (job.json only: nothing runs)."""
    job_dir = paths.job_dir(job)
    (job_dir / "nodes" / "algo-1" / "code").mkdir(parents=True)
    (job_dir / "nodes" / "algo-1" / "code" / "train.py").write_text("print('hi')\n")
    now = time.time()
    state = {
        "status": status,
        "secondary_status": status,
        "nodes": ["algo-1"],
        "created": now - 60,
        "ended": ended or now - 30,
        "exit_code": 0,
    }
    (job_dir / "job.json").write_text(json.dumps(state))
    return job_dir


def ssh_entries(paths: StatePaths, job: str, nodes: int = 1) -> None:
    entries = [
        ssh_config.HostEntry(job, f"algo-{n}", "root", 2222, KEY, paths.job_key(job), "proxy %h %p")
        for n in range(1, nodes + 1)
    ]
    ssh_config.write_job_entries(paths, job, entries)


def launch_configs(paths: StatePaths, workspace: Path, job: str, ranks: int = 2) -> None:
    targets = [
        vscode_launch.RankTarget(job, r, "algo-1", "127.0.0.1", 40000 + r, str(workspace), "/opt/ml/code")
        for r in range(ranks)
    ]
    vscode_launch.update_launch_json(workspace, job, targets, paths=paths)


def hint(paths: StatePaths, job: str) -> Path:
    path = paths.root / "sagemaker" / f"{job}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "job": job,
                "region": REGION,
                "profile": None,
                "transport": "ssm",
                "bastion": None,
                "nodes": {},
                "version": 1,
            }
        )
    )
    return path


def entry_names(workspace: Path) -> list[str]:
    return launch_record.read_entry_names(vscode_launch.launch_json_path(workspace))


@pytest.fixture(autouse=True)
def no_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No AWS settings of the machine's: a job that is not local is asked about only where a test says so."""
    for name in [*AWS_VARS, "AWS_ENDPOINT_URL"]:
        monkeypatch.delenv(name, raising=False)
    aws.configure()
    yield
    aws.configure()


@pytest.fixture
def workspace(home: Path, tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".vscode").mkdir(parents=True)
    vscode_launch.launch_json_path(ws).write_bytes(USER_LAUNCH.encode())
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_bytes(USER_SSH)
    return ws


def test_prune_removes_what_we_wrote_for_ended_jobs_and_nothing_else(
    home: Path, workspace: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    paths = StatePaths.default()
    done = ended_local_job(paths, "done")
    make_fake_job(paths, "running", sleeper.pid)
    for job in ("done", "running"):
        keys.ensure_job_key(paths, job)
    for job in ("done", "running", "ghost"):  # ghost: its job dir and key are gone, its entries are not
        ssh_entries(paths, job, nodes=2 if job == "done" else 1)
        launch_configs(paths, workspace, job)
    ssh_config.ensure_include(paths)
    user_ssh = (home / ".ssh" / "config").read_bytes()
    before = snapshot(home, workspace)

    dry = Pruner(paths).run(dry_run=True)
    assert snapshot(home, workspace) == before  # --dry-run removes nothing
    verdicts = {o.job: (o.status, o.pruned, o.kept) for o in dry.outcomes}
    assert verdicts == {
        "done": ("Completed", True, None),
        "ghost": (None, True, None),  # nothing of it that attach would not write again
        "running": ("InProgress", False, "it is still running"),
    }
    planned = next(o for o in dry.outcomes if o.job == "done").leftovers
    assert planned.parts() == [
        "job dir",
        "key",
        "2 Host entries",
        "2 known_hosts lines",
        f"3 launch.json configs in {vscode_launch.launch_json_path(workspace)}",
    ]

    running_files = {k: v for k, v in before.items() if "running" in k}
    result = Pruner(paths).run()
    assert not result.failed and [o.job for o in result.outcomes if o.pruned] == ["done", "ghost"]
    assert not done.exists() and not paths.job_key("done").parent.exists()
    for job in ("done", "ghost"):
        assert ssh_config.job_entries(paths, job).empty
    assert paths.job_dir("running").exists() and paths.job_key("running").exists()
    assert {k: v for k, v in snapshot(home, workspace).items() if "running" in k} == running_files
    assert (home / ".ssh" / "config").read_bytes() == user_ssh  # our Include line too: running still needs it
    assert entry_names(workspace) == [
        "mine",
        "remote-debug: running rank 0 (algo-1)",
        "remote-debug: running rank 1 (algo-1)",
        "remote-debug: running all ranks",
    ]
    # what is left of ours in launch.json is exactly the running job's: without it, the user's bytes
    vscode_launch.remove_job_configs(workspace, "running", paths=paths)
    assert vscode_launch.launch_json_path(workspace).read_bytes() == USER_LAUNCH.encode()

    again = Pruner(paths).run()
    assert [(o.job, o.pruned) for o in again.outcomes] == [("running", False)]


def test_a_job_whose_process_still_runs_is_kept(home: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """The supervisor was killed (the job reads as Failed) but a node still runs in the job dir."""
    paths = StatePaths.default()
    make_fake_job(paths, "orphaned", 999_999_999)
    state_file = paths.job_dir("orphaned") / "job.json"
    state = json.loads(state_file.read_text())
    state.update(created=time.time() - 60, node_pids={"algo-1": sleeper.pid})
    state_file.write_text(json.dumps(state))
    (outcome,) = Pruner(paths).run().outcomes
    assert outcome.status == "Failed" and not outcome.pruned
    assert outcome.kept == f"its process {sleeper.pid} still runs: stop it with 'remote-debug stop orphaned' first"
    assert paths.job_dir("orphaned").exists()


def test_older_than_keeps_recent_jobs(home: Path) -> None:
    paths = StatePaths.default()
    now = time.time()
    ended_local_job(paths, "last-week", ended=now - 7 * 86400)
    ended_local_job(paths, "yesterday", ended=now - 86400)
    result = Pruner(paths, now=now).run(older_than_days=3)
    assert {o.job: o.kept for o in result.outcomes} == {
        "last-week": None,
        "yesterday": "it ended less than 3 days ago (--older-than)",
    }
    assert not paths.job_dir("last-week").exists() and paths.job_dir("yesterday").exists()


def test_a_job_whose_launch_json_cannot_be_edited_is_kept_whole(
    home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """launch.json goes first: when that fails, nothing else of the job goes (the next prune finds it again)."""
    paths = StatePaths.default()
    ended_local_job(paths, "done")
    keys.ensure_job_key(paths, "done")
    ssh_entries(paths, "done")
    launch_configs(paths, workspace, "done")
    before = snapshot(home, workspace)

    def refuse(workspace: Path, job: str, *, paths: StatePaths | None = None) -> bool:
        raise vscode_launch.LaunchJsonError(f"{workspace}/.vscode/launch.json: it keeps changing; retry")

    monkeypatch.setattr(vscode_launch, "remove_job_configs", refuse)
    result = Pruner(paths).run()
    (outcome,) = result.outcomes
    assert result.failed and outcome.error == f"{workspace}/.vscode/launch.json: it keeps changing; retry"
    assert snapshot(home, workspace) == before
    monkeypatch.undo()
    (retried,) = Pruner(paths).run().outcomes
    assert retried.pruned and not paths.job_dir("done").exists()
    assert vscode_launch.launch_json_path(workspace).read_bytes() == USER_LAUNCH.encode()


def test_a_launch_json_the_user_broke_is_reported_and_cleaned_once_it_reads_again(home: Path, workspace: Path) -> None:
    paths = StatePaths.default()
    ended_local_job(paths, "done")
    keys.ensure_job_key(paths, "done")
    launch_configs(paths, workspace, "done")
    launch = vscode_launch.launch_json_path(workspace)
    good = launch.read_bytes()
    launch.write_bytes(good.replace(b'"configurations"', b'"configurations" oops', 1))
    result = Pruner(paths).run()
    assert result.failed and "not valid JSON" in result.unreadable[launch]
    assert [o.job for o in result.outcomes if o.pruned] == ["done"] and not paths.job_dir("done").exists()
    launch.write_bytes(good)  # fixed: the entries are all that is left of the job
    (orphan,) = Pruner(paths).run().outcomes
    assert (orphan.job, orphan.status, orphan.pruned) == ("done", None, True)
    assert launch.read_bytes() == USER_LAUNCH.encode()


def test_launch_records_list_every_file_we_have_entries_in(home: Path, workspace: Path, tmp_path: Path) -> None:
    """Appending to the user's own launch.json needs no notes; the record still says we are in it."""
    paths = StatePaths.default()
    created = tmp_path / "fresh"  # a launch.json we create (notes: the file itself)
    created.mkdir()
    launch_configs(paths, workspace, "a")
    launch_configs(paths, created, "b")
    files = [vscode_launch.launch_json_path(ws) for ws in (workspace, created)]
    assert sorted(launch_record.recorded_files(paths)) == sorted(files)
    launch_configs(paths, workspace, "c")
    vscode_launch.remove_job_configs(workspace, "a", paths=paths)
    assert files[0] in launch_record.recorded_files(paths)  # job c is still in it
    vscode_launch.remove_job_configs(workspace, "c", paths=paths)
    vscode_launch.remove_job_configs(created, "b", paths=paths)
    assert launch_record.recorded_files(paths) == [] and not (paths.root / "vscode").exists()
    assert files[0].read_bytes() == USER_LAUNCH.encode() and not files[1].exists()


# --- SageMaker jobs, through the backend interface -------------------------------------------------


@pytest.fixture
def cloud(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with moto_cloud(monkeypatch, REGION):
        yield


def test_sagemaker_jobs_are_pruned_when_describe_says_they_ended(home: Path, workspace: Path, cloud: None) -> None:
    paths = StatePaths.default()
    statuses = {"sm-done": ("Failed", "Failed"), "sm-running": ("InProgress", "Training")}
    scripted_client = boto3.client("sagemaker", region_name=REGION)
    scripted = ScriptedSageMaker(scripted_client, lambda _n, job: describe_response(job, *statuses[job]))
    plain_client = boto3.client("sagemaker", region_name=REGION)  # moto: it knows no job at all

    def backend(client: Any) -> SageMakerBackend:
        return SageMakerBackend(paths, clients=lambda service: client, cache_seconds=0)

    def lookup(job: str) -> JobInfo:
        return backend(scripted_client if job in statuses else plain_client).describe(job)

    for job in ("sm-done", "sm-running", "sm-elsewhere"):
        keys.ensure_job_key(paths, job)  # as remote_debug.enable() leaves it
    for job in ("sm-done", "sm-running"):
        hint(paths, job)  # as attach leaves it
        ssh_entries(paths, job)
        launch_configs(paths, workspace, job)

    result = Pruner(paths, lookup=lookup).run()
    assert {o.job: (o.status, o.kept) for o in result.outcomes} == {
        "sm-done": ("Failed", None),
        "sm-elsewhere": (None, "no backend knows this job (check --region / --profile)"),  # its key stays
        "sm-running": ("InProgress", "it is still running"),
    }
    assert sorted({params["TrainingJobName"] for name, params in scripted.calls if name == "DescribeTrainingJob"}) == [
        "sm-done",
        "sm-running",
    ]
    assert not paths.job_key("sm-done").exists() and not (paths.root / "sagemaker" / "sm-done.json").exists()
    assert ssh_config.job_entries(paths, "sm-done").empty
    for job in ("sm-running", "sm-elsewhere"):
        assert paths.job_key(job).exists()
    assert (paths.root / "sagemaker" / "sm-running.json").exists()
    assert [n for n in entry_names(workspace) if "sm-done" in n] == []
    assert len([n for n in entry_names(workspace) if "sm-running" in n]) == 3


def test_without_aws_a_job_that_is_not_local_is_kept(home: Path) -> None:
    paths = StatePaths.default()
    keys.ensure_job_key(paths, "sm-job")
    (outcome,) = Pruner(paths).run().outcomes
    assert outcome.kept is not None and "AWS is not configured" in outcome.kept
    assert paths.job_key("sm-job").exists()
    assert os.listdir(paths.root) == ["keys"]


def test_a_job_dir_an_interrupted_prune_left_is_swept_and_a_launch_in_progress_is_not(home: Path) -> None:
    paths = StatePaths.default()
    left = paths.jobs_dir / ".done.pruning-999999999"  # renamed by a prune that died before rmtree finished
    staging = paths.jobs_dir / ".new.staging"  # a launch --local copying its code right now
    for d in (left / "nodes", staging / "nodes"):
        d.mkdir(parents=True)
    assert Pruner(paths).run().outcomes == []
    assert not left.exists() and staging.exists()
