"""Publishing the node's manifest documents as log lines (the SageMaker channel, see ``spec``).

The hook (or the node daemon) is the one process per node that emits them: it watches the
manifest dir (node.json + rank-*.json, written as before) and prints a line for every document that
changed.  Why one emitter rather than each rank printing its own line: a rank's stdout may be
redirected away from the job's log (torchrun ``--redirects``/``--tee``, mpirun
``--output-filename``, a driver that captures it), while the node process's stdout is the
container's, which SageMaker ships to CloudWatch; and rank.py stays free of channel details.

Lines are written with a single ``os.write`` of at most a few hundred bytes: writes up to
PIPE_BUF (4096) bytes to a pipe are atomic, so a line never interleaves with the training
script's output, even though both share the same stdout.

Atomic is not whole, though: a reader may still cut a line in two.  AWS's training toolkit reads
the training process's stdout in 64 KiB chunks and prints each chunk's lines
(``sagemaker_training/process.py``, ``watch``), so under heavy output a line that straddles a chunk
boundary reaches CloudWatch as two events, neither of which the laptop can read.  Hence each
document's line is written again, byte for byte, :data:`REPEAT_AFTER` seconds after it changed:
a cut depends on where the line falls in the output at that moment, so a copy written seconds later
lands elsewhere and is lost only if it, too, is cut (each cut is unlikely: a few hundred bytes in a
64 KiB chunk).  Only after a change, and a bounded number of times: a node whose documents do not
change prints nothing, so a long job's log is not filled with copies, and copies of one document
cost a few lines per change.  Stopping writes the copies still due at once (there is no later).
The laptop (``sagemaker_logs``) takes a cut line for "not yet" rather than for a broken manifest.

Each line carries a MAC of the job's secret (``manifest_lines``): the log group is writable by more
principals than the job, and only a MAC'd line moves what the laptop pins.  ``started`` (this
publisher's wall-clock start) tells the laptop which boot of the node is the newest.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from remote_debug.container.log import describe, log
from remote_debug.contract.manifest_lines import format_manifest_line
from remote_debug.contract.spec import (
    NODE_MANIFEST_FILE,
    RANK_MANIFEST_GLOB,
    ContractError,
    DebugSpec,
    NodeManifest,
    RankEndpoint,
    Transport,
)

ENV_MANIFEST_LINES = "REMOTE_DEBUG_MANIFEST_LINES"  # "1"/"0" force the log-line channel on/off
POLL_SECONDS = 0.5
# Seconds after a document changed at which its line is written again (see the module docstring).
# Growing gaps: the bursts of output that cause cuts (start-up warnings, a flood of log lines) pass.
REPEAT_AFTER: tuple[float, ...] = (5.0, 30.0, 120.0)


def lines_enabled(spec: DebugSpec, env: Mapping[str, str]) -> bool:
    """Local jobs read manifest files directly; every SageMaker transport reads the log lines."""
    flag = env.get(ENV_MANIFEST_LINES, "").strip()
    if flag in ("0", "1"):
        return flag == "1"
    return spec.transport != Transport.LOCAL


@dataclass
class _Published:
    text: str  # the file's text when it was published
    line: bytes  # the line written for it, repeated byte for byte
    repeats: list[float] = field(default_factory=list)  # monotonic times of the copies still due


class ManifestPublisher:
    """Emits a line per changed manifest document, and its repeats; ``poll()`` on demand, or every
    0.5 s in a thread."""

    def __init__(
        self,
        directory: Path,
        node: str,
        *,
        secret: str,
        fd: int = 1,
        interval: float = POLL_SECONDS,
        repeat_after: Sequence[float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.node = node
        self.fd = fd
        self.interval = interval
        self.repeat_after = tuple(REPEAT_AFTER if repeat_after is None else repeat_after)
        self.clock = clock
        self.secret = secret  # the job's (spec.job_secret): the key of every line's MAC
        self.boot = f"{os.getpid()}-{os.urandom(4).hex()}"
        self.started = int(time.time() * 1000)  # this boot's wall-clock start (ms): the newest boot wins
        self._seq = 0
        self._seen: dict[str, _Published] = {}  # file name -> what was last published for it
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._complained: set[str] = set()

    def poll(self, *, flush: bool = False) -> int:
        """Publish every document that changed since the last call, and the repeats that are due (all
        pending ones with ``flush``); returns how many lines went out."""
        with self._lock:
            sent = 0
            now = self.clock()
            for path in [self.directory / NODE_MANIFEST_FILE, *sorted(self.directory.glob(RANK_MANIFEST_GLOB))]:
                try:
                    text = path.read_text()
                except OSError:  # not written yet, or replaced between glob and read
                    continue
                published = self._seen.get(path.name)
                if published is not None and published.text == text:
                    if published.repeats and (flush or published.repeats[0] <= now):
                        if not self._write(published.line):
                            return sent  # stdout is gone: try again at the next poll
                        # one copy however many were due (a poll that came late must not burst)
                        published.repeats = [] if flush else [t for t in published.repeats if t > now]
                        sent += 1
                    continue
                try:
                    data = json.loads(text)
                    is_node = path.name == NODE_MANIFEST_FILE
                    document = NodeManifest.from_json(data) if is_node else RankEndpoint.from_json(data)
                except (ValueError, ContractError) as exc:
                    if path.name not in self._complained:  # one line per broken file is enough
                        self._complained.add(path.name)
                        log(f"not publishing {path.name}: {describe(exc)}")
                    continue
                self._seq += 1
                text_line = format_manifest_line(
                    self.node, document, boot=self.boot, started=self.started, seq=self._seq, secret=self.secret
                )
                line = (text_line + "\n").encode()
                if not self._write(line):
                    return sent  # stdout is gone: try again at the next poll
                self._seen[path.name] = _Published(text, line, [now + delay for delay in self.repeat_after])
                sent += 1
            return sent

    def _write(self, data: bytes) -> bool:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
            return True
        except OSError:
            return False

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    self.poll()
                except Exception as exc:  # never let the publisher take the hook down
                    log(f"publishing the manifest: {describe(exc)}")

        self._thread = threading.Thread(target=loop, name="remote-debug-publish", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and publish what changed last (the final node state), then the copies still
        due: there is no later for them."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.poll()
            self.poll(flush=True)
        except Exception as exc:
            log(f"publishing the manifest: {describe(exc)}")
