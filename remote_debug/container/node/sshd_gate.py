"""A uid gate in front of a local job's sshd: only the job's own user reaches sshd at all.

A local job's sshd listens on loopback, which every user of the machine reaches.  sshd bounds what
an unauthenticated connection may hold (``LoginGraceTime``, ``MaxStartups``: see ``sshd.render_config``),
but another user who keeps reopening connections can still fill its pre-auth slots and delay our
logins, and sshd can neither listen on a Unix socket nor ask who is behind a TCP connection.

So for jobs on this machine the hook does not run sshd as a daemon.  This process holds the listening
socket (bound by ``sshd.start_sshd``, so a taken port fails the start at once), asks the kernel who owns
each accepted connection's client socket (``peer_uid``, as the ranks' control listeners do: our own
euid only), closes a stranger's connection unread - before sshd says a word - and hands each admitted
one to ``sshd -i`` (inetd mode: one sshd per connection, the socket as its stdin and stdout) with the
job's rendered config.  At most :data:`MAX_SESSIONS` run at once; more are refused.

Its life cycle is the daemon's: it writes the pid file once it accepts (that is the readiness signal),
SIGTERM ends it and every ``sshd -i`` it started, SIGHUP changes nothing (each ``sshd -i`` reads its
config and host key afresh, which is what a reload is for), and it dies with the hook (parent-death
signal, set by ``sshd._child_setup``), its sshds with it.

Run as ``python -m remote_debug.container.node.sshd_gate FD MAX UID PID_FILE -- SSHD_ARGV...``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from remote_debug.container.node.sshd import set_parent_death_signal
from remote_debug.oskit import peer_uid

MAX_SESSIONS = 64  # concurrent ssh connections of the developer (editors open a handful)
STOP_WAIT_S = 2.0
REAP_EVERY_S = 1.0  # accept() wakes up this often to reap ended sshds


def _say(message: str) -> None:
    # stderr is sshd's log (sshd.log in the state dir, or the hook's chosen sink)
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"remote-debug sshd gate: {message}\n")
        sys.stderr.flush()


def _session_setup() -> None:
    """In each ``sshd -i`` before exec: it ends when the gate does, even if the gate is SIGKILLed."""
    set_parent_death_signal(signal.SIGTERM)


class Gate:
    def __init__(self, listener: socket.socket, sshd_argv: list[str], max_sessions: int, uid: int) -> None:
        self.listener = listener
        self.sshd_argv = sshd_argv
        self.max_sessions = max_sessions
        self.uid = uid
        self.sessions: dict[int, subprocess.Popen[bytes]] = {}

    def reap(self) -> None:
        for pid, proc in list(self.sessions.items()):
            if proc.poll() is not None:
                del self.sessions[pid]

    def serve(self) -> None:
        self.listener.settimeout(REAP_EVERY_S)
        while True:
            self.reap()
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, InterruptedError):
                continue
            except OSError as exc:
                if self.listener.fileno() == -1:
                    return  # closed: the gate is stopping
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED):
                    _say(f"cannot accept: {exc.strerror or exc}")
                    time.sleep(0.05)  # the backlog keeps them
                    continue
                raise
            with conn:  # our copy is closed either way: an admitted one lives on in its sshd
                self.admit(conn)

    def admit(self, conn: socket.socket) -> None:
        verdict = peer_uid.peer_verdict(conn, uid=self.uid)
        if not verdict.allowed:
            _say(f"refused: {verdict.reason}")  # closed unread: a stranger never reaches sshd
            return
        self.reap()
        if len(self.sessions) >= self.max_sessions:
            _say(f"refused: {self.max_sessions} ssh connections are open already")
            return
        conn.setblocking(True)  # accepted sockets inherit the listener's timeout: sshd wants a plain one
        try:
            proc = subprocess.Popen(
                self.sshd_argv,
                stdin=conn.fileno(),
                stdout=conn.fileno(),
                close_fds=True,
                preexec_fn=_session_setup,  # the gate has no threads
            )
        except OSError as exc:
            _say(f"cannot run {self.sshd_argv[0]}: {exc.strerror or exc}")
            return
        self.sessions[proc.pid] = proc

    def stop(self) -> None:
        """End every ``sshd -i`` (as stopping the daemon ends its connection processes)."""
        for proc in self.sessions.values():
            with contextlib.suppress(OSError):
                proc.terminate()
        deadline = time.monotonic() + STOP_WAIT_S
        for proc in self.sessions.values():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.sessions.clear()


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """SIGHUP (a reload): each ``sshd -i`` reads config and host key itself.  A handler, not SIG_IGN,
    which the sshds (and their sessions) would inherit."""


def main(argv: list[str]) -> int:
    if len(argv) < 6 or argv[4] != "--":
        _say("usage: sshd_gate FD MAX UID PID_FILE -- SSHD_ARGV...")
        return 2
    fd, max_sessions, uid, pid_file, sshd_argv = int(argv[0]), int(argv[1]), int(argv[2]), Path(argv[3]), argv[5:]
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _ignore)
    listener = socket.socket(fileno=fd)
    gate = Gate(listener, sshd_argv, max_sessions, uid)
    try:
        partial = pid_file.with_name(pid_file.name + ".partial")
        partial.write_text(f"{os.getpid()}\n")
        os.replace(partial, pid_file)  # whole or absent: the hook reads it as the readiness signal
        gate.serve()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
        listener.close()
        gate.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
