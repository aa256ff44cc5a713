"""An exclusive ``flock(2)`` held across a read-modify-write of a file other processes edit too.

Two ``attach`` runs for different jobs edit the same launch.json (and ~/.ssh/config): an atomic
rename keeps each write whole, but without a lock both read the same old text and the second
rename drops the first one's entries.  We lock the file's *directory* (an open directory fd can be
flocked like a file) so the lock leaves nothing behind in the user's folder; a lock file would be
one more file of ours in their workspace, left over by every Ctrl-C.

The lock is advisory and released by the kernel when the fd closes, also when the process dies:
a killed attach never leaves a stale lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from remote_debug.local.errors import UserError

DEFAULT_TIMEOUT_S = 30.0
_POLL_S = 0.01


class LockTimeout(UserError):
    """Another process held the lock for the whole timeout (one line: what and how to go on)."""


@contextlib.contextmanager
def locked(path: Path, *, what: str, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (a directory or an existing file) for the block."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise UserError(f"cannot lock {path} to edit {what}: {exc.strerror}") from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(
                        f"another remote-debug has been editing {what} for {timeout:g} s (lock on {path}): "
                        "try again when it finishes"
                    ) from None
                time.sleep(_POLL_S)
        yield
    finally:
        try:
            os.close(fd)  # releases the lock
        except BaseException:
            # a Ctrl-C that lands on the close must not leave the lock held by a process that
            # catches it and goes on: close again (EBADF if the first close did happen), then re-raise
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
