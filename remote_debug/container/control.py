"""A rank's control channel: a loopback TCP listener served by a daemon thread of the rank.

It is a separate thread, so it answers while the rank's main thread is blocked in a collective or
a C call (a signal handler would not run then).  Reached only through the node's sshd, like the
debug port.  One JSON line in, one JSON line out, per connection (the ops: ``spec.ControlOp``):

* ``{"op": "listen"}`` -> ``{"ok": true, "port": N}``: start debugpy now (lazy listeners) and make
  collectives pause-safe (see ``pause_safe``);
* ``{"op": "pause-safe"}`` -> ``{"ok": true, "detail": ...}``: a debugger attached somewhere in the
  job: raise this rank's process-group timeout so a paused peer does not kill the job;
* ``{"op": "stacks"}`` -> ``{"ok": true, "threads": [{"name", "frames": [{"file", "line",
  "function"}]}]}``: every thread's current Python stack, from ``sys._current_frames()`` (no
  tracing installed, no ptrace).

Stdlib only; torch is used only when the rank already imported ``torch.distributed``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from remote_debug.container.common import quiet_thread, seconds_knob
from remote_debug.container.log import describe, log
from remote_debug.spec import ENV_PG_TIMEOUT, LOOPBACK, ControlOp

MAX_REQUEST = 4096
DEFAULT_PG_TIMEOUT_SECONDS = 7200.0  # long enough for a debugging session
MAX_PG_TIMEOUT_SECONDS = 365 * 24 * 3600.0  # anything beyond is a typo (and timedelta has a limit)
PENDING_POLL_SECONDS = 0.05  # raise the timeout this soon after a late init_process_group


def pg_timeout_seconds(env: Mapping[str, str]) -> float:
    """``REMOTE_DEBUG_PG_TIMEOUT``: 0 leaves the process-group timeout alone."""
    return seconds_knob(env, ENV_PG_TIMEOUT, DEFAULT_PG_TIMEOUT_SECONDS, high=MAX_PG_TIMEOUT_SECONDS)


def pause_safe(seconds: float) -> str:
    """Raise the default process group's timeout to ``seconds`` (a rank paused at a breakpoint
    must not make its peers' collectives time out and torchrun kill the job).

    Gloo and NCCL both honour ``_set_pg_timeout`` for new collectives.  GPU jobs also have NCCL's
    watchdog, which is configured only by environment variables read when the process group is
    created: set ``TORCH_NCCL_ENABLE_MONITORING=0`` (or a long ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC``)
    in the job's environment when ranks are to be paused for long (see docs/PERFORMANCE.md).
    Not undone on detach: collectives already in flight keep the timeout they started with, and a
    long timeout costs nothing while the job runs.
    """
    c10d: Any = sys.modules.get("torch.distributed.distributed_c10d")
    if seconds <= 0:
        return "disabled"
    if c10d is None or not c10d.is_initialized():
        return "no process group"
    c10d._set_pg_timeout(timedelta(seconds=seconds), None)
    return f"process-group timeout {seconds:g} s"


def thread_stacks() -> list[dict[str, Any]]:
    """Every thread's Python stack (outermost frame first), except remote_debug's and debugpy's."""
    threads = {t.ident: t for t in threading.enumerate()}
    result = []
    for ident, frame in sys._current_frames().items():
        thread = threads.get(ident)
        if thread is not None and getattr(thread, "is_pydev_daemon_thread", False):
            continue
        frames = [
            {"file": f.filename, "line": f.lineno or 0, "function": f.name} for f in traceback.extract_stack(frame)
        ]
        result.append({"name": thread.name if thread is not None else f"thread-{ident}", "frames": frames})
    return result


class ControlServer:
    def __init__(self, on_listen: Callable[[], int], env: Mapping[str, str]) -> None:
        self.on_listen = on_listen
        self.pg_timeout = pg_timeout_seconds(env)
        self._lock = threading.Lock()
        self._pending = False
        self._server = socket.socket()
        self._server.bind((LOOPBACK, 0))
        self._server.listen(8)
        self.port = int(self._server.getsockname()[1])
        quiet_thread(self._accept_loop, "remote-debug-control").start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            quiet_thread(lambda c=conn: self._serve(c), "remote-debug-control-conn").start()  # type: ignore[misc]

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(10)
                data = b""
                while b"\n" not in data and len(data) < MAX_REQUEST:
                    chunk = conn.recv(MAX_REQUEST)
                    if not chunk:
                        break
                    data += chunk
                reply = self.handle(json.loads(data.split(b"\n", 1)[0] or b"{}"))
            except Exception as exc:  # a bad request never takes the rank down
                reply = {"ok": False, "error": describe(exc)}
            try:
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError:
                pass

    def handle(self, request: Any) -> dict[str, Any]:
        op = request.get("op") if isinstance(request, dict) else None
        if op == ControlOp.LISTEN:
            port = self.on_listen()
            return {"ok": True, "port": port, "detail": self._pause_safe()}
        if op == ControlOp.PAUSE_SAFE:
            return {"ok": True, "detail": self._pause_safe()}
        if op == ControlOp.STACKS:
            return {"ok": True, "pid": os.getpid(), "threads": thread_stacks()}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def _pause_safe(self) -> str:
        try:
            detail = pause_safe(self.pg_timeout)
        except Exception as exc:
            log(f"cannot raise the process-group timeout: {describe(exc)}")
            return f"failed: {describe(exc)}"
        if detail == "no process group":
            # attached before init_process_group: raise it as soon as the group exists
            with self._lock:
                if not self._pending:
                    self._pending = True
                    quiet_thread(self._apply_when_initialised, "remote-debug-pause-safe").start()
            return "pending: no process group yet"
        return detail

    def _apply_when_initialised(self) -> None:
        while True:
            time.sleep(PENDING_POLL_SECONDS)
            try:
                if pause_safe(self.pg_timeout) != "no process group":
                    return
            except Exception as exc:
                log(f"cannot raise the process-group timeout: {describe(exc)}")
                return
