"""An exclusive ``flock(2)`` on a directory, held across a read-modify-write of files in it that
other processes edit too.  The one lock helper of the laptop side: launch.json (lock on its
``.vscode`` folder) and the ssh config (lock on ``<state>/ssh``) both use it, so they behave alike.

Two ``attach`` runs for different jobs edit the same launch.json (and ~/.ssh/config): an atomic
rename keeps each write whole, but without a lock both read the same old text and the second
rename drops the first one's entries.  We lock the *directory* (an open directory fd can be
flocked like a file) so the lock leaves nothing behind in the user's folder; a lock file would be
one more file of ours in their workspace, left over by every Ctrl-C.

The lock is advisory and released by the kernel when the fd closes, also when the process dies:
a killed attach never leaves a stale lock.

Where flock does not work on a read-only directory fd (NFS: Linux maps flock to a byte-range lock,
which needs a writable fd, and fails with EBADF or ENOLCK), we go on without the lock after one
warning: each write still checks, just before its rename, that the file is unchanged since it was
read, so a concurrent edit is retried rather than lost in the usual case.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

from remote_debug.laptop.core.errors import LocalStateError
from remote_debug.laptop.core.errors import LockTimeout as LockTimeout

DEFAULT_TIMEOUT_S = 30.0
_POLL_S = 0.01

log = logging.getLogger(__name__)
_warned: set[Path] = set()  # folders we already warned about: one warning, not one per edit


def _acquire(fd: int, path: Path, what: str, timeout: float) -> bool:
    """True once we hold the lock; False when this filesystem cannot lock (warned once)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise LockTimeout(
                    f"another remote-debug has been editing {what} for {timeout:g} s (lock on {path}): "
                    "try again when it finishes"
                ) from None
            time.sleep(_POLL_S)
        except OSError as exc:
            if path not in _warned:
                _warned.add(path)
                log.warning(
                    "cannot lock %s (%s), editing %s without a lock; do not run two attaches at once here",
                    path,
                    exc.strerror or exc,
                    what,
                )
            return False


def _release(fd: int) -> None:
    """Unlock, then close ``fd`` exactly once.

    A Ctrl-C can land on either call.  Unlocking is idempotent (and a no-op on an fd that never got
    the lock) while the fd is still ours, so it is repeated; the close never is: os.close frees the
    number even when a signal interrupts it, and a second close could hit the file another thread
    (paramiko) just opened under that number.  A Ctrl-C just before the close leaks an unlocked fd.
    """
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
    except BaseException:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        raise
    os.close(fd)


@contextlib.contextmanager
def locked(path: Path, *, what: str, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive flock on the directory ``path`` for the block (see the module doc)."""
    try:
        # never through a link: a folder swapped for one would lock (and vouch for) a folder elsewhere
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise LocalStateError(f"cannot lock {path} to edit {what}: {exc.strerror} (it must be a real folder)") from None
    try:
        _acquire(fd, path, what, timeout)
        yield
    finally:
        _release(fd)
