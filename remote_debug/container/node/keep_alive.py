"""Keep-alive: the node stays up after the training command ends (``launch --keep-alive S``).

When the command ends, success or failure, the hook holds the node for S seconds: sshd, the manifests
and the laptop's ssh entries stay valid, and ``remote-debug run`` can start the entry again
(``rerun``).  The clock runs only while nothing runs: a run holds the run slot (``run_slot``), and S
seconds start again when it ends.  The hold ends early on ``remote-debug release`` (``RELEASE_SIGNAL``)
or a stop signal (``remote-debug stop``, StopTrainingJob); a run still on then is stopped.

The node document says so: ``kept_alive_until`` (wall clock) while the node holds, None while a run
runs, and ``run`` is the run the node is on - the laptop reads "kept alive, N s left" from it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from remote_debug.container.log import log
from remote_debug.container.node.run_slot import RunRecord, RunSlot
from remote_debug.contract.spec import kept_alive_phrase

POLL_SECONDS = 0.2
RUN_STOP_WAIT = 15.0  # a run being stopped at the hold's end: its `rerun` stops its command within 10 s


class KeepAlive:
    """The hold, run by the hook's main thread after the command ended; ``wake`` comes from signals."""

    def __init__(self, seconds: float, node_dir: Path | None, publish: Callable[..., None], node: str) -> None:
        self.seconds = seconds
        # the hook's private dir (run slot, run record); None when ssh sessions do not see the job: then
        # no run can start, and the node just holds
        self.node_dir = node_dir
        self.publish = publish
        self.node = node
        self.released = threading.Event()
        self.stopped = threading.Event()
        self._wake = threading.Event()

    def release(self) -> None:
        self.released.set()
        self._wake.set()

    def stop(self) -> None:
        self.stopped.set()
        self._wake.set()

    def hold(self, exit_code: int) -> int | None:
        """Hold until the time is up, a release or a stop; returns the exit code of the last run that
        ended (None when no run ran)."""
        until = time.time() + self.seconds
        self.publish(kept_alive_until=until)
        log(
            f"node {self.node}: the command ended (exit code {exit_code}); kept alive for {self.seconds:g} s "
            "(remote-debug release / stop end it sooner)"
        )
        running: RunRecord | None = None
        last_code: int | None = None
        published_run = 0
        while not (self.released.is_set() or self.stopped.is_set()):
            busy = self._busy()
            record = self._record()
            if busy and running is None:
                running = record or RunRecord(0, 0)
                log(f"node {self.node}: run {running.run} started")
                published_run = running.run
                self.publish(kept_alive_until=None, run=running.run)
            elif not busy and (running is not None or (record is not None and record.run != published_run)):
                # a run ended (one that came and went between two looks too: the record says so)
                last_code = record.exit_code if record is not None else None
                number = record.run if record is not None else published_run
                until = time.time() + self.seconds
                log(
                    f"node {self.node}: run {number} ended (exit code {last_code}); "
                    f"{kept_alive_phrase(round(self.seconds))}"
                )
                running, published_run = None, number
                self.publish(kept_alive_until=until, run=number)
            if running is None and time.time() >= until:
                log(f"node {self.node}: keep-alive over")
                break
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()
        if self.released.is_set():
            log(f"node {self.node}: released")
        if running is not None or self._busy():
            self._stop_run()
        # from the record, not what this loop saw: a run may have started and ended between two looks
        ended = self._record()
        return ended.exit_code if ended is not None and ended.exit_code is not None else last_code

    def _busy(self) -> bool:
        return self.node_dir is not None and RunSlot(self.node_dir).busy()

    def _record(self) -> RunRecord | None:
        return None if self.node_dir is None else RunRecord.read(self.node_dir)

    def _stop_run(self) -> None:
        record = self._record()
        if record is None or record.pid <= 0:
            return
        log(f"node {self.node}: stopping run {record.run}")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + RUN_STOP_WAIT
        while self._busy() and time.monotonic() < deadline:
            time.sleep(0.05)
