"""What the nodes of a SageMaker job printed, read back from CloudWatch Logs (``remote-debug logs``).

SageMaker ships every container's stdout and stderr to the log group ``/aws/sagemaker/TrainingJobs``, one
stream per node and boot (``<job>/algo-<n>-<epoch>``), one event per line, stamped by the node's clock.  One
FilterLogEvents call reads every node's stream at once (stream prefix ``<job>/``), which keeps a 64-node job to
the calls of a 1-node one: FilterLogEvents is rate limited per account (a few calls per second), so pages are
paced (:data:`PAGE_INTERVAL`), a throttled read goes on from its token after a pause, and a follower polls every
:data:`POLL_SECONDS`.

Where a read starts, as for the manifest lines (``sagemaker_logs``): the first scan at the job's creation (less
:data:`~remote_debug.laptop.aws.sagemaker_logs.CLOCK_SKEW_MS`); each later one at the oldest of the streams'
newest events, less :data:`~remote_debug.laptop.aws.sagemaker_logs.OVERLAP_MS` (each node's clock stamps its own
stream, and streams are delivered independently: one global newest time would skip a late node's lines).  The
overlap is read twice; events are told apart by their id.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws.sagemaker_logs import CLOCK_SKEW_MS, LOG_GROUP, MAX_PAGES, OVERLAP_MS, TRY_LATER
from remote_debug.laptop.core.backend import NodeLine, NodeOutput
from remote_debug.laptop.core.errors import AwsError

PAGE_INTERVAL = 0.25  # between two FilterLogEvents calls of this reader: at most 4 a second
THROTTLED_PAUSE = 2.0  # after a throttled call, before the next one
POLL_SECONDS = 2.0  # a follower's pause between reads that found nothing new
SETTLE_SECONDS = 15.0  # after the job ended: lines still on their way to CloudWatch
_BOOT_SUFFIX = re.compile(r"^(?P<node>.+)-\d{9,}$")  # algo-1-1700000000 (the boot's epoch seconds) -> algo-1


def stream_node(job: str, stream: str) -> str:
    """The node a stream of the job belongs to (``<job>/algo-2-1700000000`` -> ``algo-2``)."""
    rest = stream[len(job) + 1 :] if stream.startswith(f"{job}/") else stream
    match = _BOOT_SUFFIX.match(rest)
    return match.group("node") if match else rest


class CloudWatchNodeOutput(NodeOutput):
    def __init__(
        self,
        client: Callable[[], Any],
        job: str,
        *,
        created: float | None,
        start: float | None = None,
        page_interval: float = PAGE_INTERVAL,
        poll_seconds: float = POLL_SECONDS,
        settle_seconds: float = SETTLE_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self.job = job
        self.created = created  # epoch seconds: the job's CreationTime (nothing of it is older)
        self.start = start  # epoch seconds: lines stamped before it are not read (a tail's window), None: all
        self.page_interval = page_interval
        self._poll_seconds, self._settle_seconds = poll_seconds, settle_seconds
        self._sleep = sleep
        self._marks: dict[str, int] = {}  # stream -> its newest event read (ms)
        self._seen: dict[str, int] = {}  # event id -> its timestamp (ms), for the overlap read twice
        self._scan: tuple[dict[str, Any], str] | None = None  # a scan left unfinished: (its request, token)
        self._next_call = 0.0  # monotonic time before which no call is made
        self._throttled = False  # the last read was cut short: what it did not read is there still
        self.group_missing = False

    def _start_ms(self) -> int | None:
        floor = None if self.created is None else max(0, int(self.created * 1000) - CLOCK_SKEW_MS)
        if self.start is not None:
            floor = int(self.start * 1000) if floor is None else max(floor, int(self.start * 1000))
        if not self._marks:
            return floor
        start = max(0, min(self._marks.values()) - OVERLAP_MS)
        return start if floor is None else max(floor, start)

    def _request(self) -> dict[str, Any]:
        params: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": f"{self.job}/"}
        start = self._start_ms()
        if start is not None:
            params["startTime"] = start
            # the overlap before it can come again; older ids cannot
            self._seen = {event: ms for event, ms in self._seen.items() if ms >= start}
        return params

    @property
    def behind(self) -> bool:
        """Lines already in CloudWatch are still unread (a scan stopped at its page limit or was throttled)."""
        return self._scan is not None or self._throttled

    def read(self, *, final: bool = False) -> list[NodeLine]:
        del final  # CloudWatch holds whole lines only
        params, token = self._scan if self._scan is not None else (self._request(), None)
        self._scan, self._throttled = None, False
        events: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            self._pace()
            try:
                page = self._client().filter_log_events(**params, **({"nextToken": token} if token else {}))
            except Exception as exc:
                code = aws.error_code(exc)
                if code == "ResourceNotFoundException":
                    self.group_missing = True  # no job of this account and region has logged yet
                    break
                if code in TRY_LATER:
                    # botocore has retried already: pause, then go on from here (before the first page: start again)
                    self._next_call = time.monotonic() + THROTTLED_PAUSE
                    self._throttled = True
                    self._scan = (params, token) if token else None
                    break
                if token and code == "InvalidParameterException":
                    break  # an expired token: the next read starts a new scan from the marks
                if aws.is_error(exc):
                    raise AwsError(
                        aws.describe_error(exc, f"reading the output of {self.job} from CloudWatch")
                    ) from None
                raise
            self.group_missing = False
            events += page.get("events", [])
            token = page.get("nextToken")
            if not token:
                break
        else:
            self._scan = (params, str(token))  # at the page limit: the next read goes on from here
        return self._lines(events)

    def _pace(self) -> None:
        wait = self._next_call - time.monotonic()
        if wait > 0:
            self._sleep(wait)
        self._next_call = time.monotonic() + self.page_interval

    def _lines(self, events: list[dict[str, Any]]) -> list[NodeLine]:
        fresh: list[tuple[int, str, str]] = []
        for event in events:
            stream = str(event.get("logStreamName") or "")
            if not stream.startswith(f"{self.job}/"):
                continue  # another job's stream (the service filters by prefix; not every stand-in does)
            timestamp = int(event.get("timestamp") or 0)
            event_id = str(event.get("eventId") or f"{stream}:{timestamp}:{event.get('message')}")
            if event_id in self._seen:
                continue
            self._seen[event_id] = timestamp
            # never past the reading time: a line stamped ahead must not make the next reads skip anything
            mark = min(timestamp, int(time.time() * 1000))
            self._marks[stream] = max(self._marks.get(stream, 0), mark)
            fresh.append((timestamp, stream, str(event.get("message", ""))))
        fresh.sort(key=lambda item: item[0])  # stable: a stream's events of one millisecond keep their order
        return [
            NodeLine(stream_node(self.job, stream), text.rstrip("\r"), timestamp / 1000)
            for timestamp, stream, message in fresh
            for text in message.rstrip("\n").split("\n")
        ]

    def settle_seconds(self) -> float:
        return self._settle_seconds

    def poll_seconds(self) -> float:
        return self._poll_seconds

    def since(self, epoch_seconds: float) -> CloudWatchNodeOutput | None:
        """FilterLogEvents from ``epoch_seconds`` on: a tail of a long run reads its last minutes, not hours of pages
        at the account's few calls a second."""
        if self.created is not None and epoch_seconds * 1000 <= self.created * 1000 - CLOCK_SKEW_MS:
            return None  # the whole run: a reader from the start reads the same
        return CloudWatchNodeOutput(
            self._client,
            self.job,
            created=self.created,
            start=epoch_seconds,
            page_interval=self.page_interval,
            poll_seconds=self._poll_seconds,
            settle_seconds=self._settle_seconds,
            sleep=self._sleep,
        )

    def where(self) -> str:
        if self.group_missing:
            return f"CloudWatch Logs group {LOG_GROUP} (not in this region yet)"
        return f"CloudWatch Logs group {LOG_GROUP}, streams {self.job}/..."
