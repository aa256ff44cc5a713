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
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path

from remote_debug.container.log import describe, log
from remote_debug.manifest_lines import format_manifest_line
from remote_debug.spec import (
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


def lines_enabled(spec: DebugSpec, env: Mapping[str, str]) -> bool:
    """Local jobs read manifest files directly; every SageMaker transport reads the log lines."""
    flag = env.get(ENV_MANIFEST_LINES, "").strip()
    if flag in ("0", "1"):
        return flag == "1"
    return spec.transport != Transport.LOCAL


class ManifestPublisher:
    """Emits a line per changed manifest document; ``poll()`` on demand, or every 0.5 s in a thread."""

    def __init__(self, directory: Path, node: str, *, fd: int = 1, interval: float = POLL_SECONDS) -> None:
        self.directory = directory
        self.node = node
        self.fd = fd
        self.interval = interval
        self.boot = f"{os.getpid()}-{os.urandom(4).hex()}"
        self._seq = 0
        self._seen: dict[str, str] = {}  # file name -> the text last published
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._complained: set[str] = set()

    def poll(self) -> int:
        """Publish every document that changed since the last call; returns how many lines went out."""
        with self._lock:
            sent = 0
            for path in [self.directory / NODE_MANIFEST_FILE, *sorted(self.directory.glob(RANK_MANIFEST_GLOB))]:
                try:
                    text = path.read_text()
                except OSError:  # not written yet, or replaced between glob and read
                    continue
                if self._seen.get(path.name) == text:
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
                line = format_manifest_line(self.node, document, boot=self.boot, seq=self._seq) + "\n"
                if not self._write(line.encode()):
                    return sent  # stdout is gone: try again at the next poll
                self._seen[path.name] = text
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
                    log(f"manifest publisher: {describe(exc)}")

        self._thread = threading.Thread(target=loop, name="remote-debug-publish", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and publish what changed last (the final node state)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.poll()
        except Exception as exc:
            log(f"manifest publisher: {describe(exc)}")
