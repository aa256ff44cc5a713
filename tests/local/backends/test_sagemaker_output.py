"""``remote-debug logs`` of a SageMaker job: the nodes' CloudWatch streams (moto, validated against botocore's model)
read back as the ranks' lines - tags of ours, torchrun's and mpirun's recognised, our own lines left out, each line
stamped with its event's time - and ``--follow`` until the job has ended and its last lines arrived."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from remote_debug.contract import manifest_lines, spec
from remote_debug.laptop.aws.sagemaker_logs import CLOCK_SKEW_MS, LOG_GROUP
from remote_debug.laptop.aws.sagemaker_output import CloudWatchNodeOutput, stream_node
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.diagnose.rank_output import RankLine, RankOutput
from remote_debug.laptop.platforms import SageMakerBackend
from tests.helpers.fake_aws import ScriptedSageMaker, describe_response, moto_cloud

REGION = "us-west-2"
JOB = "sm-out"


@pytest.fixture
def now_ms() -> int:
    """The test's own now: the job's CreationTime is the moment DescribeTrainingJob answers, and a reader refuses
    lines from before it (a module-level now was 20 minutes old by the time a long CI run reached these tests)."""
    return int(time.time() * 1000)


@pytest.fixture
def logs(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    del home
    with moto_cloud(monkeypatch, REGION):
        client = boto3.client("logs", region_name=REGION)
        client.create_log_group(logGroupName=LOG_GROUP)
        yield client


def put(client: Any, stream: str, messages: list[str], at_ms: int) -> None:
    """Log ``messages`` as SageMaker does: one event per line, in the node's stream ``<job>/<stream>``."""
    name = f"{JOB}/{stream}"
    try:
        client.create_log_stream(logGroupName=LOG_GROUP, logStreamName=name)
    except client.exceptions.ResourceAlreadyExistsException:
        pass
    events = [{"timestamp": at_ms + i, "message": m} for i, m in enumerate(messages)]
    client.put_log_events(logGroupName=LOG_GROUP, logStreamName=name, logEvents=events)


def backend(logs: Any, statuses: list[str]) -> SageMakerBackend:
    """The job's DescribeTrainingJob answers ``statuses`` in turn (the last one from then on)."""
    sagemaker = boto3.client("sagemaker", region_name=REGION)

    def answer(n: int, job: str) -> dict[str, Any]:
        status = statuses[min(n, len(statuses) - 1)]
        return describe_response(job, status, "Training" if status == "InProgress" else status, instance_count=2)

    ScriptedSageMaker(sagemaker, answer)
    clients = {"sagemaker": sagemaker, "logs": logs}
    return SageMakerBackend(StatePaths.default(), clients=clients.__getitem__, cache_seconds=0, log_interval=0)


def test_stream_names_give_the_node() -> None:
    assert stream_node(JOB, f"{JOB}/algo-2-1700000000") == "algo-2"
    assert stream_node(JOB, f"{JOB}/algo-12-1700000000") == "algo-12"
    assert stream_node(JOB, f"{JOB}/algo-1") == "algo-1"


def test_a_sagemaker_jobs_lines_come_with_their_rank_node_and_time(logs: Any, now_ms: int) -> None:
    manifest = manifest_lines.format_manifest_line(
        "algo-1",
        spec.RankEndpoint(rank=0, local_rank=0, world_size=4, port=41000, pid=9),
        boot="b1",
        started=now_ms,
        seq=1,
        secret="5e" * 32,
    )
    put(
        logs,
        "algo-1-1700000000",
        [
            "Invoking script with the following command:",  # the toolkit's: its node only
            "[rank 0] epoch 1 loss 0.5",
            manifest,  # ours, never shown
            "[remote-debug] node algo-1: sshd on port 40022",  # the hook's, shown when asked
            "[rank 1] [remote-debug] rank 1: debug listener on port 41001",  # the rank agent's
            "[1,3]<stdout>:an MPI rank's line",  # mpirun --tag-output: rank 3 of the job
            "[default1]:[rank 1] torchrun --tee and ours",  # both: ours names the global rank
        ],
        now_ms,
    )
    put(logs, "algo-2-1700000001", ["[default0]:a torchrun line of local rank 0"], now_ms + 100)

    def local_ranks(node: str, local_rank: int) -> int | None:
        return {("algo-2", 0): 2}.get((node, local_rank))  # algo-2's local rank 0 is rank 2 (its rank document)

    sm = backend(logs, ["InProgress"])
    output = RankOutput(sm, JOB, local_ranks=local_ranks)
    lines = [line for batch in output.until_now() for line in batch]
    assert [(line.node, line.rank, line.line) for line in lines] == [
        ("algo-1", None, "Invoking script with the following command:"),
        ("algo-1", 0, "epoch 1 loss 0.5"),
        ("algo-1", 3, "an MPI rank's line"),
        ("algo-1", 1, "torchrun --tee and ours"),
        ("algo-2", 2, "a torchrun line of local rank 0"),
    ]
    assert lines[1].time == pytest.approx((now_ms + 1) / 1000)
    assert lines[1].to_json() == {"node": "algo-1", "rank": 0, "line": "epoch 1 loss 0.5", "time": lines[1].time}
    assert json.loads(json.dumps(lines[1].to_json())) == lines[1].to_json()
    assert [line.text() for line in lines[:2]] == [
        "[algo-1] Invoking script with the following command:",
        "[rank 0] epoch 1 loss 0.5",
    ]

    ours = RankOutput(sm, JOB, hook_lines=True, ranks=(1,), local_ranks=local_ranks)
    assert [line.line for batch in ours.until_now() for line in batch] == [
        "[remote-debug] rank 1: debug listener on port 41001",
        "torchrun --tee and ours",
    ]


def test_follow_reads_new_lines_until_the_job_ended_and_its_last_lines_came(logs: Any, now_ms: int) -> None:
    put(logs, "algo-1-1700000000", ["[rank 0] step 1"], now_ms)
    sm = backend(logs, ["InProgress", "InProgress", "InProgress", "Completed"])
    reader = CloudWatchNodeOutput(
        lambda: logs, JOB, created=time.time() - 60, page_interval=0, poll_seconds=0.01, settle_seconds=0.3
    )
    output = RankOutput(sm, JOB, output=reader, local_ranks=lambda node, local: None)
    output.status_seconds = 0
    ended: list[str] = []
    seen: list[RankLine] = []
    clock = iter(range(1000))

    def step(seconds: float) -> None:
        del seconds
        n = next(clock)
        if n == 1:
            put(logs, "algo-2-1700000000", ["[rank 2] step 1", "[rank 3] step 1"], now_ms + 10)
        time.sleep(0.02)

    for batch in output.follow(lambda info: ended.append(str(info.status)), sleep=step):
        seen += batch
    assert [(line.node, line.rank, line.line) for line in seen] == [
        ("algo-1", 0, "step 1"),
        ("algo-2", 2, "step 1"),
        ("algo-2", 3, "step 1"),
    ]
    assert ended == ["Completed"]


def test_a_throttled_read_goes_on_from_where_it_was(logs: Any, now_ms: int) -> None:
    put(logs, "algo-1-1700000000", [f"[rank 0] line {i}" for i in range(3)], now_ms)
    calls: list[dict[str, Any]] = []

    class Flaky:
        def filter_log_events(self, **params: Any) -> Any:
            calls.append(params)
            if len(calls) == 1:
                raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "FilterLogEvents")
            return logs.filter_log_events(**params)

    pauses: list[float] = []
    reader = CloudWatchNodeOutput(lambda: Flaky(), JOB, created=time.time() - 60, page_interval=0, sleep=pauses.append)
    assert reader.read() == [] and reader.behind  # throttled: what is there is still to read
    assert [line.text for line in reader.read()] == [f"[rank 0] line {i}" for i in range(3)]
    assert not reader.behind and pauses  # it waited before asking again
    assert reader.read() == []  # read once: the overlap read again is not said twice


def test_tail_reads_the_last_minutes_first_and_widens_only_when_they_hold_too_few_lines(logs: Any, now_ms: int) -> None:
    """``logs --tail N`` of a job that ran for hours: the last N lines come from a read of the last minutes (a scan
    from the start would be hours of pages at CloudWatch's few calls a second); a window holding fewer than N lines
    widens; ``--follow`` afterwards goes on from the window's end, no line twice."""
    hour = 3600 * 1000
    put(logs, "algo-1-1700000000", [f"[rank 0] early {i}" for i in range(3)], now_ms - 3 * hour)
    put(logs, "algo-1-1700000000", ["[rank 0] late 0", "[rank 0] late 1"], now_ms - 30 * 1000)
    put(logs, "algo-2-1700000000", ["[rank 1] late 0"], now_ms - 20 * 1000)
    starts: list[int] = []

    class Recording:
        def filter_log_events(self, **params: Any) -> Any:
            starts.append(params["startTime"])
            return logs.filter_log_events(**params)

    def output() -> RankOutput:
        reader = CloudWatchNodeOutput(lambda: Recording(), JOB, created=now_ms / 1000 - 4 * 3600, page_interval=0)
        sm = backend(logs, ["InProgress"])
        return RankOutput(sm, JOB, output=reader, local_ranks=lambda node, local: None)

    now = lambda: now_ms / 1000  # noqa: E731 - the test's own clock
    recent = output()
    assert [line.text() for line in recent.last(2, now=now)] == ["[rank 0] late 1", "[rank 1] late 0"]
    assert min(starts) == now_ms - 120_000  # reads of the last 2 minutes, nothing older

    starts.clear()
    wide = output()
    assert [line.text() for line in wide.last(4, now=now)] == [
        "[rank 0] early 2",
        "[rank 0] late 0",
        "[rank 0] late 1",
        "[rank 1] late 0",
    ]
    # 2 min, 16 min and 2 h held 3 lines; 16 h reaches back past the job's creation 4 h ago: the whole run
    windows = [seconds for seconds in (120, 960, 7200, 57600) if now_ms - seconds * 1000 in starts]
    assert windows == [120, 960, 7200] and min(starts) == now_ms - 4 * hour - CLOCK_SKEW_MS
    put(logs, "algo-2-1700000000", ["[rank 1] next"], now_ms + 10)
    assert [line.text() for line in wide.read()] == ["[rank 1] next"]  # follow: only what came after

    starts.clear()
    everything = output()
    assert len(everything.last(50, now=now)) == 7  # fewer lines than asked: the whole run, from its creation
    assert min(starts) == now_ms - 4 * hour - CLOCK_SKEW_MS
