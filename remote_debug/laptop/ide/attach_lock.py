"""One IDE attach per job: the attach that owns a job's IDE configuration holds its lock.

An IDE attach writes the job's launch configurations (VS Code's launch.json entries, PyCharm's run
configuration) with the ports of *its* forwards.  A second one for the same job would rewrite them
with its own ports, and when it exited they would point at closed ports while the first still ran.
So the second one refuses, in one line naming the first (its PID, since when, its workspace).
Headless attaches and the VS Code extension's (``--no-launch-json``) write no configuration: they
take no lock and run alongside, each with its own forwards.

The lock is an ``flock`` on ``<state>/attach/<job>.lock``, held for the life of the attach: the
kernel drops it when the process ends, so a crashed or killed attach never blocks the next one.  The
holder writes who it is into the file, and removes the file when it is done (an attach that failed
leaves nothing behind).  Removing a lock file races with a newcomer who opened it just before: that
one would lock the removed file while a third locks a fresh one.  So a newcomer that got the lock
checks that the file it locked is still the one at the path, and starts over if not.

An attach that was killed (SIGKILL, a crash) cannot clean up: its lock file stays, still naming it,
while the kernel has dropped its flock.  That is how the next attach, or ``prune``, knows its owner is
dead (no pid that could be reused is trusted): :attr:`AttachLock.previous` for the job being attached,
:func:`reclaim_dead` for every job; the caller gives back what the dead holder left (its launch.json
entries point at ports nobody of ours holds any more, which any local user could bind).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from remote_debug.contract import spec
from remote_debug.laptop.core.errors import AttachRefusedError as AttachRefusedError
from remote_debug.laptop.core.errors import LocalStateError
from remote_debug.laptop.core.paths import StatePaths, private_dir
from remote_debug.laptop.ide.editor import Editor

log = logging.getLogger(__name__)

# a holder that just took the lock may not have written who it is yet: read again for this long
_READ_RETRY_S = 0.5
# starting over because a releasing holder removed the file (or its folder) under us: rare, bounded
_ATTEMPTS = 20


@dataclass(frozen=True)
class Holder:
    """Who holds a job's attach lock, as the holder wrote it."""

    pid: int
    since: float  # time.time() when it took the lock
    ide: str
    workspace: str

    def to_json(self) -> bytes:
        return json.dumps({"pid": self.pid, "since": self.since, "ide": self.ide, "workspace": self.workspace}).encode()

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        try:
            d = json.loads(data)
            return cls(int(d["pid"]), float(d["since"]), str(d["ide"]), str(d["workspace"]))
        except (ValueError, KeyError, TypeError):
            return None


def _when(since: float) -> str:
    now = time.localtime()
    then = time.localtime(since)
    same_day = (now.tm_year, now.tm_yday) == (then.tm_year, then.tm_yday)
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", then)


def refusal(job: str, holder: Holder | None) -> str:
    """The one line a second IDE attach prints."""
    if holder is None:
        who = "another remote-debug attach"
        what = "its launch configurations"
    else:
        ide = "PyCharm" if holder.ide == Editor.PYCHARM else "VS Code"
        who = (
            f"remote-debug attach for {ide} (pid {holder.pid}, since {_when(holder.since)}, "
            f"workspace {holder.workspace})"
        )
        what = "its run configuration" if holder.ide == Editor.PYCHARM else "its launch.json entries"
    return (
        f"job {job} is already attached by {who}: debug through {what}, or stop it (Ctrl-C) and attach "
        "again; --headless and --no-launch-json attaches run alongside it"
    )


class AttachLock:
    """A held lock (``release`` it, or let the process end)."""

    def __init__(self, path: Path, fd: int | None, previous: Holder | None = None) -> None:
        self.path, self._fd = path, fd
        # a holder that ended without releasing (killed): what it wrote may still point at its ports
        self.previous = previous

    @classmethod
    def acquire(cls, paths: StatePaths, job: str, *, ide: Editor, workspace: Path) -> AttachLock:
        """The job's lock, or AttachRefusedError naming its holder.  Where this file system cannot
        flock, attach goes on unlocked (as ``dir_lock`` does)."""
        spec.check_job_name(job)  # the name becomes a file name
        path = paths.attach_lock(job)
        for _ in range(_ATTEMPTS):
            private_dir(path.parent)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except FileNotFoundError:  # a releasing holder removed the folder just now
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise AttachRefusedError(refusal(job, holder)) from None
            except OSError as exc:
                log.warning(
                    "cannot lock %s (%s): a second IDE attach to job %s will not be refused",
                    path,
                    exc.strerror or exc,
                    job,
                )
                os.close(fd)
                return cls(path, None)
            try:
                if not _still_at(fd, path):  # its holder removed it between our open and flock
                    os.close(fd)
                    continue
                previous = _words(fd)  # a killed holder's: it never released, so the file is still there
                me = Holder(os.getpid(), time.time(), str(ide), str(workspace))
                os.ftruncate(fd, 0)  # a crashed holder's words
                os.pwrite(fd, me.to_json(), 0)  # one small write: a reader sees all of it or nothing
            except BaseException:
                os.close(fd)  # closing drops the lock too
                raise
            return cls(path, fd, previous)
        raise LocalStateError(f"cannot lock {path}: it keeps being removed; try again")

    def release(self, *, keep: bool = False) -> None:
        """Remove the file while still holding it (see the module doc), then drop the lock.  ``keep``:
        leave the file naming us, as a killed holder would (what we wrote could not be given back: the
        next attach or ``prune`` does it, see :func:`reclaim_dead`)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if keep:
            os.close(fd)
            return
        try:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            with contextlib.suppress(OSError):  # only when no other job's lock is in it
                os.rmdir(self.path.parent)
        finally:
            os.close(fd)


def reclaim_dead(paths: StatePaths, give_back: Callable[[str, Holder], None]) -> list[str]:
    """Every job whose IDE attach died without its clean-up: its lock file still names a holder, yet
    nobody holds its flock.  While holding that lock (no new attach of the job can start meanwhile),
    ``give_back(job, holder)`` undoes what the holder left; then the file goes.  A lock someone holds
    is a live attach (skipped); a ``give_back`` that raises leaves the file for the next try (and
    propagates nothing: the rest are still reclaimed).  Returns the jobs reclaimed."""
    folder = paths.attach_lock("x").parent
    try:
        names = sorted(os.listdir(folder))
    except OSError:  # none yet, or not ours to read
        return []
    done = []
    for name in names:
        job = name.removesuffix(".lock")
        if not name.endswith(".lock") or not spec.JOB_NAME_RE.fullmatch(job):
            continue
        path = folder / name
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:  # released meanwhile, or not a plain file
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not _still_at(fd, path):
                raise BlockingIOError  # released and re-made meanwhile: not the file we looked at
            holder = _words(fd)
        except OSError:  # held: that attach runs (or this file system cannot lock: nothing can be told)
            os.close(fd)
            continue
        try:
            if holder is not None:
                give_back(job, holder)
        except Exception as exc:  # kept: the next attach or prune tries again
            log.warning("cannot give back what the killed attach of job %s left: %s", job, exc)
            os.close(fd)
            continue
        AttachLock(path, fd).release()
        done.append(job)
    return done


def _words(fd: int) -> Holder | None:
    """What the file says now (a holder that died before writing left it empty)."""
    try:
        return Holder.parse(os.pread(fd, 4096, 0))
    except OSError:
        return None


def _still_at(fd: int, path: Path) -> bool:
    try:
        there = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _read_holder(fd: int) -> Holder | None:
    deadline = time.monotonic() + _READ_RETRY_S
    while True:
        try:
            holder = Holder.parse(os.pread(fd, 4096, 0))
        except OSError:
            holder = None
        if holder is not None or time.monotonic() > deadline:
            return holder
        time.sleep(0.02)
