"""A claimed rank's view of itself: who it is, and its rank document next to the node manifest.

Shared by both kinds of debugged rank - debugpy's (``rank``) and PyCharm's (``pycharm_rank``) - so
neither imports the other.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from remote_debug.container.log import describe, log, one_line
from remote_debug.container.rank import gang_hold
from remote_debug.container.rank.hold import FailureHook, PostMortem
from remote_debug.contract.spec import RankEndpoint, RankState, write_rank_manifest
from remote_debug.oskit.osutil import process_start_ticks

LOCK_WAIT = 2.0  # seconds a rank waits for its document's lock (the node holds it for one rewrite)
# States a rank does not leave again: the watchers stop, and late updates must not revive it.
FINAL_STATES = (RankState.FINISHED, RankState.FAILED)


@contextlib.contextmanager
def document_lock(directory: Path, rank: int, *, wait: float = 0.0) -> Iterator[bool]:
    """An exclusive lock for writing ``rank``'s document (``.rank-N.lock`` in the manifest dir), tried for
    up to ``wait`` seconds; yields whether it is held.  A rank writes anyway when it is not (it cannot be
    made, or a child forked mid-write still holds it): a rank is never blocked by the lock."""
    try:
        fd = os.open(directory / f".rank-{rank}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        yield False
        return
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.01)
        yield True
    finally:
        os.close(fd)  # releases the lock


@dataclass(frozen=True)
class RankIdentity:
    rank: int
    local_rank: int
    world_size: int


class RankReporter:
    """This rank's document in the manifest dir, rewritten atomically on every state change.

    Several threads report (main, the wait window, the connection watcher, atexit), hence the lock.
    """

    def __init__(self, directory: Path, endpoint: RankEndpoint) -> None:
        self.directory = directory
        if endpoint.start_ticks is None and endpoint.pid == os.getpid():
            # with the pid it names this process: the node tells a dead rank from a reused pid
            endpoint = replace(endpoint, start_ticks=process_start_ticks(endpoint.pid))
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self._write_failed = False
        self._write()

    def update(
        self,
        *,
        state: RankState | None = None,
        error: str | None = None,
        port: int | None = None,
        traceback: str | None = None,
        failed_at: float | None = None,
        hold_until: float | None = None,
        held_for: int | None = None,
        held_for_error: str | None = None,
        unless: tuple[RankState, ...] = (),
    ) -> None:
        """Change the given fields (None: keep), unless the rank is in one of the ``unless`` states."""
        with self._lock:
            if self.endpoint.state in unless:
                return
            new = replace(
                self.endpoint,
                port=self.endpoint.port if port is None else port,
                state=self.endpoint.state if state is None else state,
                error=self.endpoint.error if error is None else (one_line(error) or None),  # "": clear it
                traceback=self.endpoint.traceback if traceback is None else traceback,
                failed_at=self.endpoint.failed_at if failed_at is None else failed_at,
                hold_until=self.endpoint.hold_until if hold_until is None else hold_until,
                held_for=self.endpoint.held_for if held_for is None else held_for,
                held_for_error=self.endpoint.held_for_error if held_for_error is None else held_for_error,
            )
            if new == self.endpoint:
                return
            self.endpoint = new
            self._write()

    @property
    def state(self) -> RankState:
        return self.endpoint.state

    def _write(self) -> None:
        try:
            # the node's watcher rewrites a dead rank's document under this lock (``gone_ranks``)
            with document_lock(self.directory, self.endpoint.rank, wait=LOCK_WAIT):
                write_rank_manifest(self.directory, self.endpoint)
        except OSError as exc:
            if not self._write_failed:  # one line per process is enough
                self._write_failed = True
                log(f"cannot write rank manifest in {self.directory}: {describe(exc)}")


def install_exit_reporting(
    reporter: RankReporter, *, hold_seconds: float = 0.0, debugger: PostMortem | None = None
) -> FailureHook:
    """An uncaught exception marks the rank failed with its traceback; with ``hold_seconds`` and a
    debugger, the rank first waits for a post-mortem debugger (see ``hold``), and with ``hold_seconds`` every
    rank of the job is held when one is (``gang_hold``; a rank without a debugger too)."""
    rank = reporter.endpoint.rank
    hook = FailureHook(reporter, rank, hold_seconds=hold_seconds, debugger=debugger)
    hook.install()
    hook.gang = gang_hold.start(reporter, rank, hold_seconds, debugger)
    return hook
