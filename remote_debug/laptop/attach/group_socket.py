"""How ``remote-debug ranks ACTION JOB`` (and the VS Code extension through it) reaches the rank group of a
running attach.

Each attach listens on a Unix socket in the state dir's ``attach/`` folder (ours, 0700, checked like the rest of
the state dir): ``<hash of the job>.<pid>.sock``.  A Unix socket rather than a port named in a file: nothing
else on the machine can reach it, and a dead attach's socket cannot answer, so a leftover is never trusted (it
is removed by the next command that finds it refusing).  The peer's uid is checked on every connection anyway
(``SO_PEERCRED``): the folder's mode is one guard, not the only one.  Several attaches of one job (an IDE's and
a headless one) each have their socket; a command acts in all of them.

The socket's path goes through ``/proc/self/fd/<dir fd>``: a Unix socket path is limited to 107 bytes, and a
state dir (``REMOTE_DEBUG_HOME``) may be deep.

One request a connection: a JSON line ``{"action": "continue"}`` (or ``"status"``), answered by one JSON line
``{"ranks": [...], "status": [...]}``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from remote_debug.laptop.attach.rank_group import RankGroup
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.wire.documents import GroupAction, GroupReply, RankInGroup, RankPhase

STATUS = "status"
REQUEST_SECONDS = 5.0
MAX_LINE = 1 << 16


def _prefix(job: str) -> str:
    return hashlib.sha256(job.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _short_dir(folder: Path) -> Iterator[str]:
    """``folder`` as a path short enough for a Unix socket (its open descriptor's /proc name)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _peer_is_us(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


class GroupServer:
    """The attach's end: answers each command with what the group did."""

    def __init__(self, group: RankGroup, paths: StatePaths, job: str) -> None:
        self.group = group
        self.folder = paths.root / "attach"
        self.name = f"{_prefix(job)}.{os.getpid()}.sock"
        self._server: socket.socket | None = None
        self._closed = False

    def start(self) -> None:
        """Listen (once; later calls do nothing)."""
        if self._server is not None or self._closed:
            return
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with _short_dir(self.folder) as short:
            path = f"{short}/{self.name}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # a previous attach of this pid's (pids are reused): it cannot be alive
            old = os.umask(0o077)
            try:
                server.bind(path)
            finally:
                os.umask(old)
        server.listen(8)
        self._server = server
        threading.Thread(target=self._serve, name="rank-group-socket", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        server, self._server = self._server, None
        if server is None:
            return
        with contextlib.suppress(OSError):
            server.close()
        with contextlib.suppress(OSError):
            (self.folder / self.name).unlink()

    def _serve(self) -> None:
        while self._server is not None:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError, ValueError):
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(REQUEST_SECONDS)
        if not _peer_is_us(conn):
            return
        with conn.makefile("rb") as reader:
            line = reader.readline(MAX_LINE)
        request = json.loads(line)
        action = str(request.get("action", "")) if isinstance(request, dict) else ""
        ranks = [] if action == STATUS else self.group.act(GroupAction(action))
        status = [
            {"rank": s.rank, "phase": s.phase.value, "reason": s.reason, "by_group": s.by_group}
            for s in self.group.status()
        ]
        conn.sendall(json.dumps({"ranks": ranks, "status": status}).encode() + b"\n")


def ask(paths: StatePaths, job: str, action: str) -> GroupReply:
    """Do ``action`` (a GroupAction, or "status") in every running attach of ``job``."""
    folder = paths.root / "attach"
    names = sorted(p.name for p in folder.glob(f"{_prefix(job)}.*.sock")) if folder.is_dir() else []
    answers: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        short = stack.enter_context(_short_dir(folder)) if names else ""
        for name in names:
            answer = _ask_one(f"{short}/{name}", action)
            if answer is not None:
                answers.append(answer)
    if not answers:
        raise UserError(
            f"no attach to job {job} is running: start one (remote-debug attach {job}, or Attach in VS Code), "
            f"then run this again"
        )
    reached = sorted({int(r) for a in answers for r in a.get("ranks", [])})
    status = [
        RankInGroup(
            rank=int(s["rank"]), phase=RankPhase(s["phase"]), reason=str(s["reason"]), by_group=bool(s["by_group"])
        )
        for a in answers
        for s in a.get("status", [])
    ]
    return GroupReply(
        job=job, action=action, attaches=len(answers), ranks=reached, status=sorted(status, key=lambda s: s.rank)
    )


def _ask_one(path: str, action: str) -> dict[str, Any] | None:
    """One attach's answer; None when nobody listens there (a dead attach's socket, removed now)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(REQUEST_SECONDS)
    try:
        try:
            conn.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            with contextlib.suppress(OSError):
                os.unlink(path)  # nobody answers there: a killed attach's leftover
            return None
        if not _peer_is_us(conn):
            return None  # not ours (the folder is ours: only if someone else's process holds it open)
        conn.sendall(json.dumps({"action": action}).encode() + b"\n")
        with conn.makefile("rb") as reader:
            line = reader.readline(MAX_LINE)
        answer = json.loads(line) if line else None
        return answer if isinstance(answer, dict) else None
    except (OSError, ValueError):
        return None
    finally:
        conn.close()
