"""Reading the nodes' manifests of a SageMaker job back from CloudWatch Logs.

Why this channel (see ``manifest_lines`` for the line format): SageMaker already ships every
container's stdout to the log group ``/aws/sagemaker/TrainingJobs``, one stream per node
(``<job>/algo-<n>-<epoch>``), for every job, image and SDK, with no set-up.  The container needs no
AWS credentials, boto3 or network access of its own to publish (S3 would need all three plus a
bucket), and the user's own identity reads the lines; each line's MAC (below) is what makes pinning
the host key from it sound.  Cost: FilterLogEvents is rate limited (a
few calls per second per account), so one call covers every node (stream prefix ``<job>/``), and
callers poll at most every ``min_interval`` seconds.

Where a read starts, so that it scans no more of the job's log than it must:

- Never before the job's TrainingStartTime (less :data:`CLOCK_SKEW_MS`: SageMaker stamps that time,
  the node's own clock stamps the events): nothing of ours can be older, and a chatty job's log can
  be long.  The backend passes it from DescribeTrainingJob (``since``).
- After that, from each stream's own high-water mark (the newest manifest event read from it), the
  oldest of them, less :data:`OVERLAP_MS`.  One global newest timestamp would be wrong: each node's
  clock stamps its own stream and streams are delivered independently, so a node whose clock is
  behind, or whose events arrive late, would have its next lines skipped for good.  A node expected
  by the job that has not been heard from yet keeps the read at ``since``.
- A scan takes at most :data:`MAX_PAGES` calls per poll (FilterLogEvents may answer a long range
  with pages of nothing but a ``nextToken``); one that stops early (page limit, throttling) goes on
  from its token at the next poll instead of starting over, which could never get further.

What a read believes (issue 13; the trust boundary is in docs/SECURITY.md).  The user's identity
authenticates the *log group*, not the writer: whoever may PutLogEvents there can log a line in any
stream, with any timestamp.  So the reader keeps only lines with a valid MAC of the job's secret
(``manifest_lines``), from whichever stream under ``<job>/`` they come (under MPI the workers' output
is in algo-1's stream: a stream says nothing about a node), and refuses:

- events stamped before the job's CreationTime, and lines whose boot started before it (less
  :data:`CLOCK_SKEW_MS`): nothing of this job is older; the MAC'd ``started`` is what a replay of
  another job's genuine line (same name, same key) cannot change;
- within a boot, a document that changes a pinned field (``merge_manifest_lines``).

Refused lines are counted (:attr:`ManifestLog.refused`), never raised: a forger must not be able to stop
an attach either.  Only accepted lines move the read position, and never past the reading time: a
(replayed) line stamped hours ahead would otherwise make later reads skip the node's real lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from remote_debug.contract import manifest_lines, spec
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.core.errors import AwsError

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
# A quoted term matches the phrase with its punctuation; it keeps the training output out of the
# answer, so a chatty job costs no more to read than a quiet one.
FILTER_PATTERN = f'"{manifest_lines.MANIFEST_LINE_PREFIX.strip()}"'
# Events of one stream are not visible strictly in timestamp order: re-read a margin, drop what we have.
OVERLAP_MS = 60_000
CLOCK_SKEW_MS = 5 * 60_000
MAX_PAGES = 10
# Errors after which the scan keeps its place and the next poll tries again (botocore has retried already).
TRY_LATER = ("ThrottlingException", "ServiceUnavailableException", "LimitExceededException")


class ManifestLog:
    """Incremental reader of one job's manifest lines."""

    def __init__(
        self,
        client: Callable[[], Any],
        job: str,
        *,
        min_interval: float = 2.0,
        secret: str | None,
        since: float | None = None,
        created: float | None = None,
        nodes: Iterable[str] = (),
    ) -> None:
        self._client = client
        self.job = job
        self.min_interval = min_interval
        self.secret = secret  # the job's secret: lines without its MAC are refused (None: every line is)
        self.since = since  # epoch seconds: TrainingStartTime (see the module docstring)
        self.created = created  # epoch seconds: the job's CreationTime; nothing older is the job's
        self.nodes = list(nodes)  # the job's nodes: until each was heard from, reads start at `since`
        self._events: dict[str, tuple[int, manifest_lines.ManifestLine]] = {}
        self._marks: dict[str, int] = {}  # stream -> newest timestamp accepted from it (ms, capped at read time)
        self._heard: set[str] = set()  # nodes with an accepted line (in any stream: MPI shares algo-1's)
        self._scan: tuple[dict[str, Any], str] | None = None  # a scan left unfinished: (its request, token)
        self._last_poll = float("-inf")
        self.error: str | None = None  # the last proven but unreadable line, if any
        self._refused: dict[str, str] = {}  # event id (or node/boot/seq) -> why it was refused
        # each boot's pinned values as first read, kept across polls: the first value per boot wins
        self._pins: manifest_lines.Pins = {}
        # what the reads saw, for a user left waiting: whether the group exists here, the streams that had lines
        self.group_missing = False
        self.streams: set[str] = set()

    @property
    def refused(self) -> int:
        """How many manifest lines were refused so far (forged, replayed, another job's or version's)."""
        return len(self._refused)

    def refusal_summary(self) -> str:
        """One line for the user about the refused lines ("" when there are none)."""
        if not self._refused:
            return ""
        last = " ".join(next(reversed(self._refused.values())).split())  # one line, whatever a stream name holds
        return (
            f"ignored {len(self._refused)} manifest log line(s) of job {self.job} that it did not provably write "
            f"(last: {last}): forged by someone who can write to its CloudWatch log group, replayed, or from "
            "another remote-debug version or job key; see docs/SECURITY.md"
        )

    @property
    def prefix(self) -> str:
        return f"{self.job}/"

    def start_ms(self) -> int | None:
        """Where a new scan starts (ms since the epoch), None for the beginning of the log."""
        floor = None if self.since is None else max(0, int(self.since * 1000) - CLOCK_SKEW_MS)
        if not self._marks or any(node not in self._heard for node in self.nodes):
            return floor
        start = max(0, min(self._marks.values()) - OVERLAP_MS)
        return start if floor is None else max(floor, start)

    def request(self) -> dict[str, Any]:
        """FilterLogEvents parameters of a new scan."""
        params: dict[str, Any] = {
            "logGroupName": LOG_GROUP,
            "logStreamNamePrefix": self.prefix,
            "filterPattern": FILTER_PATTERN,
        }
        start = self.start_ms()
        if start is not None:
            params["startTime"] = start
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
        # a token belongs to the request that produced it: a scan goes on with the same parameters
        params, token = self._scan if self._scan is not None else (self.request(), None)
        self._scan = None
        for _ in range(MAX_PAGES):
            try:
                page = logs.filter_log_events(**params, **({"nextToken": token} if token else {}))
            except Exception as exc:
                code = aws.error_code(exc)
                if code == "ResourceNotFoundException":
                    self.group_missing = True
                    return  # no job in this account/region has logged yet: nothing published
                if code in TRY_LATER:
                    if token:
                        self._scan = (params, token)  # keep the place: the next poll goes on from here
                    return
                if token and code == "InvalidParameterException":
                    return  # an expired token: the next poll starts a new scan from the marks
                if aws.is_error(exc):
                    what = f"reading the manifest of {self.job} from CloudWatch"
                    raise AwsError(aws.describe_error(exc, what)) from None
                raise
            self.group_missing = False
            for event in page.get("events", []):
                self._add(event)
            token = page.get("nextToken")
            if not token:
                return
        if token:
            self._scan = (params, token)  # stopped early: the next poll goes on from here

    def _add(self, event: dict[str, Any]) -> None:
        stream = str(event.get("logStreamName") or "")
        if not stream.startswith(self.prefix):
            return  # another job's stream (the service filters by prefix; not every stand-in does)
        self.streams.add(stream)
        event_id = str(event.get("eventId") or f"{stream}:{event.get('timestamp')}")
        if event_id in self._events or event_id in self._refused:
            return
        try:
            line = manifest_lines.parse_manifest_line(str(event.get("message", "")), secret=self.secret)
        except manifest_lines.CutManifestLine:
            return  # the head of a line the toolkit cut in two: the node writes it again whole
        except manifest_lines.UnprovenManifestLine as exc:
            self._refused[event_id] = f"{exc} in stream {stream[:200]}"
            return
        except spec.ContractError as exc:
            self.error = str(exc)
            return
        if line is None:
            return
        timestamp = int(event.get("timestamp") or 0)
        floor = None if self.created is None else int(self.created * 1000) - CLOCK_SKEW_MS
        if floor is not None and timestamp < floor:
            self._refused[event_id] = f"a line logged before job {self.job} was created, in stream {stream[:200]}"
            return
        if floor is not None and line.started < floor:
            self._refused[event_id] = f"{line.node}'s boot {line.boot[:40]!r} started before job {self.job} was created"
            return
        self._events[event_id] = (timestamp, line)
        # never past the reading time: a line stamped ahead must not make the next reads skip anything
        mark = min(timestamp, int(time.time() * 1000))
        self._marks[stream] = max(self._marks.get(stream, 0), mark)
        self._heard.add(line.node)

    def seen(self) -> str:
        """What the reads so far found, in a few words."""
        if self._last_poll == float("-inf"):
            return "not read yet"
        if self.group_missing:
            return f"no log group {LOG_GROUP} in this region yet"
        if not self.streams:
            return f"no manifest line in any stream under {self.prefix} yet"
        heard = f"nodes heard from: {', '.join(sorted(self._heard))}" if self._heard else "no node's line accepted"
        refused = f", {self.refused} line(s) refused" if self._refused else ""
        shown = ", ".join(sorted(self.streams)[:4]) + (", ..." if len(self.streams) > 4 else "")
        return f"{len(self._events)} manifest line(s) in {shown}; {heard}{refused}"

    def _conflict(self, line: manifest_lines.ManifestLine, why: str) -> None:
        self._refused[f"{line.node}/{line.boot}/{line.started}/{line.seq}"] = why

    def manifests(self) -> dict[str, spec.NodeManifest]:
        merged = manifest_lines.merge_manifest_lines(self.poll(), on_refused=self._conflict, pins=self._pins)
        if not merged and self.error:
            raise spec.ContractError(f"job {self.job} published an unreadable manifest: {self.error}")
        return merged
