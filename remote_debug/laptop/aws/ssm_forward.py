"""A ProxyCommand's byte stream over ``AWS-StartPortForwardingSession``, where ``AWS-StartSSHSession`` is refused.

AWS documents shell sessions on SageMaker's native remote-debug target, and port forwarding in its samples; it
does not document ``AWS-StartSSHSession`` there.  So when SSM refuses that document for a target (an unsupported
document, or an IAM policy written from AWS's samples that allows only the port-forwarding one), the proxy falls
back to port forwarding - the same session type on the agent's side, with the plugin multiplexing local TCP
connections instead of relaying stdin/stdout:

1. a free loopback port, StartSession with ``{"portNumber": [sshd port], "localPortNumber": [that port]}``;
2. the plugin, as for an SSH session (the response in ``AWS_SSM_START_SESSION_RESPONSE``), until it prints
   ``Port N opened`` / ``Waiting for connections...`` - a plugin that cannot bind (someone took the port
   meanwhile) exits instead, and we say so rather than connect to whoever holds it;
3. one TCP connection to it, relayed to our stdin/stdout; then the plugin and the session end.

Another local user could connect to the plugin's port while it listens; they reach the node's sshd, which takes
only the job's key, and ssh pins the node's host key, so neither side can be impersonated through it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.core.errors import PluginError, UserError
from remote_debug.oskit import osutil

DOCUMENT = "AWS-StartPortForwardingSession"
READY_TIMEOUT = 30.0  # from the plugin's start until it listens
READY_MARK = b"Waiting for connections"


def forwarding_parameters(target: str, port: int, local_port: int) -> dict[str, Any]:
    return {
        "Target": target,
        "DocumentName": DOCUMENT,
        "Parameters": {"portNumber": [str(port)], "localPortNumber": [str(local_port)]},
    }


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until_listening(proc: subprocess.Popen[bytes], timeout: float = READY_TIMEOUT) -> None:
    """Read the plugin's stdout until it listens; UserError (one line) when it exits or takes too long."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    while READY_MARK not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise UserError(f"the session-manager-plugin did not open its local port within {timeout:g} s")
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                last = " ".join(seen.decode(errors="replace").split())[-300:]
                raise UserError(f"the session-manager-plugin ended before it listened: {last or 'no output'}")
            seen += chunk


def relay(sock: socket.socket, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Copy stdin to ``sock`` (then half-close it) and ``sock`` to stdout, until the node's side ends."""

    def upstream() -> None:
        with contextlib.suppress(OSError):
            while True:
                data = os.read(stdin.fileno(), 65536)
                if not data:
                    break
                sock.sendall(data)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=upstream, daemon=True, name="forward-upstream").start()
    out = stdout.fileno()
    with contextlib.suppress(OSError):
        while True:
            data = sock.recv(65536)
            if not data:
                break
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]


class _Hangup(Exception):
    """ssh ended us (it sends its ProxyCommand SIGHUP when it exits) or we were terminated."""


class _Ending:
    """Once the clean-up has begun, a SIGHUP/SIGTERM no longer interrupts: the relay often ends first (sshd closed
    the connection) and ssh's SIGHUP as it exits then came in the middle of the clean-up and cut it short before
    TerminateSession, leaving the session open on the target (CI: 3 runs of 9)."""

    cleaning = False


@contextlib.contextmanager
def ended_by_signals() -> Iterator[_Ending]:
    """SIGHUP/SIGTERM end the relay by an exception, so that the plugin and the session are ended too (the SSH
    document's path does it with the plugin as the process that waits: ssm.forward_stop_signals); not once the
    yielded state says the clean-up runs."""
    state = _Ending()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def hang_up(_signum: int, _frame: object) -> None:
        if not state.cleaning:
            raise _Hangup

    saved = {sig: signal.signal(sig, hang_up) for sig in (signal.SIGHUP, signal.SIGTERM)}
    try:
        yield state
    except _Hangup:
        pass
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


Launch = Callable[[dict[str, Any], dict[str, Any]], tuple[list[str], dict[str, str]]]


def run_forwarding(
    target: str,
    port: int,
    stdin: BinaryIO,
    stdout: BinaryIO,
    *,
    start: Callable[[dict[str, Any]], dict[str, Any]],
    launch: Launch,
    terminate: Callable[[str], None],
) -> int:
    """The port-forwarding session relayed to stdin/stdout; ``start(params)`` is StartSession (with the caller's
    waiting and error wording), ``launch(params, response)`` the plugin's argv and environment
    (``ssm.plugin_launch``), ``terminate(session_id)`` TerminateSession.  The plugin's exit code."""
    local_port = free_loopback_port()
    params = forwarding_parameters(target, port, local_port)
    response = start(params)
    session_id = str(response["SessionId"])
    argv, env = launch(params, response)
    plugin_path = argv[0]
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        terminate(session_id)
        raise PluginError(f"cannot run {plugin_path}: {exc.strerror or exc}") from None
    # our SIGHUP/SIGTERM handler stays until the clean-up is over, which no signal interrupts
    with ended_by_signals() as ending:
        try:
            wait_until_listening(proc)
            with socket.create_connection(("127.0.0.1", local_port), timeout=10) as sock:
                sock.settimeout(None)
                relay(sock, stdin, stdout)
        finally:
            ending.cleaning = True
            osutil.end_process(proc)
            if proc.stdout is not None:
                proc.stdout.close()
            terminate(session_id)
    return 0


def refused_document(exc: BaseException, document: str) -> bool:
    """Whether SSM refused the session because of its document (unsupported on the target, or not allowed to the
    caller by a policy that names only other documents) - what the port-forwarding fallback is for."""
    if not aws.is_error(exc):
        return False
    code = aws.error_code(exc) or ""
    return code in (
        "InvalidDocument",
        "InvalidDocumentOperation",
        "ValidationException",
        "AccessDeniedException",
        "BadRequest",
    ) and document in str(exc)
