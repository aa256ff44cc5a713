"""The manifest's way from a node's stdout to the laptop on SageMaker: through AWS's training toolkit
(which re-reads a training process's stdout in 64 KiB chunks), into CloudWatch Logs (moto, or
Stubber where a page sequence must be scripted; both validate every request against botocore's
model), and back through :class:`ManifestLog`."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber

from remote_debug.contract import job_secret, manifest_lines, spec
from remote_debug.laptop.aws.sagemaker_logs import (
    CLOCK_SKEW_MS,
    FILTER_PATTERN,
    LOG_GROUP,
    MAX_PAGES,
    OVERLAP_MS,
    ManifestLog,
)
from tests.helpers.fake_aws import moto_cloud

REGION = "us-west-2"
JOB = "sm-job"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX"
REPO = Path(__file__).resolve().parents[3]
CHUNK = 64 * 1024  # sagemaker_training.process._DEFAULT_BUF_SIZE (checked below)
SECRET = job_secret.derive_job_secret(b"tests/sagemaker_logs")
STARTED = int(time.time() * 1000)  # when the boots of these tests started (one value per boot, as a node's)


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with moto_cloud(monkeypatch, REGION):
        client = boto3.client("logs", region_name=REGION)
        client.create_log_group(logGroupName=LOG_GROUP)
        yield client


def put(client: Any, stream: str, messages: list[str], *, at_ms: int | None = None) -> None:
    """Log ``messages`` as SageMaker does: one event per line of the container's output."""
    name = f"{JOB}/{stream}"
    try:
        client.create_log_stream(logGroupName=LOG_GROUP, logStreamName=name)
    except client.exceptions.ResourceAlreadyExistsException:
        pass
    stamp = int(time.time() * 1000) if at_ms is None else at_ms
    events = [{"timestamp": stamp, "message": m} for m in messages if m]
    for start in range(0, len(events), 5000):
        client.put_log_events(logGroupName=LOG_GROUP, logStreamName=name, logEvents=events[start : start + 5000])


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
    )
    return spec.NodeManifest(**{**base, **fields})


def rank(number: int) -> spec.RankEndpoint:
    return spec.RankEndpoint(rank=number, local_rank=number % 2, world_size=4, port=41000 + number, pid=9)


def line(name: str, doc: spec.NodeManifest | spec.RankEndpoint, seq: int, boot: str = "b1") -> str:
    return manifest_lines.format_manifest_line(name, doc, boot=boot, started=STARTED, seq=seq, secret=SECRET)


# --- a manifest line cut in two by the training toolkit ---------------------------------------------

# A training process under the node's publisher: training output, then the node's manifest line
# exactly where the toolkit's 64 KiB read will cut it.  It waits for "go" and writes everything
# before "done", while the test holds the toolkit's event loop, so that the toolkit finds the whole
# output in the pipe at once and cuts it at 64 KiB, as it does when a chatty job fills the pipe.
TRAINING_UNDER_PUBLISHER = """
import fcntl, os, pathlib, sys, time
from remote_debug.container.node import publish

marks, manifest_dir, cut_at = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
fcntl.fcntl(1, fcntl.F_SETPIPE_SZ, 1 << 18)  # the whole output fits while the reader is held
publish.REPEAT_AFTER = (0.2,)  # the schedule, shortened for the test
publisher = publish.ManifestPublisher(manifest_dir, "algo-1", secret=os.environ["TEST_JOB_SECRET"])
(marks / "started").touch()
while not (marks / "go").exists():
    time.sleep(0.01)
os.write(1, b"loss 0.25 " * ((cut_at - 1) // 10) + b"x" * ((cut_at - 1) % 10) + b"\\n")
publisher.poll()  # the node's line: its first bytes end the toolkit's first chunk
time.sleep(0.3)
os.write(1, b"epoch 2\\n")
publisher.poll()  # the node's document has not changed since: only a repeat would print it again
(marks / "done").touch()
"""


def run_under_toolkit(tmp_path: Path, capsys: pytest.CaptureFixture[str], cut_into_line: int) -> list[str]:
    """The lines the toolkit's output pipeline (``process.run_async`` -> ``watch``) prints for the child."""
    # Importing the toolkit creates its directories: under /opt/ml when that exists, else under
    # ~/sagemaker_local/jobs/<time>; SAGEMAKER_BASE_DIR keeps both out of this machine's real paths.
    if "sagemaker_training.environment" not in sys.modules:
        os.environ["SAGEMAKER_BASE_DIR"] = str(tmp_path / "toolkit-base")
        try:
            from sagemaker_training import process
        finally:
            os.environ.pop("SAGEMAKER_BASE_DIR", None)
    from sagemaker_training import process

    assert process._DEFAULT_BUF_SIZE == CHUNK
    marks, manifest_dir = tmp_path / "marks", tmp_path / "manifest"
    marks.mkdir()
    spec.write_node_manifest(manifest_dir, node())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMOTE_DEBUG_", "SM_"))}
    env["PYTHONPATH"] = str(REPO)
    env["TEST_JOB_SECRET"] = SECRET  # the job's secret, as the hook has it (from the environment, not argv)
    cmd = [sys.executable, "-c", TRAINING_UNDER_PUBLISHER, str(marks), str(manifest_dir), str(CHUNK - cut_into_line)]

    async def drive() -> tuple[int, Any, Any]:
        running = asyncio.ensure_future(process.run_async(cmd, 1, env=env, cwd=str(tmp_path), stderr=None))
        deadline = time.monotonic() + 60
        while not (marks / "started").exists():
            assert time.monotonic() < deadline and not running.done(), "the child did not start"
            await asyncio.sleep(0.01)
        (marks / "go").touch()
        while not (marks / "done").exists():  # blocking on purpose: the toolkit reads nothing meanwhile
            assert time.monotonic() < deadline, "the child did not finish writing"
            time.sleep(0.01)
        return await asyncio.wait_for(running, 60)

    capsys.readouterr()
    return_code, _, _ = asyncio.run(drive())
    assert return_code == 0
    return capsys.readouterr().out.splitlines()


def test_manifest_line_cut_at_the_toolkits_64k_read_still_reaches_the_laptop(
    logs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printed = run_under_toolkit(tmp_path, capsys, cut_into_line=100)
    ours = [text for text in printed if manifest_lines.MANIFEST_LINE_PREFIX in text]
    # the toolkit did cut the first copy: its head is one event, its tail (no prefix) the next
    head = ours[0]
    tail = printed[printed.index(head) + 1]
    assert len(head) == 100 and manifest_lines.MANIFEST_LINE_PREFIX not in tail
    json.loads((head + tail)[len(manifest_lines.MANIFEST_LINE_PREFIX) :])  # the cut was the only damage
    put(logs, "algo-1-1700000000", printed)
    reader = ManifestLog(lambda: logs, JOB, min_interval=0, secret=SECRET)
    got = reader.manifests()
    assert got["algo-1"].sshd_port == 40022 and got["algo-1"].host_public_key == KEY
    assert reader.error is None  # a cut copy is not a broken manifest


# --- where reads start, and how a scan goes on ------------------------------------------------------

PAGE_REQUEST = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": f"{JOB}/", "filterPattern": FILTER_PATTERN}


def stubbed_logs() -> tuple[Any, Stubber]:
    client = botocore.session.get_session().create_client(
        "logs", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    return client, Stubber(client)


def event(stream: str, message: str, at_ms: int, event_id: str) -> dict[str, Any]:
    return {
        "logStreamName": f"{JOB}/{stream}",
        "timestamp": at_ms,
        "message": message,
        "eventId": event_id,
        "ingestionTime": at_ms,
    }


def test_a_scan_that_stops_early_goes_on_from_its_token() -> None:
    """A long range answered with pages of nothing but a nextToken (as CloudWatch does): after
    MAX_PAGES calls the poll stops, and the next one continues the same scan rather than starting over
    (which would read the same empty pages again, and never reach the manifest)."""
    client, stubber = stubbed_logs()
    for page in range(MAX_PAGES):
        stubber.add_response(
            "filter_log_events",
            {"events": [], "nextToken": f"token-{page + 1}"},
            {**PAGE_REQUEST, **({"nextToken": f"token-{page}"} if page else {})},
        )
    stubber.add_client_error(
        "filter_log_events",
        "ThrottlingException",
        "Rate exceeded",
        expected_params={**PAGE_REQUEST, "nextToken": f"token-{MAX_PAGES}"},
    )
    found = event("algo-1-1", line("algo-1", node(), 1), 1_700_000_005_000, "e1")
    stubber.add_response("filter_log_events", {"events": [found]}, {**PAGE_REQUEST, "nextToken": f"token-{MAX_PAGES}"})
    reader = ManifestLog(lambda: client, JOB, min_interval=0, secret=SECRET)
    with stubber:
        assert reader.manifests() == {}  # MAX_PAGES empty pages: the poll stops there
        assert reader.manifests() == {}  # throttled (after botocore's own retries): keeps its place
        assert reader.manifests()["algo-1"].sshd_port == 40022
        stubber.assert_no_pending_responses()


def test_reads_resume_from_each_streams_own_high_water_mark(logs: Any) -> None:
    """Each node's clock stamps its own stream: algo-1's is 10 minutes ahead.  Its newest line must
    not decide where algo-2's stream is read from, or algo-2's next lines would be skipped for good."""
    now = int(time.time() * 1000)
    requests: list[dict[str, Any]] = []
    logs.meta.events.register(
        "before-parameter-build.cloudwatch-logs.FilterLogEvents", lambda params, **_: requests.append(dict(params))
    )
    put(logs, "algo-1-1", [line("algo-1", node(), 1)], at_ms=now + 600_000)
    put(logs, "algo-2-1", [line("algo-2", node("algo-2"), 1)], at_ms=now)
    reader = ManifestLog(lambda: logs, JOB, min_interval=0, secret=SECRET, nodes=["algo-1", "algo-2"])
    assert set(reader.manifests()) == {"algo-1", "algo-2"}
    put(logs, "algo-2-1", [line("algo-2", rank(2), 2)], at_ms=now + 1000)
    put(logs, "algo-1-1", [line("algo-1", rank(0), 2)], at_ms=now + 601_000)
    again = reader.manifests()
    assert requests[-1]["startTime"] == now - OVERLAP_MS  # algo-2's mark, the older of the two
    assert [r.rank for r in again["algo-2"].ranks] == [2]
    assert [r.rank for r in again["algo-1"].ranks] == [0]


def test_reads_start_at_the_job_start_while_a_node_is_not_heard_from(logs: Any) -> None:
    now = int(time.time() * 1000)
    requests: list[dict[str, Any]] = []
    logs.meta.events.register(
        "before-parameter-build.cloudwatch-logs.FilterLogEvents", lambda params, **_: requests.append(dict(params))
    )
    put(logs, "algo-1-1", [line("algo-1", rank(7), 5)], at_ms=now - 3_600_000)  # before the job started
    put(logs, "algo-1-1", [line("algo-1", node(), 1)], at_ms=now)
    reader = ManifestLog(
        lambda: logs, JOB, min_interval=0, secret=SECRET, since=now / 1000 - 600, nodes=["algo-1", "algo-2"]
    )
    assert reader.manifests()["algo-1"].ranks == []  # nothing from before the start was read
    assert requests[0]["startTime"] == now - 600_000 - CLOCK_SKEW_MS  # the job's start, not the log's
    assert reader.start_ms() == now - 600_000 - CLOCK_SKEW_MS  # algo-2 may have logged anywhere since
    put(logs, "algo-2-1", [line("algo-2", node("algo-2"), 1)], at_ms=now - 400_000)  # it was late to arrive
    assert set(reader.manifests()) == {"algo-1", "algo-2"}
    assert reader.start_ms() == now - 400_000 - OVERLAP_MS


def test_other_jobs_streams_are_not_read(logs: Any) -> None:
    """``sm-job-2`` starts with ``sm-job``: a stream prefix ``sm-job/`` keeps it out, in the request and
    (for stand-ins that ignore the prefix, like moto) in what the reader keeps."""
    now = int(time.time() * 1000)
    put(logs, "algo-1-1", [line("algo-1", node(), 1)], at_ms=now)
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName="sm-job-2/algo-1-1")
    logs.put_log_events(
        logGroupName=LOG_GROUP,
        logStreamName="sm-job-2/algo-1-1",
        logEvents=[{"timestamp": now, "message": line("algo-1", node(job_name="sm-job-2", sshd_port=1), 5)}],
    )
    assert ManifestLog(lambda: logs, JOB, min_interval=0, secret=SECRET).manifests()["algo-1"].sshd_port == 40022
