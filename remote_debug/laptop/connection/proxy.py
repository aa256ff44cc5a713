"""``remote-debug proxy HOST PORT``: the ProxyCommand of every generated ssh Host entry.

OpenSSH (and VS Code Remote-SSH through it, and our own tunnels) run this with the Host alias
``<node>.<job>``; it asks the job's backend for a byte stream to that node's sshd and relays
stdin/stdout over it.  For SageMaker the same seam starts an SSM session instead.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import sys
import time
from pathlib import Path
from typing import BinaryIO, TextIO

from remote_debug.contract.spec import NODE_NAME_RE, ContractError
from remote_debug.laptop.core.backend import Backend
from remote_debug.laptop.core.errors import EXIT_INTERRUPTED, EXIT_USER_ERROR, BadInputError, TransportError, UserError
from remote_debug.laptop.core.errors import JobEndedError as JobEndedError
from remote_debug.laptop.core.jobinfo import TERMINAL
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.platforms import backend_for


def proxy_command(paths: StatePaths) -> str:
    """The ProxyCommand line: absolute interpreter and state dir, so it works from any shell/PATH.

    Two parsers read it: ssh first expands ``%`` tokens (so a literal ``%`` is written ``%%``), then
    the user's shell runs it (so every path is shell-quoted).
    """

    def word(path: str) -> str:
        return shlex.quote(path).replace("%", "%%")

    return " ".join(
        [word(sys.executable), "-m", "remote_debug", "proxy", "--state-dir", word(str(paths.root)), "%h", "%p"]
    )


def split_alias(alias: str) -> tuple[str, str]:
    """``algo-1.my-job`` -> (``my-job``, ``algo-1``)."""
    node, sep, job = alias.partition(".")
    if not sep or not NODE_NAME_RE.fullmatch(node) or not job:
        raise BadInputError(f"bad host {alias[:80]!r}: expected <node>.<job>, e.g. algo-1.my-job")
    return job, node


# What the proxy sends OpenSSH when it refuses, after its one line on stderr: an identification line,
# then the end of the stream.  Without it ssh adds "kex_exchange_identification: Connection closed by
# remote host" (an error); with it, only "Connection closed by UNKNOWN port 65535", an INFO line that
# our Host entries' LogLevel hides (ssh_config.LOG_LEVEL): Remote-SSH's log shows our reason alone.
# Only OpenSSH gets it (known by the identification it sends first): paramiko (our own tunnels) would
# take it for a server and fail with an empty EOFError instead of "Error reading SSH protocol banner".
REFUSAL_BANNER = b"SSH-2.0-remote-debug-proxy\r\n"
OPENSSH_CLIENT = b"SSH-2.0-OpenSSH"
CLIENT_BANNER_WAIT_S = 2.0  # a client sends its identification at once; this only bounds a silent one


def _ended(backend: Backend, job: str) -> JobEndedError | None:
    info = backend.describe(job)
    if info.status not in TERMINAL:
        return None
    why = f": {' '.join(info.failure_reason.split())[:200]}" if info.failure_reason else ""
    return JobEndedError(
        f"job {job} has ended ({info.status}{why}); 'remote-debug prune' removes what remote-debug wrote for it"
    )


def relay_to(alias: str, port: int, paths: StatePaths, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """The relay; raises UserError / ContractError / OSError when the node cannot be reached."""
    job, node = split_alias(alias)
    backend = backend_for(job, paths)
    if not backend.capabilities.remote:
        # this machine's jobs: a file read says whether it is over, before we dial a port that may
        # belong to someone else by now
        ended = _ended(backend, job)
        if ended is not None:
            raise ended
    try:
        return backend.relay(job, node, port, stdin, stdout)
    except (UserError, ContractError, OSError) as exc:
        # the usual reason a node cannot be reached: its job is over.  Asked only now (for SageMaker a
        # DescribeTrainingJob), and if asking fails the relay's own error is the better answer.
        try:
            ended = _ended(backend, job)
        except Exception:
            ended = None
        if ended is not None:
            raise ended from None
        if isinstance(exc, OSError):
            raise TransportError(f"cannot reach node {node} of job {job}: {exc.strerror or exc}") from None
        raise


def run_proxy(
    alias: str, port: int, paths: StatePaths, stdin: BinaryIO, stdout: BinaryIO, stderr: TextIO | None = None
) -> int:
    """The ProxyCommand: relay, or say in one line on stderr why not (never a traceback: ssh's stderr is
    the user's terminal, or VS Code Remote-SSH's log)."""
    try:
        return relay_to(alias, port, paths, stdin, stdout)
    except (UserError, ContractError) as exc:
        err = stderr or sys.stderr
        err.write(f"remote-debug: error: {' '.join(str(exc).split())}\n")
        err.flush()
        _refuse(stdin, stdout)
        return EXIT_USER_ERROR


def _refuse(stdin: BinaryIO, stdout: BinaryIO) -> None:
    with contextlib.suppress(OSError, ValueError):
        if not os.isatty(stdout.fileno()) and _client_is_openssh(stdin):  # not a person at a terminal
            stdout.write(REFUSAL_BANNER)
            stdout.flush()


def _client_is_openssh(stdin: BinaryIO) -> bool:
    """Whether the client's identification line (the first bytes it sends) is OpenSSH's."""
    fd = stdin.fileno()
    deadline = time.monotonic() + CLIENT_BANNER_WAIT_S
    seen = b""
    while b"\n" not in seen and len(seen) < 256:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 256 - len(seen))
        if not chunk:
            break
        seen += chunk
    return seen.startswith(OPENSSH_CLIENT)


def parse_args(argv: list[str]) -> tuple[str, int, Path | None] | None:
    """(host, port, state dir) of a plain ``proxy [--state-dir DIR] HOST PORT``; None for anything else
    (``--help``, a usage error): the full CLI answers those, in the style of every other command."""
    args = list(argv)
    state_dir: Path | None = None
    if args[:1] == ["--state-dir"] and len(args) >= 2:
        state_dir, args = Path(args[1]).absolute(), args[2:]
    elif args[:1] and args[0].startswith("--state-dir="):
        state_dir, args = Path(args[0].partition("=")[2]).absolute(), args[1:]
    if len(args) != 2 or args[0].startswith("-") or not (args[1].isascii() and args[1].isdigit()):
        return None
    return args[0], int(args[1]), state_dir


def main(argv: list[str]) -> int | None:
    """``python -m remote_debug proxy [--state-dir DIR] HOST PORT`` without the CLI's imports.

    Every ssh connection (the IDE opens several) starts this process, so it skips typer, rich and
    paramiko (0.13 s instead of 0.65 s to start here); ``remote-debug proxy`` does the same work.
    Returns None when ``argv`` is not that plain form: the caller then runs the full CLI.
    """
    parsed = parse_args(argv)
    if parsed is None:
        return None
    host, port, state_dir = parsed
    paths = StatePaths(state_dir) if state_dir else StatePaths.default()
    try:
        return run_proxy(host, port, paths, sys.stdin.buffer, sys.stdout.buffer)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
