"""SageMakerBackend against botocore's models: moto (SageMaker list/tags, CloudWatch Logs), a scripted
DescribeTrainingJob for the status transitions moto lacks; the attach flow driven by status sequences;
and the relay of each transport - for ssm and hybrid, AWS's real session-manager-plugin against the
emulator's SSM API and data channel (:mod:`tests.helpers.ssm_plugin`)."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest

from remote_debug.contract import job_secret, manifest_lines, spec
from remote_debug.emulator.sigv4 import Keys
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws import ssm
from remote_debug.laptop.aws.sagemaker_backend import bastion_argv, nodes_of
from remote_debug.laptop.aws.sagemaker_logs import CLOCK_SKEW_MS, FILTER_PATTERN, LOG_GROUP
from remote_debug.laptop.connection import job_connection as connection
from remote_debug.laptop.core.errors import JobNotRunningError, UnknownJobError, UserError
from remote_debug.laptop.core.jobinfo import SageMakerJobDetails
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.machine.backend import MachineBackend
from remote_debug.laptop.platforms import JobRef, SageMakerBackend, backend_for, job_ref
from tests.helpers.event_log import EventLog
from tests.helpers.fake_aws import AWS_VARS, ScriptedSageMaker, describe_response, moto_cloud
from tests.helpers.ssm_plugin import LocalSsm, banner, echo_server, needs_plugin, plugin_bin, roundtrip_in_process

REGION = "us-west-2"
JOB = "sm-job"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX"
SECRET = "5e" * 32  # the job's secret; there is no key for JOB on this "laptop", so the backend reads it from
SPEC_ENV = spec.DebugSpec(job_name=JOB, client_public_key=KEY, job_secret=SECRET, transport=spec.Transport.SSM).to_env()
_BOOTS: dict[str, int] = {}  # boot -> when it started (ms): one value per boot, as a node's publisher has


@pytest.fixture
def cloud(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    _BOOTS.clear()
    with moto_cloud(monkeypatch, REGION):
        yield


class Cloud:
    """Clients for one test: SageMaker (scripted describe, moto for the rest), Logs (moto), SSM (moto)."""

    def __init__(
        self, script: Callable[[int, str], dict[str, Any]] | None = None, tags: list[dict[str, str]] | None = None
    ) -> None:
        self.sagemaker = boto3.client("sagemaker", region_name=REGION)
        self.scripted = ScriptedSageMaker(self.sagemaker, script, tags) if script else None
        self.logs = boto3.client("logs", region_name=REGION)
        self.ssm = boto3.client("ssm", region_name=REGION)
        self.s3 = boto3.client("s3", region_name=REGION)  # a hybrid job's activation file is retired there
        self.filter_requests: list[dict[str, Any]] = []
        self.logs.meta.events.register(
            "before-parameter-build.cloudwatch-logs.FilterLogEvents",
            lambda params, **_: self.filter_requests.append(dict(params)),
        )
        self.clients = {"sagemaker": self.sagemaker, "logs": self.logs, "ssm": self.ssm, "s3": self.s3}

    def backend(self) -> SageMakerBackend:
        return SageMakerBackend(StatePaths.default(), clients=self.clients.__getitem__, cache_seconds=0, log_interval=0)

    def log(self, job: str, node: str, *messages: str, stream: str = "1700000000", at_ms: int | None = None) -> None:
        name = f"{job}/{node}-{stream}"
        try:
            self.logs.create_log_group(logGroupName=LOG_GROUP)
        except self.logs.exceptions.ResourceAlreadyExistsException:
            pass
        try:
            self.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=name)
        except self.logs.exceptions.ResourceAlreadyExistsException:
            pass
        now = int(time.time() * 1000) if at_ms is None else at_ms
        self.logs.put_log_events(
            logGroupName=LOG_GROUP,
            logStreamName=name,
            logEvents=[{"timestamp": now, "message": m} for m in messages],
        )


def _node(node: str = "algo-1", **fields: Any) -> spec.NodeManifest:
    base: dict[str, Any] = dict(
        job_name=JOB,
        node=node,
        hosts=["algo-1", "algo-2"],
        sshd_host="127.0.0.1",
        sshd_port=40022,
        ssh_user="root",
        host_public_key=KEY,
        code_dir="/opt/ml/code",
        state="running",
        hook_pid=7,
    )
    return spec.NodeManifest(**{**base, **fields})


def _rank(rank: int, world: int = 4) -> spec.RankEndpoint:
    return spec.RankEndpoint(rank=rank, local_rank=rank % 2, world_size=world, port=41000 + rank, pid=9)


def _line(node: str, doc: spec.NodeManifest | spec.RankEndpoint, seq: int, boot: str = "b1") -> str:
    started = _BOOTS.setdefault(boot, int(time.time() * 1000))
    return manifest_lines.format_manifest_line(node, doc, boot=boot, started=started, seq=seq, secret=SECRET)


def _training(env: dict[str, str] | None = None, **kw: Any) -> Callable[[int, str], dict[str, Any]]:
    return lambda _n, job: describe_response(job, "InProgress", "Training", environment=env or SPEC_ENV, **kw)


# --- describe ----------------------------------------------------------------------------------------


def test_describe_maps_status_nodes_and_debuggability(cloud: None) -> None:
    c = Cloud(
        _training(instance_count=2, message="Training image download completed."),
        tags=[{"Key": "remote-debug:owner", "Value": "me"}],
    )
    info = c.backend().describe(JOB)
    assert (info.status, info.secondary_status, info.backend) == ("InProgress", "Training", "sagemaker")
    assert info.nodes == ["algo-1", "algo-2"] and info.nproc_per_node == 0  # unknown until a rank reports
    assert info.debuggable and info.running
    assert (sm := info.details_of(SageMakerJobDetails)) is not None and sm.transport == "ssm" and sm.region == REGION
    assert info.status_message == "Training image download completed."
    assert not info.provisioning
    assert [name for name, _ in c.scripted.calls] == ["DescribeTrainingJob", "ListTags"]  # type: ignore[union-attr]


def test_nodes_from_instance_groups() -> None:
    groups = {
        "InstanceGroups": [
            {"InstanceCount": 2, "InstanceGroupName": "a", "InstanceType": "ml.p4d.24xlarge"},
            {"InstanceCount": 1, "InstanceGroupName": "b", "InstanceType": "ml.c5.xlarge"},
        ]
    }
    assert nodes_of(groups) == ["algo-1", "algo-2", "algo-3"]
    assert nodes_of({"InstanceCount": 1}) == ["algo-1"]


@pytest.mark.parametrize(
    ("env", "extra", "tags", "why"),
    [
        ({"FOO": "1"}, {}, [], "was not started with remote-debug"),
        (SPEC_ENV, {"remote_debug": False}, [], "remote-debug enable sm-job"),
        (SPEC_ENV, {"EnableNetworkIsolation": True}, [], "network isolation"),
        ({**SPEC_ENV, spec.ENV_TRANSPORT: "hybrid"}, {"remote_debug": False}, [], None),  # its own SSM agent
        ({}, {}, [{"Key": "remote-debug:transport", "Value": "direct"}], None),  # our tag, transport by tag
    ],
)
def test_debuggable_or_why_not(
    cloud: None, env: dict[str, str], extra: dict[str, Any], tags: list[dict[str, str]], why: str | None
) -> None:
    info = (
        Cloud(lambda _n, job: describe_response(job, "InProgress", "Training", environment=env, **extra), tags=tags)
        .backend()
        .describe(JOB)
    )
    assert info.debuggable is (why is None)
    if why:
        assert why in str(info.why_not_debuggable) and "\n" not in str(info.why_not_debuggable)


def test_unknown_job_names_the_region(cloud: None) -> None:
    backend = Cloud().backend()  # moto: no such job
    assert not backend.has_job("nope")
    with pytest.raises(UnknownJobError, match=f"in {REGION} .check --region / --profile"):
        backend.describe("nope")


def test_list_jobs_only_debuggable(cloud: None) -> None:
    c = Cloud()
    for name in ("dbg-1", "plain-1", "off-1"):
        c.sagemaker.create_training_job(
            TrainingJobName=name,
            AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"},
            RoleArn="arn:aws:iam::123456789012:role/r",
            OutputDataConfig={"S3OutputPath": "s3://b/o"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
            StoppingCondition={"MaxRuntimeInSeconds": 60},
        )
    answers: dict[str, dict[str, Any]] = {
        "dbg-1": dict(environment=SPEC_ENV),
        "plain-1": dict(environment={}),
        "off-1": dict(environment=SPEC_ENV, remote_debug=False),
    }
    c.scripted = ScriptedSageMaker(
        c.sagemaker, lambda _n, job: describe_response(job, "InProgress", "Training", **answers[job])
    )
    jobs = c.backend().list_jobs()
    assert [j.name for j in jobs] == ["dbg-1"]
    listed = [params for name, params in c.scripted.calls if name == "ListTrainingJobs"]
    assert listed[0]["StatusEquals"] == "InProgress" and "CreationTimeAfter" in listed[1]


# --- manifests from CloudWatch ----------------------------------------------------------------------


def test_manifests_come_from_the_nodes_log_lines(cloud: None) -> None:
    c = Cloud(_training(instance_count=2))
    backend = c.backend()
    assert backend.manifests(JOB) == {"algo-1": None, "algo-2": None}  # no log group yet: nothing published
    c.log(
        JOB,
        "algo-1",
        "epoch 1 loss 0.3",
        _line("algo-1", _node(state="starting", sshd_port=0), 1),
        _line("algo-1", _node(), 2),
        _line("algo-1", _rank(0), 3),
        "more training output",
    )
    c.log(JOB, "algo-2", _line("algo-2", _node("algo-2"), 1))
    c.log("sm-job-2", "algo-1", _line("algo-1", _node(job_name="sm-job-2", sshd_port=1), 1))  # another job
    got = backend.manifests(JOB)
    assert got["algo-1"] is not None and got["algo-1"].sshd_port == 40022
    assert [r.rank for r in got["algo-1"].ranks] == [0]
    assert got["algo-2"] is not None and got["algo-2"].ranks == []
    # one call covers every node; only our lines; only what is new after the first answer
    assert c.filter_requests[-1]["logGroupName"] == "/aws/sagemaker/TrainingJobs"
    assert c.filter_requests[-1]["logStreamNamePrefix"] == f"{JOB}/"
    assert c.filter_requests[-1]["filterPattern"] == FILTER_PATTERN == '"[remote-debug] manifest"'
    c.log(JOB, "algo-2", _line("algo-2", _rank(3), 2))
    again = backend.manifests(JOB)
    assert "startTime" in c.filter_requests[-1]
    assert again["algo-2"] is not None and [r.rank for r in again["algo-2"].ranks] == [3]
    assert backend.describe(JOB).nproc_per_node == 2  # world size 4 over two nodes


def test_manifest_reads_start_at_the_jobs_training_start(cloud: None) -> None:
    """A job that has trained for hours has a long log: the first read starts at its TrainingStartTime
    (less a clock-skew margin), from DescribeTrainingJob, not at the beginning of the log."""
    started = datetime.now(timezone.utc) - timedelta(hours=3)
    start_ms = int(started.timestamp() * 1000)
    c = Cloud(_training(instance_count=2, TrainingStartTime=started, CreationTime=started - timedelta(minutes=10)))
    c.log(JOB, "algo-1", _line("algo-1", _rank(5), 1), at_ms=start_ms - 2 * CLOCK_SKEW_MS)  # not this run's
    c.log(JOB, "algo-1", _line("algo-1", _node(), 2), at_ms=start_ms + 60_000)
    got = c.backend().manifests(JOB)
    assert c.filter_requests[0]["startTime"] == start_ms - CLOCK_SKEW_MS
    assert got["algo-1"] is not None and got["algo-1"].ranks == [] and got["algo-2"] is None


def test_unreadable_manifest_line_is_one_line_error(cloud: None, caplog: pytest.LogCaptureFixture) -> None:
    """A line the job provably wrote (its MAC) but this version cannot read is a one-line error; one that
    proves nothing cannot stop anything (anyone who can write to the log group could log it): a warning."""
    c = Cloud(_training())
    backend = c.backend()
    c.log(JOB, "algo-1", '[remote-debug] manifest {"v": 9}')
    assert backend.manifests(JOB) == {"algo-1": None}
    assert "carries no MAC (and says version 9, this remote-debug speaks 1" in caplog.text
    payload = json.dumps({"v": 9}, separators=(",", ":"), sort_keys=True).encode()
    c.log(
        JOB,
        "algo-1",
        manifest_lines.MANIFEST_LINE_PREFIX + json.dumps({"v": 9, "mac": job_secret.manifest_mac(SECRET, payload)}),
    )
    with pytest.raises(spec.ContractError, match="version 9 is not supported"):
        backend.manifests(JOB)


def test_without_the_jobs_key_or_secret_no_line_is_trusted(cloud: None, caplog: pytest.LogCaptureFixture) -> None:
    c = Cloud(_training(env={k: v for k, v in SPEC_ENV.items() if k != spec.ENV_JOB_SECRET}))
    c.log(JOB, "algo-1", _line("algo-1", _node(), 1))
    assert c.backend().manifests(JOB) == {"algo-1": None}
    assert f"this machine has no key for it ({StatePaths.default().job_key(JOB)})" in caplog.text


def test_hint_for_the_proxy_is_private_and_complete(cloud: None, monkeypatch: pytest.MonkeyPatch) -> None:
    c = Cloud(
        _training(env={**SPEC_ENV, spec.ENV_TRANSPORT: "hybrid"}),
        tags=[{"Key": "remote-debug:bastion", "Value": "ec2-user@bastion:2200"}],
    )
    monkeypatch.setenv("AWS_PROFILE", "dev")  # recorded for the proxy (the clients above exist already)
    c.log(JOB, "algo-1", _line("algo-1", _node(ssm_target="mi-0123456789abcdef0"), 1))
    backend = c.backend()
    backend.manifests(JOB)
    path = StatePaths.default().root / "sagemaker" / f"{JOB}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    hint = json.loads(path.read_text())
    assert hint["region"] == REGION and hint["profile"] == "dev" and hint["transport"] == "hybrid"
    assert hint["bastion"] == "ec2-user@bastion:2200"
    assert hint["nodes"]["algo-1"] == {
        "sshd_host": "127.0.0.1",
        "sshd_port": 40022,
        "ssm_target": "mi-0123456789abcdef0",
    }
    assert SageMakerBackend(StatePaths.default()).has_job(JOB)  # the proxy finds the job without AWS


# --- the attach flow, driven by status sequences ----------------------------------------------------


def _sequence(*steps: tuple[int, str, str], **kw: Any) -> Callable[[int, str], dict[str, Any]]:
    """``(until_call, status, secondary)`` steps; the last one holds."""

    def script(n: int, job: str) -> dict[str, Any]:
        step = next((s for s in steps if n < s[0]), steps[-1])
        return describe_response(job, step[1], step[2], environment=SPEC_ENV, **kw)

    return script


def _attach(backend: SageMakerBackend, tmp_path: Path, timeout: float = 60) -> list[dict[str, Any]]:
    events = EventLog()
    options = AttachOptions(workspace=tmp_path, edit_user_ssh_config=False, ready_timeout=timeout)
    try:
        Attacher(backend, JOB, options, events.append, StatePaths.default()).run()
    finally:
        events.append({"event": "end"})
    return events


def test_attach_follows_starting_downloading_then_reports_failure(cloud: None, tmp_path: Path) -> None:
    c = Cloud(
        _sequence(
            (4, "InProgress", "Starting"),
            (8, "InProgress", "Downloading"),
            (99, "Failed", "Failed"),
            failure="AlgorithmError: ImportError: no module named foo",
        )
    )
    started = time.monotonic()
    events = _attach(c.backend(), tmp_path, timeout=0.5)  # provisioning takes longer than the timeout: fine
    # the job failed while attach waited for it: attach ends like the job, saying why (not a usage error)
    [ended] = [e for e in events if e["event"] == "job-ended"]
    assert ended["status"] == "Failed"
    assert ended["failure_reason"] == "AlgorithmError: ImportError: no module named foo"
    assert [e["secondary_status"] for e in events if e["event"] == "job-status"][:2] == ["Starting", "Downloading"]
    assert time.monotonic() - started > 0.5


def test_attach_emits_progress_and_times_out_only_once_training(cloud: None, tmp_path: Path) -> None:
    c = Cloud(
        _sequence((3, "InProgress", "Starting"), (6, "InProgress", "Downloading"), (99, "InProgress", "Training"))
    )
    events = EventLog()
    options = AttachOptions(workspace=tmp_path, edit_user_ssh_config=False, ready_timeout=1.0)
    with pytest.raises(UserError, match=r"nodes algo-1 of job sm-job did not publish an sshd within 1 s"):
        Attacher(c.backend(), JOB, options, events.append, StatePaths.default()).run()
    progress = [e["secondary_status"] for e in events if e["event"] == "job-status"]
    assert progress == ["Starting", "Downloading", "Training"]


def test_a_wait_that_drags_on_says_what_it_waits_for_and_where(
    cloud: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job launched in another region than the one asked (a launcher's own region_name) left attach waiting
    in silence until its timeout: now, after a few seconds, it names the log group, stream prefix, region and
    profile it reads, what it saw there, and says it again while the wait goes on."""
    monkeypatch.setattr(connection, "WAIT_NOTE_AFTER", 0.2)
    monkeypatch.setattr(connection, "WAIT_NOTE_EVERY", 0.3)
    c = Cloud(_training())
    events = EventLog()
    options = AttachOptions(workspace=tmp_path, edit_user_ssh_config=False, ready_timeout=1.2)
    with pytest.raises(UserError, match="did not publish an sshd within"):
        Attacher(c.backend(), JOB, options, events.append, StatePaths.default()).run()
    notes = [e for e in events if e["event"] == "waiting" and e["detail"]]
    assert len(notes) >= 2, events  # and it keeps saying so
    assert notes[0]["nodes"] == ["algo-1"] and 0.2 <= notes[0]["seconds"] < notes[-1]["seconds"]
    assert notes[0]["detail"] == (
        f"the nodes' manifest lines in CloudWatch Logs group {LOG_GROUP}, streams {JOB}/..., region {REGION}, "
        f"profile default; seen: no log group {LOG_GROUP} in this region yet"
    )

    # once the group exists and the job's streams have other lines (the toolkit's own), it says so
    c.log(JOB, "algo-1", "Invoking user training script.")
    c.log(JOB, "algo-1", _line("algo-1", _node(sshd_port=0, state="starting"), 1))
    events = EventLog()
    with pytest.raises(UserError, match="did not publish an sshd within"):
        Attacher(c.backend(), JOB, options, events.append, StatePaths.default()).run()
    detail = [e for e in events if e["event"] == "waiting" and e["detail"]][-1]["detail"]
    assert detail.endswith(f"seen: 1 manifest line(s) in {JOB}/algo-1-1700000000; nodes heard from: algo-1")


def test_ssh_and_stacks_say_what_they_wait_for_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands without an event stream print the wait's lines on stderr (stdout stays theirs)."""
    from remote_debug.cli.output import describe_event, wait_printer
    from remote_debug.laptop.wire import events as ev

    printed: list[str] = []
    monkeypatch.setattr("remote_debug.cli.output.err_console.print", lambda text, **_: printed.append(text))
    emit = wait_printer()
    emit(ev.Waiting(what="nodes", nodes=["algo-2"], seconds=12.4, detail="the nodes' manifest lines in X"))
    emit(ev.NodeConnected(node="algo-2", alias="algo-2.j"))  # not a wait: not printed
    assert printed == [
        "remote-debug: waiting for nodes to start: algo-2 (12 seconds so far): looking for the nodes' manifest "
        "lines in X"
    ]
    assert describe_event(ev.Waiting(what="nodes", nodes=["algo-1"])) == "waiting for nodes to start: algo-1"


def test_attach_waits_while_sshd_is_installed_and_reports_when_it_cannot_be(cloud: None, tmp_path: Path) -> None:
    c = Cloud(_training())
    c.log(JOB, "algo-1", _line("algo-1", _node(sshd_port=0, state="running"), 1))  # installing, no error yet
    later = threading.Timer(
        1.5,
        lambda: c.log(
            JOB,
            "algo-1",
            _line(
                "algo-1", _node(sshd_port=0, errors=["sshd failed: no apt-get, dnf, microdnf or yum in the image"]), 2
            ),
        ),
    )
    later.start()
    started = time.monotonic()
    try:
        with pytest.raises(UserError, match="node algo-1 of job sm-job has no sshd: sshd failed: no apt-get"):
            _attach(c.backend(), tmp_path, timeout=30)
    finally:
        later.cancel()
    assert time.monotonic() - started >= 1.5


def test_attach_to_completed_job_and_to_job_without_debugging(cloud: None, tmp_path: Path) -> None:
    c = Cloud(_sequence((99, "Completed", "Completed")))  # ended before attach came
    with pytest.raises(JobNotRunningError, match="is Completed: nothing to attach to"):
        _attach(c.backend(), tmp_path)
    off = Cloud(
        lambda _n, job: describe_response(job, "InProgress", "Training", environment=SPEC_ENV, remote_debug=False)
    )
    with pytest.raises(UserError, match=r"RemoteDebugConfig\.EnableRemoteDebug is off"):
        _attach(off.backend(), tmp_path)


def test_stop_asks_sagemaker_to_stop(cloud: None) -> None:
    c = Cloud()

    def script(n: int, job: str) -> dict[str, Any]:
        stopping = any(name == "StopTrainingJob" for name, _ in scripted.calls)
        status = ("Stopping", "Stopping") if stopping else ("InProgress", "Training")
        return describe_response(job, *status, environment=SPEC_ENV)

    scripted = c.scripted = ScriptedSageMaker(c.sagemaker, script, others={"StopTrainingJob": {}})
    info = c.backend().stop(JOB)
    assert info.status == "Stopping"
    assert ("StopTrainingJob", {"TrainingJobName": JOB}) in c.scripted.calls


# --- routing ----------------------------------------------------------------------------------------


def test_backend_for_local_first_then_sagemaker(cloud: None) -> None:
    paths = StatePaths.default()
    local_dir = paths.job_dir(JOB)
    local_dir.mkdir(parents=True)
    (local_dir / "job.json").write_text("{}")
    assert isinstance(backend_for(JOB, paths), MachineBackend)  # same name: the local job wins
    (paths.root / "sagemaker").mkdir(parents=True)
    (paths.root / "sagemaker" / "other-job.json").write_text("{}")
    assert isinstance(backend_for("other-job", paths), SageMakerBackend)  # the hint: no AWS call
    arn = f"arn:aws:sagemaker:eu-west-1:123456789012:training-job/{JOB}"
    before = aws.settings()
    assert job_ref(arn) == JobRef(JOB, "eu-west-1")
    backend = backend_for(arn, paths)  # an ARN of a local job
    assert isinstance(backend, MachineBackend)  # the local job of that name still wins
    routed = backend_for("arn:aws:sagemaker:eu-west-1:123456789012:training-job/other-job", paths)
    assert isinstance(routed, SageMakerBackend) and routed.region == "eu-west-1"
    assert aws.settings() == before  # naming a job by ARN changes no process-wide AWS setting


def test_unknown_job_without_aws_says_how_to_look(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*AWS_VARS, "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    aws.configure()
    with pytest.raises(UnknownJobError, match="pass --region / --profile"):
        backend_for("nope")


# --- relay per transport ----------------------------------------------------------------------------


@pytest.fixture
def echo_port() -> Iterator[int]:
    """What the node's sshd is to a session, for these tests: its port."""
    with echo_server() as server:
        yield server.port


def _relay(backend: SageMakerBackend, node: str, port: int, tmp_path: Path) -> tuple[int, bytes]:
    (tmp_path / "in").write_bytes(b"SSH-2.0-x\r\n")
    with open(tmp_path / "in", "rb") as stdin, open(tmp_path / "out", "wb") as stdout:
        code = backend.relay(JOB, node, port, stdin, stdout)
    return code, (tmp_path / "out").read_bytes()


@needs_plugin
@pytest.mark.parametrize("transport", ["ssm", "hybrid"])
def test_relay_starts_the_transports_session(
    cloud: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, echo_port: int, transport: str
) -> None:
    """The ProxyCommand's relay with nothing but the hint the nodes' manifests left: StartSession for the
    transport's target (built for ssm, the node's managed instance for hybrid), then the real plugin relays
    through the emulator's data channel to the node's port; the session is terminated when the relay ends."""
    target = "mi-0123456789abcdef0" if transport == "hybrid" else ssm.native_target(JOB, "algo-1")
    c = Cloud(_training(env={**SPEC_ENV, spec.ENV_TRANSPORT: transport}))
    c.log(JOB, "algo-1", _line("algo-1", _node(sshd_port=echo_port, ssm_target="mi-0123456789abcdef0"), 1))
    c.backend().manifests(JOB)
    # the emulator accepts the keys the product's client signs with (moto's mock puts its own in the environment)
    keys = Keys(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    with LocalSsm(tmp_path / "emulator", REGION, keys=keys) as local_ssm:
        local_ssm.targets.add(target)
        monkeypatch.setenv("PATH", f"{plugin_bin(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", local_ssm.url)  # how the user's environment names an endpoint
        backend = SageMakerBackend(StatePaths.default())  # the proxy's: the hint and the product's own SSM client
        hello = b"SSH-2.0-x\r\n"
        code, out = roundtrip_in_process(lambda i, o: backend.relay(JOB, "algo-1", echo_port, i, o), hello)
        [session] = local_ssm.channel.started
        assert (code, out) == (0, banner(session.session_id) + hello)
        assert (session.target, session.document, session.port) == (target, ssm.DOCUMENT, echo_port)
        assert local_ssm.channel.terminated == [session.session_id] and local_ssm.channel.open_ids() == []


def test_relay_direct_is_ssh_w_through_the_bastion(
    cloud: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, echo_port: int
) -> None:
    """What ProxyJump would run: ``ssh -W <node address>:<port> <bastion>`` (a stand-in ssh here)."""
    fake_ssh = tmp_path / "bin" / "ssh"
    fake_ssh.parent.mkdir()
    fake_ssh.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/ssh-argv\nexec cat\n')
    fake_ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    c = Cloud(
        _training(env={**SPEC_ENV, spec.ENV_TRANSPORT: "direct"}),
        tags=[{"Key": "remote-debug:bastion", "Value": "ec2-user@bastion.example:2200"}],
    )
    c.log(JOB, "algo-1", _line("algo-1", _node(sshd_host="10.0.3.7", sshd_port=2222), 1))
    c.backend().manifests(JOB)
    assert _relay(SageMakerBackend(StatePaths.default()), "algo-1", 2222, tmp_path) == (0, b"SSH-2.0-x\r\n")
    assert (tmp_path / "ssh-argv").read_text().split() == [
        "-W",
        "10.0.3.7:2222",
        "-p",
        "2200",
        "--",
        "ec2-user@bastion.example",
    ]
    assert bastion_argv("bastion") == ["--", "bastion"]


def test_direct_without_bastion_says_how_to_set_one(cloud: None, tmp_path: Path) -> None:
    c = Cloud(_training(env={**SPEC_ENV, spec.ENV_TRANSPORT: "direct"}))
    c.log(JOB, "algo-1", _line("algo-1", _node(sshd_host="10.0.3.7"), 1))
    c.backend().manifests(JOB)
    with pytest.raises(UserError, match=r"remote-debug:bastion=.*REMOTE_DEBUG_BASTION"):
        _relay(SageMakerBackend(StatePaths.default()), "algo-1", 2222, tmp_path)


def test_retiring_a_hybrid_activation_never_costs_the_manifests(cloud: None, caplog: pytest.LogCaptureFixture) -> None:
    """Every node registered: the backend retires the job's activation - and when it cannot (no SSM
    client, no permission), the manifests still come back, with one warning."""
    c = Cloud(_training(env={**SPEC_ENV, spec.ENV_TRANSPORT: "hybrid"}))
    c.log(JOB, "algo-1", _line("algo-1", _node(ssm_target="mi-0123456789abcdef0"), 1))
    del c.clients["ssm"]
    manifests = c.backend().manifests(JOB)
    assert manifests["algo-1"] is not None and manifests["algo-1"].ssm_target == "mi-0123456789abcdef0"
    assert "could not retire the SSM activation of job" in caplog.text
