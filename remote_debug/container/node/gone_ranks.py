"""The node makes the documents of ranks that died without a last word final.

A rank writes its document's last state at exit; SIGKILL (the OOM killer), or the SIGTERM torchrun
sends a rank's peers after it failed, skip that.  The document then keeps promising the rank's ports
(``port``, ``control_port``), and with ``--keep-alive`` the node stays up for the whole hold: another
local process could bind a freed port and be taken for the rank.  So the node (the hook, or the node
daemon) watches its ranks' processes - the pid, and the start time a document records - and rewrites
the document of one that is gone as "failed", without ports (``RankEndpoint.gone``), with a line in
the node's log.

A document is rewritten under the same lock the rank takes to write it (``document_lock``), and only
after reading it again under that lock: a re-run's new rank (``remote-debug run``) writing the same
file meanwhile is never overwritten.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from remote_debug.container.log import describe, log
from remote_debug.container.rank.reporter import document_lock
from remote_debug.contract.spec import (
    RANK_MANIFEST_GLOB,
    ContractError,
    RankEndpoint,
    write_rank_manifest,
)
from remote_debug.oskit.osutil import process_gone

POLL_SECONDS = 1.0


def _read(path: Path) -> RankEndpoint | None:
    try:
        return RankEndpoint.from_json(json.loads(path.read_bytes().decode("utf-8")))
    except (OSError, ValueError, ContractError):
        return None


def finalise_gone_ranks(directory: Path) -> list[int]:
    """Rewrite the documents of ranks whose process is gone; the ranks rewritten."""
    done = []
    for path in sorted(directory.glob(RANK_MANIFEST_GLOB)):
        doc = _read(path)
        if doc is None or doc.gone() is doc:  # final already: nothing to settle
            continue
        if process_gone(doc.pid, doc.start_ticks) is None:
            continue
        with document_lock(directory, doc.rank) as locked:
            if not locked:
                continue  # a rank is writing it right now: the next look decides
            again = _read(path)  # a new process of this rank may have written it since
            if again != doc:
                continue
            reason = process_gone(doc.pid, doc.start_ticks)
            if reason is None:
                continue
            settled = doc.gone()
            try:
                write_rank_manifest(directory, settled)
            except OSError as exc:
                log(f"cannot mark rank {doc.rank} gone in {directory}: {describe(exc)}")
                continue
        if settled.state != doc.state:  # (a skipped rank reports no end: its exit is no news)
            log(f"rank {doc.rank} ended without a last word ({reason}): its document no longer names its ports")
        done.append(doc.rank)
    return done


class GoneRankWatcher:
    """Runs :func:`finalise_gone_ranks` every second until stopped, and once more when stopped."""

    def __init__(self, directory: Path, interval: float = POLL_SECONDS) -> None:
        self.directory = directory
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> list[int]:
        try:
            return finalise_gone_ranks(self.directory)
        except Exception as exc:  # never let the watcher take the node down
            log(f"watching the ranks' processes: {describe(exc)}")
            return []

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.interval):
                self.sweep()

        self._thread = threading.Thread(target=loop, name="remote-debug-gone-ranks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sweep()
