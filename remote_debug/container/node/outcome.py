"""What the node says about its ranks' failures: a line when a rank is held, and the failure file.

Both read the rank documents of the node's manifest dir, from the node's own process (the hook), whose
output is the node's log whatever the launcher does with the ranks' own (torchrun ``--redirects``, a
driver that captures them).

* A rank held for a post-mortem (``hold``) is announced in the node log, once per hold: the user
  looking at the log learns that the job is alive for a debugger, and for how long.
* When the command failed, the node writes SageMaker's failure file (``/opt/ml/output/failure``;
  DescribeTrainingJob's ``FailureReason`` is "AlgorithmError: " + its first 1024 characters) with the
  exception line of the rank that failed first - not what the launcher printed last (torchrun's
  ``=====`` banner), which is all a platform without the file can show.  A node whose ranks were held
  with a failed rank of another node (``rank/gang_hold.py``) names that rank's exception too: its ranks'
  ends (released, or stopped with the job) are not the job's failure.  As the training toolkit does
  (``sagemaker_training.files.write_failure_file``), an existing file is left alone: whatever the
  command wrote itself is closer to the cause.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from remote_debug.container.log import describe, log
from remote_debug.contract.spec import (
    FAILURE_FILE,
    FAILURE_REASON_LIMIT,
    RankEndpoint,
    RankState,
    held_phrase,
    held_with_phrase,
    read_rank_documents,
)
from remote_debug.contract.spec import root_cause as spec_root_cause
from remote_debug.oskit.osutil import atomic_write_text

DEFAULT_CONFIG_DIR = "/opt/ml/input/config"
POLL_SECONDS = 0.5


# --- the held-rank line --------------------------------------------------------------------------


def held_line(rank: RankEndpoint, now: float) -> str:
    """``rank 1 held for post-mortem, 87 s left: ValueError: bad 42`` (the wording of ``jobs``); a rank held
    for another's failure: ``rank 0 held with rank 3, which failed, 87 s left: ValueError: bad 42``."""
    left = rank.hold_seconds_left(now)
    if rank.held_for is not None:
        error = f": {rank.held_for_error}" if rank.held_for_error else ""
        return (
            f"rank {rank.rank} {held_with_phrase(rank.held_for)}"
            + (f", {left} s left" if left is not None else "")
            + error
        )
    error = f": {rank.error}" if rank.error else ""
    return f"rank {rank.rank} {held_phrase(left)}{error}"


class HeldRankNotices:
    """Watches the manifest dir and logs one line for each rank that becomes held."""

    def __init__(self, directory: Path, node: str, interval: float = POLL_SECONDS) -> None:
        self.directory = directory
        self.node = node
        self.interval = interval
        self._told: set[tuple[int, int]] = set()  # (rank, pid): a restarted rank's hold is news again
        self._seen_mtime = -1  # the dir's: documents are replaced by rename, so an unchanged dir has no news
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> list[str]:
        """Log (and return) the lines of the ranks held since the last look."""
        lines: list[str] = []
        try:
            mtime = self.directory.stat().st_mtime_ns
        except OSError:
            return lines
        # (a file system's clock ticks coarsely: a change in the same tick as the last look is caught
        # by looking again while the time is recent)
        if mtime == self._seen_mtime and time.time_ns() - mtime > 1_000_000_000:
            return lines
        self._seen_mtime = mtime
        now = time.time()
        for rank in read_rank_documents(self.directory, skip_broken=True):
            if rank.state != RankState.HELD or (rank.rank, rank.pid) in self._told:
                continue
            self._told.add((rank.rank, rank.pid))
            where = "where it was" if rank.held_for is not None else "at the exception"
            line = f"node {self.node}: {held_line(rank, now)}; a debugger attached to it stops {where}"
            log(line)
            lines.append(line)
        return lines

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    self.poll()
                except Exception as exc:  # never let a notice take the hook down
                    log(f"watching the ranks: {describe(exc)}")
                    return

        self._thread = threading.Thread(target=loop, name="remote-debug-notices", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


# --- the failure file ----------------------------------------------------------------------------


def output_dir(env: Mapping[str, str]) -> Path | None:
    """The node's output dir: ``SM_OUTPUT_DIR`` (the toolkit's; local jobs set it), else the one next to
    the node's SageMaker config (``/opt/ml/output``) when there is such a config - never a directory
    made up on a machine that is no SageMaker node."""
    explicit = env.get("SM_OUTPUT_DIR", "").strip()
    if explicit:
        return Path(explicit)
    config = Path(env.get("SM_INPUT_CONFIG_DIR") or DEFAULT_CONFIG_DIR)
    if (config / "resourceconfig.json").is_file():
        return config.parent.parent / "output"
    return None


def root_cause(ranks: list[RankEndpoint]) -> RankEndpoint | None:
    """The rank that died of an uncaught exception first (its peers often fail after it, of it): see
    ``spec.root_cause``.  A node whose own ranks did not fail, but were held with a rank of another node
    that did (``gang_hold``), names that rank: the job failed of its exception, not of these ranks' ends."""
    cause = spec_root_cause(ranks)
    if cause is not None:
        return cause
    held = sorted((r for r in ranks if r.held_for is not None and r.held_for_error), key=lambda r: r.rank)
    if not held:
        return None
    return replace(held[0], rank=held[0].held_for or 0, error=held[0].held_for_error, held_for=None)


def failure_text(rank: RankEndpoint) -> str:
    """The failing rank's exception line; which rank it was when the job has several."""
    text = str(rank.error)
    return text if rank.world_size <= 1 else f"{text} (rank {rank.rank})"


def write_failure_file(manifest_dir: Path, env: Mapping[str, str]) -> str | None:
    """After the command failed: the root cause's exception line into the failure file, unless the
    file exists or no rank died of an exception; what was written.  Never raises."""
    try:
        directory = output_dir(env)
        if directory is None or not directory.is_dir():
            return None
        path = directory / FAILURE_FILE
        if path.exists():
            return None
        cause = root_cause(read_rank_documents(manifest_dir, skip_broken=True))
        if cause is None:
            return None
        text = failure_text(cause)[:FAILURE_REASON_LIMIT]
        atomic_write_text(path, text)  # 0644: the platform may read it as another user
        return text
    except Exception as exc:  # a report about the failure must not become one
        log(f"cannot write the failure file: {describe(exc)}")
        return None
