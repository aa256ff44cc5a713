"""Reading the nodes' manifests of a SageMaker job back from CloudWatch Logs.

Why this channel (see ``spec`` for the line format): SageMaker already ships every container's
stdout to the log group ``/aws/sagemaker/TrainingJobs``, one stream per node
(``<job>/algo-<n>-<epoch>``), for every job, image and SDK, with no set-up.  The container needs no
AWS credentials, boto3 or network access of its own to publish (S3 would need all three plus a
bucket), and the user's own identity reads the lines, so what arrives is authenticated end to end,
which is what makes pinning the host key from it sound.  Cost: FilterLogEvents is rate limited (a
few calls per second per account), so one call covers every node (stream prefix ``<job>/``), reads
only what is new since the last call, and callers poll at most every ``min_interval`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from remote_debug import manifest_lines, spec
from remote_debug.local import aws
from remote_debug.local.errors import UserError

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
# A quoted term matches the phrase with its punctuation; it keeps the training output out of the
# answer, so a chatty job costs no more to read than a quiet one.
FILTER_PATTERN = f'"{manifest_lines.MANIFEST_LINE_PREFIX.strip()}"'
# Events are not visible in timestamp order across streams: re-read a margin, drop what we have.
OVERLAP_MS = 60_000
MAX_PAGES = 50


class ManifestLog:
    """Incremental reader of one job's manifest lines."""

    def __init__(self, client: Callable[[], Any], job: str, *, min_interval: float = 2.0) -> None:
        self._client = client
        self.job = job
        self.min_interval = min_interval
        self._events: dict[str, tuple[int, manifest_lines.ManifestLine]] = {}
        self._newest_ms: int | None = None
        self._last_poll = float("-inf")
        self.error: str | None = None  # the last malformed line, if any

    def request(self, next_token: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {
            "logGroupName": LOG_GROUP,
            "logStreamNamePrefix": f"{self.job}/",
            "filterPattern": FILTER_PATTERN,
        }
        if self._newest_ms is not None:
            params["startTime"] = max(0, self._newest_ms - OVERLAP_MS)
        if next_token:
            params["nextToken"] = next_token
        return params

    def poll(self) -> list[manifest_lines.ManifestLine]:
        """Every manifest line of the job seen so far, in logged order."""
        now = time.monotonic()
        if now - self._last_poll >= self.min_interval:
            self._last_poll = now
            self._fetch()
        ordered = sorted(self._events.values(), key=lambda item: (item[0], item[1].seq))
        return [line for _, line in ordered]

    def _fetch(self) -> None:
        logs = self._client()
        token: str | None = None
        for _ in range(MAX_PAGES):
            try:
                page = logs.filter_log_events(**self.request(token))
            except Exception as exc:
                if aws.error_code(exc) == "ResourceNotFoundException":
                    return  # no job in this account/region has logged yet: nothing published
                if aws.is_error(exc):
                    what = f"reading the manifest of {self.job} from CloudWatch"
                    raise UserError(aws.describe_error(exc, what)) from None
                raise
            for event in page.get("events", []):
                self._add(event)
            token = page.get("nextToken")
            if not token:
                return

    def _add(self, event: dict[str, Any]) -> None:
        event_id = str(event.get("eventId") or f"{event.get('logStreamName')}:{event.get('timestamp')}")
        if event_id in self._events:
            return
        try:
            line = manifest_lines.parse_manifest_line(str(event.get("message", "")))
        except spec.ContractError as exc:
            self.error = str(exc)
            return
        if line is None:
            return
        timestamp = int(event.get("timestamp") or 0)
        self._events[event_id] = (timestamp, line)
        self._newest_ms = max(self._newest_ms or 0, timestamp)

    def manifests(self) -> dict[str, spec.NodeManifest]:
        merged = manifest_lines.merge_manifest_lines(self.poll())
        if not merged and self.error:
            raise spec.ContractError(f"job {self.job} published an unreadable manifest: {self.error}")
        return merged
