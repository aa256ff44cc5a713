"""SSM interactive shell sessions (``SSM-SessionManagerRunShell``): a shell on a pseudo-terminal inside a node.

StartSession without a DocumentName (or with ``SSM-SessionManagerRunShell``) to a running job's node opens a
``Standard_Stream`` session, which SageMaker's native remote debug gives and AWS's plugin drives as a
terminal. What we play is the SSM agent's shell plugin (amazon-ssm-agent ``agent/session/shell/shell.go``
and ``shell_unix.go``):

* once the handshake completes, ``sh`` (``exec.Command("sh")``: not a login shell) starts on a pty
  (``pty.Start``: a new session with the pty as its controlling terminal) as root, with the agent's
  environment plus ``TERM=xterm-256color`` and ``LANG=C.UTF-8``; here it runs inside the node's network,
  mount and UTS namespaces (:meth:`.nodes.Cluster.spawn`), so ``hostname`` says ``algo-N``;
* what the pty prints goes out as output_stream_data (PayloadType Output); the plugin's input_stream_data
  of PayloadType Output (keystrokes, and ``\\x03`` etc. for the signals it catches: upstream
  ``sessionutil/control_signals_unix.go``) is written to the pty, PayloadType Size (``{"cols", "rows"}``,
  sent by ``shellsession.go`` at start and on every change) sets the pty's window size;
* the session ends when reading the pty fails, i.e. when no process holds the terminal any more (the agent's
  write pump; a background job that keeps the terminal open keeps the session too): the output is drained,
  then channel_closed, upon which the plugin restores its terminal and exits (``shellsession_unix.go`` Stop);
* TerminateSession SIGKILLs the shell (the agent's ``execCmd.Kill()``) and closes the pty; the kernel then
  hangs up the terminal's foreground process group, while daemons that left the terminal live on - as on AWS.

Input before the shell is up is queued on the pty; a slow shell holds the plugin back through the WebSocket
(:meth:`ShellRelay.backpressure`), like a pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from typing import Any

from remote_debug.emulator import ssm_messages as m
from remote_debug.emulator.errors import ApiError
from remote_debug.emulator.node_model import SSM_USER_UID
from remote_debug.emulator.nodes import SETUP_ENV
from remote_debug.emulator.ssm_channel import (
    READ_CHUNK,
    RELAY_HIGH_WATER,
    SHELL_DOCUMENT,
    DataChannelServer,
    Session,
    _Channel,
    _Relay,
)
from remote_debug.emulator.training import TARGET_PREFIX, TrainingJobs

log = logging.getLogger(__name__)

SHELL_ARGV = ("sh",)  # the agent's, looked up on PATH
SHELL_ENV = {**SETUP_ENV, "HOME": "/root", "TERM": "xterm-256color", "LANG": "C.UTF-8"}
# What the agent sends as the handshake's SessionType properties for Standard_Stream: its ShellProperties,
# empty for the default shell document. The plugin only stores them (datachannel/streaming.go).
SHELL_PROPERTIES: dict[str, Any] = {
    platform: {"commands": "", "runAsElevated": True, "separateOutputStream": False}
    for platform in ("windows", "linux", "macos")
}
DEFAULT_SIZE = (80, 24)  # cols, rows until the plugin's first Size message
REAP_TIMEOUT = 5.0

# Run by the node's Python (``python -I -S -c``) between nsenter and the shell: stdin becomes the pty
# (Cluster.spawn gives /dev/null) and the pty the controlling terminal of the new session spawn made, as
# creack/pty does for the agent (Setsid + Setctty); then exec, so the shell keeps the spawned pid.
_CTTY = (
    "import fcntl, os, sys, termios; os.dup2(1, 0); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)

Spawn = Callable[[int], "subprocess.Popen[bytes]"]  # pty slave fd -> the shell's process (started, in the node)


def open_shell(
    channel: DataChannelServer, jobs: TrainingJobs, target: str, parameters: dict[str, Any], owner: str
) -> Session:
    """StartSession for the shell document; ApiErrors as the API answers them."""
    if parameters:
        unknown = ", ".join(sorted(parameters))
        raise ApiError("ValidationException", f"Parameters {unknown} are not defined by document {SHELL_DOCUMENT}.")
    spawn = node_spawner(jobs, target)
    try:
        return channel.open_shell_session(
            target=target, properties=SHELL_PROPERTIES, owner=owner, make_relay=lambda ch: ShellRelay(ch, spawn)
        )
    except ValueError as exc:
        raise ApiError("ValidationException", str(exc)) from None


def node_spawner(jobs: TrainingJobs, target: str) -> Spawn:
    """How to start a shell in ``target``'s node; TargetNotConnected unless the job's remote debug could reach it."""
    jobs.connector(target)  # the one rule for what is connectable: running, in Training, remote debug on
    name, _, node = target[len(TARGET_PREFIX) :].rpartition("_")
    # TrainingJobs has no public accessor for a job's Cluster (connector only dials ports): read it here,
    # under its lock, like connector does.
    with jobs._lock:
        job = jobs._jobs.get(name)
        cluster = job.cluster if job is not None else None
    if cluster is None:
        raise ApiError("TargetNotConnected", f"{target} is not connected.")

    user = cluster.image.shell_user
    # the agent's shell as root, or as ssm-user: the terminal is made ours as root, then setpriv drops to the user
    # (exec keeps the controlling terminal), as the agent starts its shell for a non-root user
    drop = (
        []
        if user == "root"
        else ["setpriv", f"--reuid={SSM_USER_UID}", f"--regid={SSM_USER_UID}", "--init-groups", "--"]
    )
    env = SHELL_ENV if user == "root" else {**SHELL_ENV, "HOME": "/tmp", "USER": user, "LOGNAME": user}

    def spawn(slave: int) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-I", "-S", "-c", _CTTY, *drop, *SHELL_ARGV]
        return cluster.spawn(node, argv, env=env, cwd="/", stdout=slave, stderr=slave)

    return spawn


class ShellRelay(_Relay):
    """The session's stream <-> a shell's pty. Lives on the data channel's loop thread."""

    def __init__(self, channel: _Channel, spawn: Spawn) -> None:
        super().__init__(channel, 0)
        self.master, slave = os.openpty()
        os.set_blocking(self.master, False)
        self._set_size(*DEFAULT_SIZE)
        self.proc: subprocess.Popen[bytes] | None = None
        self.closed = False
        self.pending = bytearray()  # input the pty has not taken yet
        self.drained = asyncio.Event()
        self.drained.set()
        loop = asyncio.get_running_loop()
        self.started = loop.run_in_executor(None, self._start, spawn, slave)  # fork+exec off the loop
        self.pump = loop.create_task(self._pump())

    def _start(self, spawn: Spawn, slave: int) -> subprocess.Popen[bytes]:
        try:
            return spawn(slave)
        finally:
            os.close(slave)  # the shell has its copies: the pty hangs up when the last of them closes

    async def _pump(self) -> None:
        try:
            self.proc = await self.started
        except Exception as exc:  # ClusterError (the node is gone) or OSError
            # The agent's words when the pty cannot start (shell.go execute()); the plugin prints them.
            self.channel.fail(f"Unable to start command: {exc}")
            return
        if self.closed:  # TerminateSession while the shell was starting
            return
        log.info("session %s: shell pid %d", self.channel.session.session_id, self.proc.pid)
        while not self.closed:
            await self.channel.wait_window()
            data = await self._read()
            if not data:
                break
            self.channel.send_stream(m.PayloadType.OUTPUT, data)
        if not self.closed:
            self.channel.server.spawn(self.channel.end("", graceful=True))

    async def _read(self) -> bytes:
        loop = asyncio.get_running_loop()
        while True:
            try:
                return os.read(self.master, READ_CHUNK)
            except BlockingIOError:
                pass
            except OSError:  # EIO: no process holds the terminal any more (EBADF: closed under us)
                return b""
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(self.master, _wake, ready)
            try:
                await ready
            finally:
                loop.remove_reader(self.master)

    # --- the plugin's side -------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if self.closed:
            return
        self.pending += data
        self._flush()

    def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self.pending:
                del self.pending[: os.write(self.master, self.pending)]
        except BlockingIOError:  # the line discipline is full: the shell is busy
            loop.add_writer(self.master, self._writable)
            if len(self.pending) > RELAY_HIGH_WATER:
                self.drained.clear()
            return
        except OSError:  # the terminal hung up: what is left has no reader
            self.pending.clear()
        self.drained.set()

    def _writable(self) -> None:
        asyncio.get_running_loop().remove_writer(self.master)
        if not self.closed:
            self._flush()

    async def backpressure(self) -> None:
        await self.drained.wait()

    def resize(self, payload: bytes) -> None:
        try:
            size = json.loads(payload)
            cols, rows = int(size["cols"]), int(size["rows"])
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("session %s: invalid size message: %s", self.channel.session.session_id, exc)
            return
        if not self.closed:
            self._set_size(cols, rows)

    def _set_size(self, cols: int, rows: int) -> None:
        # The agent's pty.Setsize: uint16 fields; the kernel signals SIGWINCH to the foreground group.
        with contextlib.suppress(OSError):
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows & 0xFFFF, cols & 0xFFFF, 0, 0))

    # --- the end -------------------------------------------------------------------------------------

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.drained.set()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(Exception):
            await self.started  # a shell being spawned is killed too, once it is there
        if self.pump is not asyncio.current_task():
            self.pump.cancel()
            await asyncio.gather(self.pump, return_exceptions=True)
        proc = self.proc
        if proc is not None and proc.poll() is None:  # unreaped, so the pid is still this shell's
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        loop.remove_writer(self.master)
        os.close(self.master)  # hangs up the terminal
        if proc is not None:
            await loop.run_in_executor(None, _reap, proc)


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(REAP_TIMEOUT)
    except subprocess.TimeoutExpired:
        log.warning("shell pid %d did not exit after SIGKILL", proc.pid)
