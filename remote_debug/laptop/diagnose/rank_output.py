"""``remote-debug logs``: what the ranks print, from the start of the run, each line attributed to its rank.

The backend gives the nodes' output (:meth:`~remote_debug.laptop.core.backend.Backend.node_output`: a job's log
files here, CloudWatch Logs for SageMaker); a node's output mixes all its ranks (and, under MPI, the whole job's
in algo-1's stream), so a line's rank can only come from a tag at its start, put there by whoever wrote it:

* ours, ``[rank 3] `` (``spec.RANK_OUTPUT_PREFIX``): every rank of a multi-rank debug-enabled job tags its
  Python-level output (``container/rank/output_prefix.py``): the global rank;
* torchrun's ``--tee``/``--local-ranks-filter``, ``[default0]:`` (``[<role><local rank>]:``): the node's local rank
  0, mapped to its global rank with the node's rank documents (their ``local_rank``); ``[3]:`` (torchrun's
  ``--log-line-prefix-template "[${rank}]:"``): global rank 3;
* Open MPI's ``--tag-output`` (which SageMaker's MPI runner passes), ``[1,3]<stdout>:``: rank 3 of the job.

Tags nest (``[default0]:[rank 0] loss``); the innermost global rank wins.  A line without a tag belongs to its
node only (``rank`` None): the launcher's, C code writing to the file descriptors, a job that turned the tags off.
Our own lines are not training output: the manifest lines are left out always, the hook's and the rank agent's
``[remote-debug] ...`` lines unless asked for.
"""

from __future__ import annotations

import collections
import copy
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from remote_debug.contract import manifest_lines, spec
from remote_debug.laptop.core.backend import Backend, NodeLine, NodeOutput
from remote_debug.laptop.core.jobinfo import TERMINAL, JobInfo

# what every line of the hook and the rank agent starts with (container/log.py)
OUR_LOG_PREFIX = "[remote-debug] "
OUR_TAG = re.compile("^" + re.escape(spec.RANK_OUTPUT_PREFIX).replace(re.escape("{rank}"), r"(?P<rank>\d+)"))
# torchrun: [<role><local rank>]: (a role is an identifier), or [<global rank>]: from a prefix template
TORCHRUN_LOCAL_TAG = re.compile(r"^\[(?P<role>[A-Za-z_][\w.-]*?)(?P<local>\d+)\]:")
TORCHRUN_RANK_TAG = re.compile(r"^\[(?P<rank>\d+)\]:")
# Open MPI's --tag-output: [<job>,<rank>]<stream>: (Open MPI 5 puts a space after it)
MPI_TAG = re.compile(r"^\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>: ?")
STATUS_SECONDS = 2.0  # a follower asks whether the job ended this often
# ``--tail N`` reads the last 2 minutes first, then 16, 2 h, 16 h, then the whole run, until N lines are found: a
# run's last lines without reading hours of it (CloudWatch answers a few pages a second)
TAIL_WINDOWS = (120.0, 960.0, 7200.0, 57600.0)


@dataclass(frozen=True)
class RankLine:
    """One line of the job's output: ``rank`` None when nothing on the line says which rank wrote it."""

    node: str
    rank: int | None
    line: str
    time: float | None  # epoch seconds, where the backend stamps lines (CloudWatch); None for a log file

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "rank": self.rank, "line": self.line, "time": self.time}

    def text(self) -> str:
        """``[rank 3] loss 0.31``; a line of no known rank ``[algo-1] ...``."""
        return (f"[rank {self.rank}]" if self.rank is not None else f"[{self.node}]") + f" {self.line}"


LocalRanks = Callable[[str, int], int | None]  # (node, local rank) -> its global rank, None when unknown


def attribute(line: NodeLine, local_ranks: LocalRanks) -> tuple[int | None, str]:
    """The rank ``line`` names with its tags, and the line without the tags that named it.  A torchrun tag whose
    local rank cannot be mapped stays on the line: it is the one thing that tells the rank."""
    text, rank = line.text, None
    while True:
        if match := OUR_TAG.match(text):
            rank = int(match.group("rank"))
        elif (match := MPI_TAG.match(text)) or (match := TORCHRUN_RANK_TAG.match(text)):
            rank = int(match.group("rank")) if rank is None else rank
        elif match := TORCHRUN_LOCAL_TAG.match(text):
            mapped = local_ranks(line.node, int(match.group("local")))
            if mapped is None:
                inner, rest = attribute(NodeLine(line.node, text[match.end() :], line.time), local_ranks)
                return (rank, text) if inner is None and rank is None else (rank if rank is not None else inner, rest)
            rank = mapped if rank is None else rank
        else:
            return rank, text
        text = text[match.end() :]


def bare(text: str) -> str:
    """``text`` without any tag in front (a torchrun tag with no known rank too)."""
    while match := (
        OUR_TAG.match(text) or MPI_TAG.match(text) or TORCHRUN_RANK_TAG.match(text) or TORCHRUN_LOCAL_TAG.match(text)
    ):
        text = text[match.end() :]
    return text


def is_manifest_line(text: str) -> bool:
    return manifest_lines.MANIFEST_LINE_PREFIX in text


class LocalRankMap:
    """(node, local rank) -> global rank, from the nodes' rank documents (the backend's manifests), asked lazily:
    only a torchrun tag needs it, and asking a SageMaker job's costs a CloudWatch read."""

    def __init__(self, backend: Backend, job: str, *, min_interval: float = 10.0) -> None:
        self.backend, self.job, self.min_interval = backend, job, min_interval
        self._ranks: dict[tuple[str, int], int] = {}
        self._asked = float("-inf")

    def __call__(self, node: str, local_rank: int) -> int | None:
        key = (node, local_rank)
        if key not in self._ranks and time.monotonic() - self._asked >= self.min_interval:
            self._asked = time.monotonic()
            try:
                manifests = self.backend.manifests(self.job)
            except Exception:  # a manifest we cannot read leaves the tag as it is, never ends the reading
                manifests = {}
            for name, manifest in manifests.items():
                for r in manifest.ranks if manifest is not None else []:
                    self._ranks[(name, r.local_rank)] = r.rank
        return self._ranks.get(key)


class RankOutput:
    """The job's output as :class:`RankLine` s: the selected ranks' (all: every line), without our own lines."""

    def __init__(
        self,
        backend: Backend,
        job: str,
        *,
        ranks: spec.RankSelection | None = None,
        hook_lines: bool = False,
        output: NodeOutput | None = None,
        local_ranks: LocalRanks | None = None,
    ) -> None:
        self.backend, self.job = backend, job
        self.ranks = frozenset(ranks) if ranks is not None else None  # None: every line, of a known rank or not
        self.hook_lines = hook_lines
        self.output = output if output is not None else backend.node_output(job)
        self.local_ranks = local_ranks if local_ranks is not None else LocalRankMap(backend, job)
        self.status_seconds = STATUS_SECONDS  # a follower asks whether the job ended this often

    def _keep(self, line: NodeLine) -> RankLine | None:
        if is_manifest_line(line.text):
            return None
        rank, text = attribute(line, self.local_ranks)
        if not self.hook_lines and bare(text).startswith(OUR_LOG_PREFIX):
            return None
        if self.ranks is not None and rank not in self.ranks:
            return None
        return RankLine(line.node, rank, text, line.time)

    def read(self, *, final: bool = False) -> list[RankLine]:
        """The lines that arrived since the last read (a bounded amount: see :attr:`behind`)."""
        return [kept for line in self.output.read(final=final) if (kept := self._keep(line)) is not None]

    @property
    def behind(self) -> bool:
        return self.output.behind

    def until_now(self) -> Iterator[list[RankLine]]:
        """Everything printed so far, in batches (a long log is never held whole); the job may still run."""
        info = self.backend.describe(self.job)
        final = info.status in TERMINAL
        while True:
            batch = self.read(final=final)
            if batch:
                yield batch
            if not batch and not self.behind:
                return

    def last(self, count: int, *, now: Callable[[], float] = time.time) -> list[RankLine]:
        """The last ``count`` lines printed so far, read in widening windows of time where the backend stamps its
        lines (:data:`TAIL_WINDOWS`); a window holding ``count`` lines holds the last ``count``, as every line after
        it is in it too.  A :meth:`follow` afterwards goes on from where the read window ended."""
        for window in TAIL_WINDOWS:
            reader = self.output.since(now() - window)
            if reader is None:
                break  # no times to go by, or the window reaches back to the run's start
            windowed = copy.copy(self)  # the same selection and rank map, reading the window
            windowed.output = reader
            lines = tail(windowed.until_now(), count)
            if len(lines) >= count:
                self.output = reader
                return lines
        return tail(self.until_now(), count)

    def follow(
        self,
        on_end: Callable[[JobInfo], None] = lambda info: None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Iterator[list[RankLine]]:
        """Everything printed so far, then each new line as it comes, until the job has ended and its last lines
        arrived (``on_end`` is told when the job is seen to end)."""
        info = self.backend.describe(self.job)
        checked = time.monotonic()
        ended_at: float | None = time.monotonic() if info.status in TERMINAL else None
        if ended_at is not None:
            on_end(info)
        while True:
            batch = self.read()
            if batch:
                yield batch
            if self.behind:
                continue
            now = time.monotonic()
            if ended_at is None and now - checked >= self.status_seconds:
                checked = now
                info = self.backend.describe(self.job)
                if info.status in TERMINAL:
                    ended_at = now
                    on_end(info)
            if ended_at is not None and now - ended_at >= self.output.settle_seconds() and not batch:
                last = self.read(final=True)  # a last line without its newline is whole now
                if last:
                    yield last
                return
            if not batch:
                sleep(self.output.poll_seconds())


def tail(batches: Iterator[list[RankLine]], count: int) -> list[RankLine]:
    """The last ``count`` lines of ``batches``."""
    kept: collections.deque[RankLine] = collections.deque(maxlen=count)
    for batch in batches:
        kept.extend(batch)
    return list(kept)
