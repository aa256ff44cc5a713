"""A forged manifest line moves nothing (issue 13, item 3).

The attacker can write to the job's CloudWatch log group but cannot read the job's Environment: on
SageMaker that is every training job of the account and region (their execution roles may log to
/aws/sagemaker/TrainingJobs), so the attacker's own job knows *its* secret, and any user code that runs
in a job can log lines for another.  Each test plays one attack through the laptop's real path -
``SageMakerBackend.manifests`` (what attach, ssh-config, stacks and doctor poll) over moto's CloudWatch
Logs, DescribeTrainingJob scripted (moto's jobs never run), the job's key on this "laptop" - and checks
what the user would connect to: the merged manifest, and the hint the ProxyCommand reads.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest

from remote_debug.contract import manifest_lines, spec
from remote_debug.laptop.aws.sagemaker_logs import CLOCK_SKEW_MS, LOG_GROUP
from remote_debug.laptop.core import keys
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.platforms import SageMakerBackend
from tests.helpers.fake_aws import ScriptedSageMaker, describe_response, moto_cloud

REGION = "us-west-2"
JOB = "sm-job"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX"
EVIL_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEvilEvilEvilEvilEvilEvilEvilEvilEvilEvilEvil"
TARGET, EVIL_TARGET = "mi-0123456789abcdef0", "mi-0badbadbadbadbad0"


def ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def node(name: str = "algo-1", **fields: Any) -> spec.NodeManifest:
    base: dict[str, Any] = dict(
        job_name=JOB,
        node=name,
        hosts=["algo-1", "algo-2"],
        sshd_host="127.0.0.1",
        sshd_port=40022,
        ssh_user="root",
        host_public_key=KEY,
        code_dir="/opt/ml/code",
        state="running",
        hook_pid=7,
        ssm_target=TARGET if name == "algo-1" else "mi-0000000000000000a",
    )
    return spec.NodeManifest(**{**base, **fields})


def evil(name: str = "algo-1") -> spec.NodeManifest:
    """What every forger wants algo-1 to be: its own host key, managed instance and port."""
    return node(name, host_public_key=EVIL_KEY, ssm_target=EVIL_TARGET, sshd_port=2222)


def rank(number: int) -> spec.RankEndpoint:
    return spec.RankEndpoint(rank=number, local_rank=number % 2, world_size=4, port=41000 + number, pid=9)


def unsigned(
    name: str, doc: spec.NodeManifest | spec.RankEndpoint, *, boot: str, started: int, seq: int, **extra: Any
) -> str:
    """A line in the format, by someone without the job's secret (``extra``: a ``mac`` of their choosing)."""
    body = {
        "v": 1,
        "node": name,
        "kind": "node" if isinstance(doc, spec.NodeManifest) else "rank",
        "boot": boot,
        "started": started,
        "seq": seq,
        "doc": doc.to_json(),
        **extra,
    }
    return manifest_lines.MANIFEST_LINE_PREFIX + json.dumps(body, separators=(",", ":"), sort_keys=True)


class Job:
    """A debuggable 2-node SageMaker job (hybrid transport: the SSM target comes from the manifest), created
    30 minutes ago by this laptop, which holds its key."""

    def __init__(self) -> None:
        self.paths = StatePaths.default()
        key_path, public_key = keys.ensure_job_key(self.paths, JOB)
        self.secret = keys.job_secret(key_path)
        env = spec.DebugSpec(
            job_name=JOB, client_public_key=public_key, job_secret=self.secret, transport=spec.Transport.HYBRID
        ).to_env()
        self.created = datetime.now(timezone.utc) - timedelta(minutes=30)
        self.started = ms(self.created) + 180_000  # when algo-1's hook (its genuine boot) started
        sagemaker = boto3.client("sagemaker", region_name=REGION)
        ScriptedSageMaker(
            sagemaker,
            lambda _n, job: describe_response(
                job,
                "InProgress",
                "Training",
                environment=env,
                instance_count=2,
                remote_debug=False,
                CreationTime=self.created,
                TrainingStartTime=self.created + timedelta(minutes=2),
            ),
        )
        self.logs = boto3.client("logs", region_name=REGION)
        self.logs.create_log_group(logGroupName=LOG_GROUP)
        self.requests: list[dict[str, Any]] = []
        self.logs.meta.events.register(
            "before-parameter-build.cloudwatch-logs.FilterLogEvents",
            lambda params, **_: self.requests.append(dict(params)),
        )
        # ssm and s3: a hybrid job whose nodes all registered has its activation retired (it has none here)
        self.clients = {
            "sagemaker": sagemaker,
            "logs": self.logs,
            "ssm": boto3.client("ssm", region_name=REGION),
            "s3": boto3.client("s3", region_name=REGION),
        }

    def backend(self) -> SageMakerBackend:
        """A laptop-side reader, as a fresh attach (or the proxy, without a hint) makes one."""
        return SageMakerBackend(self.paths, clients=self.clients.__getitem__, cache_seconds=0, log_interval=0)

    def line(
        self,
        name: str,
        doc: spec.NodeManifest | spec.RankEndpoint,
        *,
        seq: int,
        boot: str = "g1",
        started: int | None = None,
        secret: str | None = None,
    ) -> str:
        """A line as the job's hook writes it (MAC'd with the job's secret unless ``secret`` says otherwise)."""
        return manifest_lines.format_manifest_line(
            name,
            doc,
            boot=boot,
            started=self.started if started is None else started,
            seq=seq,
            secret=secret or self.secret,
        )

    def log(self, stream: str, *messages: str, at_ms: int | None = None) -> None:
        name = f"{JOB}/{stream}"
        try:
            self.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=name)
        except self.logs.exceptions.ResourceAlreadyExistsException:
            pass
        stamp = int(time.time() * 1000) if at_ms is None else at_ms
        self.logs.put_log_events(
            logGroupName=LOG_GROUP, logStreamName=name, logEvents=[{"timestamp": stamp, "message": m} for m in messages]
        )

    def publish_genuine(self) -> None:
        """Both nodes as their hooks publish them, each in its own stream."""
        self.log(
            "algo-1-1700000000",
            self.line("algo-1", node(state="starting", sshd_port=0, host_public_key="", ssm_target=""), seq=1),
            self.line("algo-1", node(), seq=2),
            self.line("algo-1", rank(0), seq=3),
        )
        self.log("algo-2-1700000000", self.line("algo-2", node("algo-2"), seq=1, boot="h1"))

    def hint(self) -> dict[str, Any]:
        """What the ProxyCommand will use to reach each node (written by manifests())."""
        nodes: dict[str, Any] = json.loads((self.paths.root / "sagemaker" / f"{JOB}.json").read_text())["nodes"]
        return nodes


@pytest.fixture
def job(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Job]:
    with moto_cloud(monkeypatch, REGION):
        yield Job()


def pinned(manifest: spec.NodeManifest | None) -> tuple[str, str, int, str] | None:
    if manifest is None:
        return None
    return manifest.host_public_key, manifest.ssm_target, manifest.sshd_port, manifest.sshd_host


GENUINE = (KEY, TARGET, 40022, "127.0.0.1")


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "remote_debug.laptop.aws.sagemaker_backend" and r.levelno == logging.WARNING
    ]


def test_a_forged_line_in_another_nodes_stream_changes_nothing(job: Job, caplog: pytest.LogCaptureFixture) -> None:
    """(a) In algo-2's stream, lines that claim algo-1 with the forger's host key, managed instance and port:
    unsigned, with a made-up MAC, with a genuine line's MAC on a changed body; a higher seq in the genuine
    boot, and a newer boot.  Logged first (the forger is early) and again after the node published."""
    stream = "algo-2-1700000000"
    genuine = json.loads(job.line("algo-1", node(), seq=2)[len(manifest_lines.MANIFEST_LINE_PREFIX) :])
    later = job.started + 3_600_000
    forgeries = [
        '[remote-debug] manifest {"v": 9}',
        "[remote-debug] manifest {not json",  # junk must not stop attach
        unsigned("algo-1", evil(), boot="g1", started=job.started, seq=99),
        unsigned("algo-1", evil(), boot="g1", started=job.started, seq=99, mac="0" * 64),
        unsigned("algo-1", evil(), boot="g1", started=job.started, seq=99, mac=genuine["mac"]),
        unsigned("algo-1", evil(), boot="evil", started=later, seq=1, mac=genuine["mac"]),
        "epoch 3: 45%|####      " + unsigned("algo-1", evil(), boot="evil", started=later, seq=1),
    ]
    job.log(stream, *forgeries)
    backend = job.backend()
    assert backend.manifests(JOB) == {"algo-1": None, "algo-2": None}  # no forgery gets in first
    job.publish_genuine()
    assert pinned(backend.manifests(JOB)["algo-1"]) == GENUINE
    job.log(stream, *forgeries)  # and again, after the genuine lines
    got = backend.manifests(JOB)
    assert pinned(got["algo-1"]) == GENUINE and [r.port for r in got["algo-1"].ranks] == [41000]  # type: ignore[union-attr]
    assert job.hint()["algo-1"] == {"sshd_host": "127.0.0.1", "sshd_port": 40022, "ssm_target": TARGET}
    [warning] = warnings_of(caplog)  # one per job, one line, with the count and the last reason
    assert "\n" not in warning and f"ignored 7 manifest log line(s) of job {JOB}" in warning
    assert "'algo-1' carries no MAC in stream sm-job/algo-2-1700000000" in warning
    assert pinned(job.backend().manifests(JOB)["algo-1"]) == GENUINE  # a fresh attach reads the same


def test_a_replayed_line_of_an_older_boot_does_not_take_the_node_back(job: Job) -> None:
    """(b) algo-1 restarted: boot "old" (key A, port 1111) then boot "new" (key B, port 2222).  The
    attacker copied old's genuine lines (valid MACs) and deleted their stream; once the laptop has seen the
    new boot, the copies are logged again, later.  Logged last is not newest: ``started`` (MAC'd) decides."""
    old_key, new_key = KEY, EVIL_KEY.replace("Evil", "Good")
    old_started, new_started = job.started, job.started + 600_000
    old_lines = [
        job.line(
            "algo-1",
            node(host_public_key=old_key, sshd_port=1111, ssm_target=""),
            seq=1,
            boot="old",
            started=old_started,
        ),
        job.line("algo-1", rank(0), seq=2, boot="old", started=old_started),
    ]
    job.log("algo-1-1700000000", *old_lines)
    job.logs.delete_log_stream(logGroupName=LOG_GROUP, logStreamName=f"{JOB}/algo-1-1700000000")
    job.log(
        "algo-1-1700000600",
        job.line(
            "algo-1",
            node(state="starting", sshd_port=0, host_public_key="", ssm_target=""),
            seq=1,
            boot="new",
            started=new_started,
        ),
        job.line(
            "algo-1",
            node(host_public_key=new_key, sshd_port=2222, ssm_target=""),
            seq=2,
            boot="new",
            started=new_started,
        ),
    )
    backend = job.backend()
    assert pinned(backend.manifests(JOB)["algo-1"]) == (new_key, "", 2222, "127.0.0.1")
    # the replay: the old boot's lines, and the new boot's own first (port 0) line, byte for byte, stamped later
    replay = [
        *old_lines,
        job.line(
            "algo-1",
            node(state="starting", sshd_port=0, host_public_key="", ssm_target=""),
            seq=1,
            boot="new",
            started=new_started,
        ),
    ]
    job.log("algo-2-1700000000", *replay, at_ms=int(time.time() * 1000) + 1000)
    for reader in (backend, job.backend()):  # this attach, and a fresh one that sees it all at once
        got = reader.manifests(JOB)["algo-1"]
        assert pinned(got) == (new_key, "", 2222, "127.0.0.1") and got is not None and got.ranks == []


def test_a_lower_seq_line_of_the_same_boot_cannot_replace_a_pinned_key_or_port(job: Job) -> None:
    """(issue 29) A holder of the job's secret (valid MAC) logs, after the laptop pinned algo-1's boot, a
    document of that same boot with a *lower* seq (0, and 1 like the node's own "starting" line) carrying
    their host key, managed instance and port.  Sorting by seq once put it first, so it pinned the
    forger's values and the genuine document became "the change".  The first value read wins."""
    job.publish_genuine()
    backend = job.backend()
    assert pinned(backend.manifests(JOB)["algo-1"]) == GENUINE
    job.log("algo-2-1700000000", job.line("algo-1", evil(), seq=0), job.line("algo-1", evil(), seq=1))
    got = backend.manifests(JOB)["algo-1"]
    assert pinned(got) == GENUINE and got is not None and [r.port for r in got.ranks] == [41000]
    assert job.hint()["algo-1"] == {"sshd_host": "127.0.0.1", "sshd_port": 40022, "ssm_target": TARGET}
    assert backend.manifests(JOB)["algo-1"] is not None and pinned(backend.manifests(JOB)["algo-1"]) == GENUINE


def test_a_line_signed_with_another_jobs_secret_is_ignored(job: Job) -> None:
    """(c) The forger's own job (same account: it may log to the same group) knows its own secret: a valid
    MAC, of the wrong job, for a higher seq of the genuine boot and for a newer boot."""
    other_key, _ = keys.ensure_job_key(job.paths, "other-job")
    other = keys.job_secret(other_key)
    job.publish_genuine()
    backend = job.backend()
    assert pinned(backend.manifests(JOB)["algo-1"]) == GENUINE
    job.log(
        "algo-1-1700000000",  # in algo-1's own stream, even
        job.line("algo-1", evil(), seq=99, secret=other),
        job.line("algo-1", evil(), seq=1, boot="evil", started=job.started + 3_600_000, secret=other),
        job.line("algo-2", evil("algo-2"), seq=1, boot="evil", started=job.started + 3_600_000, secret=other),
    )
    got = backend.manifests(JOB)
    assert pinned(got["algo-1"]) == GENUINE and got["algo-2"] is not None
    assert got["algo-2"].host_public_key == KEY
    assert job.hint()["algo-1"]["ssm_target"] == TARGET


def test_lines_older_than_the_job_are_ignored(job: Job) -> None:
    """(d) Nothing of this job is older than its CreationTime.  A genuine line of an earlier job with the
    same name (another region, launched from this laptop: keys are per job name, so the same secret),
    replayed now, before this job's algo-1 has published: its MAC'd ``started`` gives it away.  And events
    stamped before the job was created (the read window starts later; the reader checks too)."""
    earlier = ms(job.created) - 86_400_000
    before = ms(job.created) - 2 * CLOCK_SKEW_MS
    job.log("algo-1-1600000000", job.line("algo-1", evil(), seq=5, boot="yesterday", started=earlier))
    job.log("algo-1-1600000001", job.line("algo-1", evil(), seq=6, boot="early", started=before), at_ms=before)
    backend = job.backend()
    assert backend.manifests(JOB)["algo-1"] is None
    job.publish_genuine()
    assert pinned(backend.manifests(JOB)["algo-1"]) == GENUINE
    assert all(r["startTime"] >= ms(job.created) - CLOCK_SKEW_MS for r in job.requests)


def test_a_genuine_line_of_another_node_in_algo1s_stream_is_accepted(job: Job) -> None:
    """(e) MPI: the workers' output (their hooks' lines included) reaches CloudWatch through algo-1's
    stream.  Proven lines count whatever stream they come in, and each node they name counts as heard, so
    reads move on from the job's start once every node published."""
    job.log(
        "algo-1-1700000000",
        job.line("algo-1", node(), seq=1),
        job.line("algo-2", node("algo-2", sshd_port=40023), seq=1, boot="h1"),
        job.line("algo-2", rank(3), seq=2, boot="h1"),
    )
    backend = job.backend()
    got = backend.manifests(JOB)
    assert pinned(got["algo-1"]) == GENUINE
    assert got["algo-2"] is not None and got["algo-2"].sshd_port == 40023
    assert [r.rank for r in got["algo-2"].ranks] == [3]
    backend.manifests(JOB)
    floor = ms(job.created) + 120_000 - CLOCK_SKEW_MS  # TrainingStartTime less the skew margin
    assert job.requests[0]["startTime"] == floor and job.requests[-1]["startTime"] > floor


def test_lines_stamped_in_the_future_do_not_make_reads_skip_the_nodes_lines(job: Job) -> None:
    """A writer picks any timestamp (CloudWatch takes up to 2 h ahead).  Stamped 90 minutes ahead: a replayed
    genuine line in algo-1's stream, a forged one in algo-2's.  Where the next reads start must not jump
    ahead with them: a rank that reports now is still seen."""
    job.publish_genuine()
    backend = job.backend()
    assert backend.manifests(JOB)["algo-2"] is not None
    ahead = int(time.time() * 1000) + 90 * 60_000
    job.log("algo-1-1700000000", job.line("algo-1", node(), seq=2), at_ms=ahead)
    job.log("algo-2-1700000000", unsigned("algo-2", node("algo-2"), boot="h1", started=job.started, seq=9), at_ms=ahead)
    backend.manifests(JOB)  # reads them
    job.log("algo-2-1700000000", job.line("algo-2", rank(2), seq=2, boot="h1"))
    got = backend.manifests(JOB)["algo-2"]
    assert job.requests[-1]["startTime"] < int(time.time() * 1000)
    assert got is not None and [r.rank for r in got.ranks] == [2]
