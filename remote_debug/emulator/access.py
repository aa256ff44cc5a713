"""Who may reach the emulator, and who may read its state: its user (and root), nobody else on the machine.

The emulator runs as root (its nodes are namespaces) and its API runs commands in them, so besides the
signatures (:mod:`.sigv4`) its listeners admit a connection only from the invoking user's uid or root, with
the project's own peer-uid gate (:mod:`remote_debug.oskit.peer_uid`); and its state dir, which holds every job's
request (Environment included: the job secret) and the emulator's keys, is 0700 and the files with secrets
in it 0600.  A state dir that is a symlink or belongs to someone else is refused, never taken over.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from pathlib import Path
from typing import Any

from werkzeug.serving import ThreadedWSGIServer

from remote_debug.oskit import peer_uid

log = logging.getLogger(__name__)


class StateDirError(Exception):
    """A state dir the emulator will not use; the message is one line for the user."""


def admitted_uids() -> frozenset[int]:
    """Our euid, root, and the user who ran us through sudo (``SUDO_UID``): the emulator's user."""
    uids = {os.geteuid(), 0}
    sudo_uid = os.environ.get("SUDO_UID", "")
    if sudo_uid.isdigit():
        uids.add(int(sudo_uid))
    return frozenset(uids)


def admits(conn: Any, uids: frozenset[int]) -> bool:
    """Whether the peer of the accepted connection ``conn`` is one of ``uids``; logs a refusal.  Where the
    system cannot tell (not Linux), the signatures alone guard the API."""
    if not peer_uid.supported():
        return True
    verdict = peer_uid.peer_verdict(conn)
    if verdict.allowed or verdict.uid in uids:
        return True
    log.warning("emulator: refused a connection: %s", verdict.reason or f"uid {verdict.uid}")
    return False


class GatedWSGIServer(ThreadedWSGIServer):
    """werkzeug's threaded server, closing a connection from another user before reading a byte of it."""

    uids: frozenset[int] = frozenset()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        return isinstance(request, socket.socket) and admits(request, self.uids)


def secure_dir(path: Path) -> None:
    """Make ``path`` (mode 0700) or check that it is ours and no symlink, then make it 0700; else StateDirError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StateDirError(f"cannot make the emulator's state dir {path}: {exc.strerror or exc}") from None
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise StateDirError(f"the emulator's state dir {path} is a symlink: give a real directory with --state")
    if not stat.S_ISDIR(info.st_mode):
        raise StateDirError(f"the emulator's state dir {path} is not a directory: give another --state")
    if info.st_uid != os.geteuid():
        raise StateDirError(
            f"the emulator's state dir {path} belongs to uid {info.st_uid}, not {os.geteuid()}: "
            "give a directory of your own with --state"
        )
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:  # through the fd just checked: a path swapped meanwhile is not what gets chmodded
        if os.fstat(fd).st_ino != info.st_ino:
            raise StateDirError(f"the emulator's state dir {path} changed while being checked: try again")
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def write_private(path: Path, text: str) -> None:
    """``text`` to ``path`` (0600, replacing it whole: a reader sees the old file or the new one)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older temporary of the same name keeps its mode through O_CREAT
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            fd = -1
            out.write(text)
    finally:
        if fd >= 0:
            os.close(fd)
    os.replace(temporary, path)
