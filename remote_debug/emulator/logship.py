"""Node output to CloudWatch Logs, the way SageMaker's log driver ships it.

One event per line (the toolkit and most training code write line by line; Docker's awslogs driver
drops empty lines, so do we), to ``/aws/sagemaker/TrainingJobs``, stream ``<job>/algo-<n>-<epoch s>``.
Events wait ``delay`` seconds in a buffer, then go out in ``PutLogEvents`` batches that honour its
limits: at most 10,000 events and 1,048,576 bytes (UTF-8 message bytes + 26 per event) per call, one
event at most 256 KiB (longer lines are split), timestamps non-decreasing within a stream, and a
batch spanning under 24 hours.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
MAX_BATCH_EVENTS = 10_000
MAX_BATCH_BYTES = 1_048_576
EVENT_OVERHEAD = 26
MAX_EVENT_BYTES = 256 * 1024 - EVENT_OVERHEAD
MAX_BATCH_SPAN_MS = 24 * 3600 * 1000 - 1


@dataclass(frozen=True)
class Event:
    timestamp: int  # ms since the epoch
    message: str

    @property
    def size(self) -> int:
        return len(self.message.encode("utf-8")) + EVENT_OVERHEAD


def split_message(message: str, limit: int = MAX_EVENT_BYTES) -> list[str]:
    """``message`` in pieces of at most ``limit`` UTF-8 bytes, cut between characters."""
    data = message.encode("utf-8")
    if len(data) <= limit:
        return [message]
    pieces = []
    while data:
        cut = min(limit, len(data))
        while cut < len(data) and (data[cut] & 0xC0) == 0x80:  # never inside a multi-byte character
            cut -= 1
        pieces.append(data[:cut].decode("utf-8"))
        data = data[cut:]
    return pieces


def batches(events: list[Event]) -> list[list[Event]]:
    """``events`` (in order) cut into batches PutLogEvents accepts."""
    out: list[list[Event]] = []
    current: list[Event] = []
    size = 0
    for event in events:
        if current and (
            len(current) >= MAX_BATCH_EVENTS
            or size + event.size > MAX_BATCH_BYTES
            or event.timestamp - current[0].timestamp > MAX_BATCH_SPAN_MS
        ):
            out.append(current)
            current, size = [], 0
        current.append(event)
        size += event.size
    if current:
        out.append(current)
    return out


class LogShipper:
    """Buffers lines per stream; a thread ships what is ``delay`` seconds old.  :meth:`close` ships the rest."""

    def __init__(
        self,
        logs: Any,
        *,
        delay: float,
        group: str = LOG_GROUP,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._logs = logs
        self._group = group
        self._delay = max(0.0, delay)
        self._on_error = on_error
        self._pending: dict[str, list[tuple[float, Event]]] = {}  # stream -> (monotonic time queued, event)
        self._last_ts: dict[str, int] = {}
        self._failed: set[str] = set()
        self._cond = threading.Condition()
        self._closing = False
        self._group_ready = False
        self._thread = threading.Thread(target=self._run, name="emulator-logship", daemon=True)
        self._thread.start()

    def open_stream(self, stream: str) -> None:
        """Create the stream (and the group, once) now, so that it exists before its first event.

        A CloudWatch that cannot be reached is reported, not raised: on AWS, logs failing to ship
        do not fail the job either."""
        try:
            if not self._group_ready:
                try:
                    self._logs.create_log_group(logGroupName=self._group)
                except self._logs.exceptions.ResourceAlreadyExistsException:
                    pass
                self._group_ready = True
            try:
                self._logs.create_log_stream(logGroupName=self._group, logStreamName=stream)
            except self._logs.exceptions.ResourceAlreadyExistsException:
                pass
        except Exception as exc:
            self._report(stream, f"cannot create the log stream {stream}: {exc}")
        with self._cond:
            self._pending.setdefault(stream, [])

    def put(self, stream: str, line: str) -> None:
        if not line:
            return
        now = time.monotonic()
        with self._cond:
            # stdout and stderr are read by two threads: keep a stream's timestamps non-decreasing
            timestamp = max(int(time.time() * 1000), self._last_ts.get(stream, 0))
            self._last_ts[stream] = timestamp
            queue = self._pending.setdefault(stream, [])
            queue.extend((now, Event(timestamp, piece)) for piece in split_message(line))
            self._cond.notify_all()

    def close(self) -> None:
        """Ship everything still buffered, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                if self._closing:
                    due = {stream: [event for _, event in queue] for stream, queue in self._pending.items() if queue}
                    for queue in self._pending.values():
                        queue.clear()
                    if not due:
                        return
                else:
                    due = self._due(now)
                    if not due:
                        self._cond.wait(timeout=self._next_wait(now))
                        continue
            # shipped outside the lock: the readers keep reading while a batch is in flight
            for stream, events in due.items():
                self._ship(stream, events)

    def _due(self, now: float) -> dict[str, list[Event]]:
        due: dict[str, list[Event]] = {}
        for stream, queue in self._pending.items():
            count = 0
            while count < len(queue) and now - queue[count][0] >= self._delay:
                count += 1
            if count:
                due[stream] = [event for _, event in queue[:count]]
                del queue[:count]
        return due

    def _next_wait(self, now: float) -> float | None:
        oldest = [queue[0][0] for queue in self._pending.values() if queue]
        if not oldest:
            return None
        return max(0.01, min(oldest) + self._delay - now)

    def _ship(self, stream: str, events: list[Event]) -> None:
        for batch in batches(events):
            try:
                self._logs.put_log_events(
                    logGroupName=self._group,
                    logStreamName=stream,
                    logEvents=[{"timestamp": event.timestamp, "message": event.message} for event in batch],
                )
            except Exception as exc:  # the endpoint went away: say it once per stream, keep the job going
                self._report(stream, f"cannot ship logs of {stream} to CloudWatch: {exc}")

    def _report(self, stream: str, text: str) -> None:
        if stream not in self._failed and self._on_error is not None:
            self._failed.add(stream)
            self._on_error(text)
