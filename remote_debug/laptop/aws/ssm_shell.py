"""Commands over an SSM shell session, non-interactively: what ``remote-debug adopt`` has of a node.

SageMaker's native remote debug offers only Session Manager's interactive shell (StartSession with the target
``sagemaker-training-job:<job>_algo-<n>`` and no DocumentName: ``SSM-SessionManagerRunShell``, session type
``Standard_Stream``). :class:`ShellSession` starts AWS's ``session-manager-plugin`` for it as
:mod:`.ssm` does for SSH (the StartSession response in ``AWS_SSM_START_SESSION_RESPONSE``, never the token in
argv), on a pseudo-terminal of ours, because in a shell session the plugin drives its stdin as a terminal
(upstream ``shellsession/shellsession_unix.go``: ``stty cbreak``, ``stty -echo``; the size of its stdout goes
to the node). Our terminal is raw, so every byte passes both ways unchanged (``\\x03`` too: the plugin
forwards it and the node's terminal turns it into SIGINT).

On the node's shell (``sh`` as root, the agent's; ``dash`` or ``bash``) :meth:`ShellSession.start` turns the
terminal's echo and output processing off (``stty -echo -opost``: no ``\\r`` added to output), prompts off
(``PS1=``, ``PS2=``), job control off (``set +m``: no job messages), bash's line editing off. Then each
:meth:`ShellSession.run` sends one line::

    printf '%s%s\\n' S1 S2; ( eval 'COMMAND' ) </dev/null; printf '%s%s %d\\n' E1 E2 "$?"

where S1S2 and E1E2 are fresh random tokens: the output is what lies between ``S1S2\\n`` and ``E1E2``,
byte for byte (stdout and stderr as the terminal got them, a missing final newline included), followed by
the exit status. The tokens are printed in two halves so that an echo of the typed line can never match.
``eval`` in a subshell: a syntax error in COMMAND is its exit status 2 rather than an aborted line (an
interactive dash drops the rest of the line), ``exit`` ends only the subshell, and ``cd`` or variables do
not carry over to the next command. Its stdin is /dev/null, so nothing it runs eats the following lines.

Each line goes through the node's terminal in canonical mode, where a line is at most 4095 bytes and control
characters are editing keys: :meth:`run` refuses commands with control characters (other than newline and
tab) or lines over :data:`MAX_LINE`; :meth:`put_file` sends data as base64 here-documents (76-column lines)
instead, in batches, then ``chmod``, an atomic ``mv`` and a ``sha256sum`` check.

A command still running at its timeout is interrupted (Ctrl-C: SIGINT to the node's foreground process
group) and the session resynchronised on a fresh token, so the session stays usable; a command that
survives that (ignores SIGINT) gets the session closed. Either way :class:`CommandTimeout` (one line) says
which. Background processes that should outlive the session must leave the terminal (``setsid``,
redirections): the agent keeps a session open while anything holds its terminal.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import shlex
import signal
import struct
import subprocess
import termios
import threading
import time
import tty
from collections.abc import Callable
from types import TracebackType
from typing import Any

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws import ssm
from remote_debug.laptop.core.errors import CommandTimeout as CommandTimeout
from remote_debug.laptop.core.errors import ShellError as ShellError

MAX_LINE = 4000  # bytes per line of a command; the node's terminal takes 4095 in canonical mode
UPLOAD_BATCH = 48 * 1024  # raw bytes per here-document (a multiple of 3: no base64 padding inside)
COLUMNS, ROWS = 1024, 64  # our terminal's size, which the plugin gives the node's: wide, so `ps` does not cut lines
STOP_TIMEOUT = 5.0  # the plugin exits on channel_closed after TerminateSession; then we signal it
RESYNC_TIMEOUT = 5.0  # per attempt: Ctrl-C, then a fresh token must come back
RESYNC_ATTEMPTS = 2
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SETUP = (
    "stty -echo -opost; set +m; PS1=''; PS2=''; unset PROMPT_COMMAND HISTFILE; export TERM=dumb PAGER=cat; "
    '[ -n "${BASH_VERSION-}" ] && set +o emacs +o vi'
)


def _token() -> tuple[str, bytes]:
    """Two halves to print separately, and what they make together on the output."""
    first, second = secrets.token_hex(8), secrets.token_hex(8)
    return f"{first} {second}", (first + second).encode()


def _short(command: str) -> str:
    line = " ".join(command.split())
    return line if len(line) <= 60 else line[:57] + "..."


class ShellSession:
    """An SSM shell session to ``target``, driven line by line; a context manager that always cleans up."""

    def __init__(
        self,
        client: Any,
        target: str,
        *,
        profile: str = "",
        plugin: ssm.Plugin | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.client, self.target, self.profile = client, target, profile
        self._plugin, self.start_timeout = plugin, start_timeout
        self.session_id: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._master: int | None = None
        self._out = bytearray()
        self._eof = False
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None
        self._lock = threading.Lock()  # one command at a time
        self._closed = False

    @classmethod
    def for_node(cls, client: Any, job: str, node: str, **options: Any) -> ShellSession:
        """SageMaker's native remote-debug target of ``node`` (``algo-N``) of ``job``."""
        return cls(client, ssm.native_target(job, node), **options)

    # --- lifecycle ------------------------------------------------------------------------------------

    def __enter__(self) -> ShellSession:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """StartSession, the plugin on our terminal, the node's shell made quiet; ShellError if any fails."""
        if self.session_id is not None or self._closed:
            raise RuntimeError("ShellSession.start() called twice or after close()")
        plugin = self._plugin or ssm.find_plugin()  # before StartSession: a missing plugin costs no session
        response = self._start_session()
        self.session_id = str(response["SessionId"])
        try:
            self._spawn(plugin, response)
            self._sync(
                _SETUP, self.start_timeout, f"no shell prompt from {self.target} within {self.start_timeout:g} s"
            )
        except BaseException:
            self.close()
            raise

    def _start_session(self) -> dict[str, Any]:
        try:
            response: dict[str, Any] = ssm.start_when_ready(  # no DocumentName: a shell
                lambda: self.client.start_session(Target=self.target), self.target
            )
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            if aws.error_code(exc) == "TargetNotConnected":
                raise ShellError(ssm.not_connected_message(self.target)) from None
            raise ShellError(aws.describe_error(exc, f"ssm StartSession {self.target}")) from None
        return response

    def _spawn(self, plugin: ssm.Plugin, response: dict[str, Any]) -> None:
        argv, env = ssm.plugin_launch(plugin.path, self.client, {"Target": self.target}, response, self.profile)
        master, slave = os.openpty()
        self._master = master
        try:
            tty.setraw(slave)  # before the plugin saves and changes it: no signals, no CR/NL mapping, no echo
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
            # A session of its own: our Ctrl-C does not reach it (close() ends it), and it has no
            # controlling terminal from which SIGINT/SIGTSTP could come.
            self.proc = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
        except OSError as exc:
            raise ssm.PluginError(f"cannot run {plugin.path} ({exc.strerror or exc}): {ssm.INSTALL_HINT}") from None
        finally:
            os.close(slave)
        self._reader = threading.Thread(target=self._read, name="ssm-shell-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._master is not None
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: the plugin (and everything holding our terminal) is gone
                data = b""
            with self._cond:
                if data:
                    self._out += data
                else:
                    self._eof = True
                self._cond.notify_all()
            if not data:
                return

    def close(self) -> None:
        """TerminateSession (the node's shell is killed), then the plugin is stopped; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.session_id is not None:
            ssm.terminate(self.client, self.session_id)
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(STOP_TIMEOUT)  # it exits by itself on channel_closed
            except subprocess.TimeoutExpired:
                for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 10.0)):
                    with contextlib.suppress(ProcessLookupError):  # our child, unreaped: still the plugin
                        os.killpg(proc.pid, sig)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(grace)
                        break
        if self._reader is not None:
            self._reader.join(5)
        if self._master is not None:
            os.close(self._master)
            self._master = None

    # --- commands -------------------------------------------------------------------------------------

    def run(self, command: str, timeout: float = 60.0) -> tuple[int, str]:
        """Run ``command`` with ``sh`` on the node: its exit status and output (stdout and stderr, UTF-8)."""
        code, output = self.run_bytes(command, timeout)
        return code, output.decode("utf-8", "replace")

    def run_bytes(self, command: str, timeout: float = 60.0) -> tuple[int, bytes]:
        """:meth:`run`, with the output as the exact bytes the command wrote."""
        _check_command(command)
        start, start_mark = _token()
        end, end_mark = _token()
        line = f"printf '%s%s\\n' {start}; ( eval {shlex.quote(command)} ) </dev/null; printf '%s%s %d\\n' {end} \"$?\""
        with self._lock:
            self._usable()
            self._write(line.encode() + b"\n")
            deadline = time.monotonic() + timeout
            try:
                begin = self._wait_for(start_mark + b"\n", deadline) + len(start_mark) + 1
                stop = self._wait_for(end_mark + b" ", deadline, begin)
                newline = self._wait_for(b"\n", deadline, stop)
            except TimeoutError:
                raise self._timed_out(command, timeout) from None
            with self._cond:
                output = bytes(self._out[begin:stop])
                status = bytes(self._out[stop + len(end_mark) + 1 : newline])
                del self._out[: newline + 1]
        if not status.isdigit():
            raise ShellError(f"unexpected answer from the shell on {self.target}: {status[:80]!r}")
        return int(status), output

    def check(self, command: str, timeout: float = 60.0) -> str:
        """:meth:`run` that raises ShellError (with the output's last line) unless the exit status is 0."""
        code, output = self.run(command, timeout)
        if code != 0:
            last = (output.strip().splitlines() or ["no output"])[-1]
            raise ShellError(f"`{_short(command)}` failed on {self.target} (exit status {code}): {last[:200]}")
        return output

    def put_file(
        self,
        remote_path: str,
        data: bytes,
        mode: int = 0o644,
        *,
        timeout: float = 300.0,
        wrap: Callable[[str], str] = lambda command: command,
    ) -> None:
        """Write ``data`` to ``remote_path`` on the node, atomically, with ``mode``; checked by SHA-256.  ``wrap``:
        how each command runs (e.g. through ``sudo -n sh -c``, where the shell's user may not write there itself;
        the data comes on the wrapped command's stdin)."""
        path = shlex.quote(remote_path)
        tmp = shlex.quote(f"{remote_path}.rd-upload-{secrets.token_hex(6)}")
        deadline = time.monotonic() + timeout
        self.check(wrap(f"umask 077 && : > {tmp}"), timeout)
        try:
            for offset in range(0, len(data), UPLOAD_BATCH):
                chunk = base64.encodebytes(data[offset : offset + UPLOAD_BATCH]).decode("ascii")
                eof = f"RD_EOF_{secrets.token_hex(4)}"  # base64 has no '_': cannot end the document early
                self.check(
                    f"{wrap(f'base64 -d >> {tmp}')} <<'{eof}'\n{chunk}{eof}\n", max(1.0, deadline - time.monotonic())
                )
            out = self.check(
                wrap(f"chmod {mode:o} {tmp} && mv -f {tmp} {path} && sha256sum {path}"),
                max(1.0, deadline - time.monotonic()),
            )
        except BaseException:
            with contextlib.suppress(ShellError):
                if self._usable_now():
                    self.run(wrap(f"rm -f {tmp}"), 10)
            raise
        digest = hashlib.sha256(data).hexdigest()
        if out.split()[:1] != [digest]:
            raise ShellError(
                f"{remote_path} on {self.target} does not have the uploaded content "
                f"(sha256 {out.split()[:1] or ['?']} != {digest})"
            )

    def read_file(self, remote_path: str, timeout: float = 60.0) -> bytes:
        """The bytes of ``remote_path`` on the node (through base64, so binary files are safe)."""
        encoded = self.check(f"base64 {shlex.quote(remote_path)}", timeout)
        return base64.b64decode(encoded)

    # --- the terminal ---------------------------------------------------------------------------------

    def _usable_now(self) -> bool:
        return not self._closed and not self._eof and self._master is not None

    def _usable(self) -> None:
        if not self._usable_now():
            raise ShellError(f"the shell session to {self.target} is closed{self._plugin_said()}")

    def _plugin_said(self) -> str:
        """The plugin's last words (e.g. "SessionId: ... : <reason>"), as ``: ...`` or ""."""
        with self._cond:
            text = bytes(self._out[-2000:]).decode("utf-8", "replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return f": {lines[-1][:300]}" if lines else ""

    def _write(self, data: bytes) -> None:
        assert self._master is not None
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._master, view) :]
        except OSError as exc:
            raise ShellError(f"the shell session to {self.target} is gone ({exc.strerror or exc})") from None

    def _wait_for(self, needle: bytes, deadline: float, start: int = 0) -> int:
        """Where ``needle`` is in the output from ``start`` on; TimeoutError at ``deadline``."""
        with self._cond:
            while True:
                found = self._out.find(needle, start)
                if found >= 0:
                    return found
                if self._eof:
                    raise ShellError(f"the shell session to {self.target} ended{self._plugin_said()}")
                start = max(start, len(self._out) - len(needle) + 1)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                self._cond.wait(remaining)

    def _sync(self, command: str, timeout: float, message: str) -> None:
        """Run ``command`` and wait until a fresh token comes back; drop the output before it."""
        halves, mark = _token()
        self._write(f"{command}; printf '%s%s\\n' {halves}\n".encode())
        try:
            found = self._wait_for(mark + b"\n", time.monotonic() + timeout)
        except TimeoutError:
            raise ShellError(message + self._plugin_said()) from None
        with self._cond:
            del self._out[: found + len(mark) + 1]

    def _timed_out(self, command: str, timeout: float) -> CommandTimeout:
        what = f"`{_short(command)}` on {self.target} did not finish within {timeout:g} s"
        for _ in range(RESYNC_ATTEMPTS):
            try:
                self._write(b"\x03")  # Ctrl-C: the node's terminal sends SIGINT, the line is abandoned
                time.sleep(0.2)  # apart from the next line: SIGINT flushes the terminal's pending input
                self._sync(":", RESYNC_TIMEOUT, "")
                return CommandTimeout(
                    f"{what}: interrupted it (Ctrl-C); the session is still usable", session_usable=True
                )
            except ShellError:
                if not self._usable_now():
                    break
        self.close()
        return CommandTimeout(f"{what} and did not stop on Ctrl-C: closed the session", session_usable=False)


def _check_command(command: str) -> None:
    if not command.strip():
        raise ValueError("an empty command")
    if _CONTROL.search(command):
        raise ValueError(
            "a command with control characters cannot be typed into a terminal: upload it with "
            "put_file and run the file"
        )
    if any(len(line.encode()) > MAX_LINE for line in shlex.quote(command).split("\n")):
        raise ValueError(
            f"a command line over {MAX_LINE} bytes cannot be typed into a terminal: upload it with "
            "put_file and run the file"
        )
