"""AWS's real ``session-manager-plugin`` against the emulator's SSM API, for the tests of the SSM transport.

- :data:`PLUGIN` / :data:`needs_plugin`: the binary built from AWS's sources (``REMOTE_DEBUG_SSM_PLUGIN``, else
  ``<repo>/../shared/tools/session-manager-plugin/``); tests skip with the reason where it is missing.
  :func:`plugin_bin` makes a directory whose ``session-manager-plugin`` is that binary, to put first on PATH.
- :class:`LocalSsm`: :class:`remote_debug.emulator.service.Emulator` in-process - its StartSession, ResumeSession
  and TerminateSession (validated against botocore's model both ways) and its data channel server, which the real
  plugin speaks to - with one change: the targets a test registers are this machine, so a session to port P of
  one relays to ``127.0.0.1:P`` (an echo server, a private sshd).  Other targets get the emulator's own
  TargetNotConnected.  It records the sessions it started, resumed and terminated.
- :data:`RELAY` / :func:`relay_argv`: what ``SageMakerBackend.relay`` does for the ssm transport
  (``ssm.run_session`` with the product's client), in a process of its own, as a ProxyCommand runs it.
- :func:`drive_in_process`: a relay of this process (``ssm.run_session``, ``SageMakerBackend.relay``) on pipes,
  driven from a thread; :func:`roundtrip_in_process`: the same, sent bytes that must come back through the
  session before its stdin closes.
- :class:`EchoServer`: a TCP echo server on 127.0.0.1, the target of a session where no sshd is needed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO
from unittest import mock

import pytest

from remote_debug.contract.spec import LOOPBACK
from remote_debug.emulator.service import Emulator
from remote_debug.emulator.sigv4 import Keys
from remote_debug.emulator.ssm_channel import Connector, DataChannelServer, Session
from tests.helpers.hook_runs import all_pids, parent_of

REPO = Path(__file__).resolve().parents[2]
PLUGIN_NAME = "session-manager-plugin"


def _find_plugin() -> Path | None:
    override = os.environ.get("REMOTE_DEBUG_SSM_PLUGIN")
    candidate = Path(override) if override else REPO.parent / "shared" / "tools" / PLUGIN_NAME / PLUGIN_NAME
    return candidate.absolute() if os.access(candidate, os.X_OK) else None


PLUGIN = _find_plugin()
needs_plugin = pytest.mark.skipif(
    PLUGIN is None,
    reason=f"AWS's {PLUGIN_NAME} is not at "
    f"{os.environ.get('REMOTE_DEBUG_SSM_PLUGIN') or REPO.parent / 'shared' / 'tools' / PLUGIN_NAME / PLUGIN_NAME} "
    "(REMOTE_DEBUG_SSM_PLUGIN names another)",
)


def real_plugin() -> Path:
    assert PLUGIN is not None, "mark the test with needs_plugin"
    return PLUGIN


@functools.cache
def plugin_version() -> str:
    """What the real binary itself prints for ``--version`` (1.2.650.0 for the shared build)."""
    out = subprocess.run([real_plugin(), "--version"], capture_output=True, text=True, timeout=20, check=True)
    return out.stdout.strip()


def plugin_bin(directory: Path) -> Path:
    """``directory`` with ``session-manager-plugin`` -> the real binary: put it first on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / PLUGIN_NAME
    if not link.exists():
        link.symlink_to(real_plugin())
    return directory


def plugin_pids(parent: int) -> list[int]:
    """The real plugin's session processes started by ``parent``: identified by their ``StartSession``
    argument, never by the absence of ``--version`` (the probe ``ssm.find_plugin`` runs first reads as an
    empty cmdline for a moment around its exec, which once, under load in CI, passed for a session)."""
    binary = os.path.realpath(real_plugin())
    found = []
    for pid in all_pids():
        with contextlib.suppress(OSError):
            if (
                parent_of(pid) == parent
                and os.readlink(f"/proc/{pid}/exe") == binary
                and proc_strings(pid, "cmdline")[3:4] == ["StartSession"]
            ):
                found.append(pid)
    return found


def proc_strings(pid: int, what: str) -> list[str]:
    """``/proc/<pid>/cmdline`` or ``environ``, split at its NULs."""
    return Path(f"/proc/{pid}/{what}").read_bytes().decode().split("\0")[:-1]


# --- the emulator's SSM API with targets on this machine ------------------------------------------------


class RecordingChannel(DataChannelServer):
    """The emulator's data channel server, recording what the API asked of it (only the API's StartSession,
    ResumeSession and TerminateSession call these)."""

    def __init__(self) -> None:
        super().__init__(LOOPBACK)
        self.started: list[Session] = []
        self.resumed: list[str] = []
        self.terminated: list[str] = []

    def open_session(
        self, *, target: str, document: str, parameters: dict[str, list[str]], connect: Connector, owner: str
    ) -> Session:
        session = super().open_session(
            target=target, document=document, parameters=parameters, connect=connect, owner=owner
        )
        self.started.append(session)
        return session

    def resume(self, session_id: str) -> Session:
        self.resumed.append(session_id)
        return super().resume(session_id)

    def terminate(self, session_id: str) -> bool:
        self.terminated.append(session_id)
        return super().terminate(session_id)

    def open_ids(self) -> list[str]:
        return [s.session_id for s in self.sessions()]


def _connect_here(port: int) -> socket.socket:
    return socket.create_connection((LOOPBACK, port), timeout=10)


class LocalSsm:
    """The emulator's SSM endpoint; sessions to ``targets`` reach ports of this machine.  It accepts requests
    signed with ``keys`` only (fresh ones by default): give them to the clients (:attr:`keys`)."""

    def __init__(self, state_dir: Path, region: str, keys: Keys | None = None) -> None:
        self.channel = RecordingChannel()
        self.emulator = Emulator(state_dir, region=region, keys=keys)
        self.keys = self.emulator.keys
        self.emulator.channel = self.channel  # not started yet: the one the emulator made is dropped unused
        self.targets: set[str] = set()
        self._patches = contextlib.ExitStack()
        self.url = ""

    def start(self) -> str:
        self.url = self.emulator.start()
        jobs = self.emulator.jobs
        assert jobs is not None
        refuse = jobs.connector  # the emulator's answer for a target that is none of its running jobs' nodes

        def connector(target: str) -> tuple[str, Connector]:
            if target in self.targets:
                return target, _connect_here
            return refuse(target)

        self._patches.enter_context(mock.patch.object(jobs, "connector", connector))
        return self.url

    def close(self) -> None:
        self._patches.close()
        self.emulator.close()

    def __enter__(self) -> LocalSsm:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


# --- the ProxyCommand's process ------------------------------------------------------------------------

# SageMakerBackend.relay for the ssm transport: the product's client (region, profile and endpoint from the
# environment, AWS_ENDPOINT_URL_SSM here), then ssm.run_session on this process's stdin/stdout.
RELAY = (
    "import sys; from remote_debug.laptop.aws import clients, ssm; "
    "sys.exit(ssm.run_session(clients.client('ssm'), sys.argv[1], int(sys.argv[2]), sys.stdin.buffer, "
    "sys.stdout.buffer, profile=clients.profile() or ''))"
)


def relay_argv(target: str, port: int | str) -> list[str]:
    return [sys.executable, "-c", RELAY, target, str(port)]


def relay_env(*, endpoint: str, region: str, bin_dir: Path, token: str, scratch: Path, keys: Keys) -> dict[str, str]:
    """The relay's environment: the emulator's keys, the emulator as the SSM endpoint, the plugin first on PATH, no
    AWS or remote-debug setting of the user's, and ``RD_TEST_TOKEN`` to find every process it started."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_DEBUG_"))}
    env.update(
        **keys.env(),
        AWS_DEFAULT_REGION=region,
        AWS_ENDPOINT_URL_SSM=endpoint,
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(scratch / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(scratch / "no-aws-credentials"),
        PYTHONPATH=str(REPO),
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        RD_TEST_TOKEN=token,
    )
    return env


# --- a target ------------------------------------------------------------------------------------------


class EchoServer:
    """A TCP echo server on 127.0.0.1; :meth:`close` stops it and every connection's thread. A
    connection that sends ``QUIT`` is closed by the server (a target that hangs up first)."""

    def __init__(self) -> None:
        self.listener = socket.create_server((LOOPBACK, 0))
        self.port: int = self.listener.getsockname()[1]
        self.accepted = 0
        self.conns: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, name="echo-accept", daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            self.conns.append(conn)
            thread = threading.Thread(target=self._echo, args=(conn,), name="echo", daemon=True)
            self.threads.append(thread)
            thread.start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            while data := conn.recv(65536):
                if data.startswith(b"QUIT"):
                    return
                conn.sendall(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close() alone does not)
        self.listener.close()
        self._accept.join(10)
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self.threads:
            thread.join(10)


@contextlib.contextmanager
def echo_server() -> Iterator[EchoServer]:
    server = EchoServer()
    try:
        yield server
    finally:
        server.close()


def read_all(fd: int, into: bytearray) -> None:
    """Read ``fd`` until EOF into ``into`` (a reader thread's body)."""
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 65536):
            into += chunk


def drive_in_process(
    run: Callable[[BinaryIO, BinaryIO], int], drive: Callable[[int, bytearray], None], join_timeout: float = 40
) -> tuple[int, bytes]:
    """``run(stdin, stdout)`` on pipes in this (the main) thread, where ``ssm.run_session`` installs its signal
    handlers, while ``drive(stdin write fd, output so far)`` runs in a thread; then stdin is closed (the user's
    side hangs up).  Returns ``run``'s exit code and everything written to stdout.  A plugin that outlives
    ``run`` is killed by its pid."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    out = bytearray()
    seen: set[int] = set()
    errors: list[BaseException] = []

    def driver() -> None:
        try:
            drive(stdin_w, out)
        except BaseException as exc:
            errors.append(exc)
        finally:
            seen.update(plugin_pids(os.getpid()))
            os.close(stdin_w)

    reader = threading.Thread(target=read_all, args=(stdout_r, out), name="relay-stdout", daemon=True)
    thread = threading.Thread(target=driver, name="relay-stdin", daemon=True)
    reader.start()
    thread.start()
    try:
        with os.fdopen(stdin_r, "rb") as stdin, os.fdopen(stdout_w, "wb") as stdout:
            code = run(stdin, stdout)
    finally:
        thread.join(join_timeout)
        for pid in seen & set(plugin_pids(os.getpid())):  # still our child (not reaped, so not reused)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reader.join(10)
        os.close(stdout_r)
    if errors:
        raise errors[0]
    return code, bytes(out)


def roundtrip_in_process(
    run: Callable[[BinaryIO, BinaryIO], int], data: bytes, timeout: float = 30
) -> tuple[int, bytes]:
    """:func:`drive_in_process` writing ``data`` and waiting until stdout ends with it (the target echoes),
    then closing stdin as ssh does when it is done with its ProxyCommand - not sooner: the real plugin exits at
    EOF on stdin without waiting for what the node still sends."""
    finished = threading.Event()

    def feed(stdin: int, out: bytearray) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(stdin, view) :]
        deadline = time.monotonic() + timeout
        while not out.endswith(data) and not finished.is_set():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(data)} bytes did not come back through the session within "
                    f"{timeout} s (have {len(out)}: {bytes(out[:200])!r})"
                )
            time.sleep(0.02)

    def run_then_finish(stdin: BinaryIO, stdout: BinaryIO) -> int:
        try:
            return run(stdin, stdout)
        finally:
            finished.set()  # run is over: the feeder stops waiting for an echo that cannot come

    return drive_in_process(run_then_finish, feed, timeout + 10)


def banner(session_id: str) -> bytes:
    """What the real plugin writes to stdout before the stream (ssh and paramiko skip lines before SSH-2.0-)."""
    return f"\nStarting session with SessionId: {session_id}\n".encode()
