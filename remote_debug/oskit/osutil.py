"""Standard-library helpers both sides need: atomic file writes and process liveness.

Not part of the contract (:mod:`remote_debug.contract.spec`), but the only other package module the container
side may import (``tests/test_layering.py``): the node hook writes its manifests atomically and
watches processes exactly as the laptop writes ssh config and watches local jobs.

:class:`NoFollowDir` is for files we edit inside a user's tree (``.vscode/launch.json``, PyCharm's run
configurations): a cloned repository decides what those paths are, and a symlink there would make
us read a file from elsewhere into the workspace, or write one elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType


def atomic_write_bytes(
    path: Path, data: bytes, mode: int = 0o644, *, unless_changed: Callable[[], bool] | None = None
) -> bool:
    """Write ``data`` so readers see the old file or the new one, never half of it.

    The data goes to a temp file next to ``path`` (same filesystem: the rename is atomic), is
    fsynced before the rename (after a crash the name holds old or new bytes, never an empty
    file), and the directory is fsynced after it (the rename itself survives).  On any exception,
    KeyboardInterrupt and a full disk included, the temp file is removed and ``path`` is untouched.

    ``unless_changed``: checked just before the final rename; when it returns False (someone else
    changed the file meanwhile) nothing is replaced and the result is False.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path)
    try:
        _write_temp(tmp, data, mode)
        if unless_changed is not None and not unless_changed():
            os.unlink(tmp)
            return False
        os.replace(tmp, path)
    except BaseException:
        _discard(tmp)
        raise
    _fsync_dir(path.parent)
    return True


def atomic_write_many(files: Sequence[tuple[Path, bytes, int]]) -> None:
    """Write several files, each atomically, with every byte on disk before the first rename.

    A full disk, a read-only filesystem or an interrupt while writing leaves every file as it was;
    only the renames (which need no space) run one after the other, so order ``files`` such that
    each prefix is consistent (e.g. pinned keys before the Host block that points at them).
    """
    temps = [(_temp_name(path), path) for path, _, _ in files]
    try:
        for (tmp, path), (_, data, mode) in zip(temps, files, strict=True):
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_temp(tmp, data, mode)
        for tmp, path in temps:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in temps:
            _discard(tmp)
        raise
    for directory in dict.fromkeys(path.parent for _, path in temps):
        _fsync_dir(directory)


def _temp_name(path: Path) -> Path:
    # named before it is created: an interrupt at any point still knows what to clean up
    return path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


def _write_temp(tmp: Path | str, data: bytes, mode: int, dir_fd: int | None = None) -> None:
    # private until done; O_EXCL also refuses a name that exists as a symlink
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _discard(tmp: Path | str, dir_fd: int | None = None) -> None:
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except OSError:  # never created, already renamed, or its directory is gone
        pass


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync a directory: the rename is still atomic
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    """UTF-8 (whatever the locale says) text, written atomically."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)


# --- files inside a user's tree, never through a symlink --------------------------------------------


class UnsafePathError(OSError):
    """A path we were to read or write inside a user's tree is a symbolic link, or not a plain
    file or folder; ``filename`` names it, ``strerror`` says which (callers make it one line)."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under the name must not hang the open (regular files ignore the flag)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NoFollowDir:
    """``base/parts...`` opened one component at a time with ``O_NOFOLLOW``, and files in it read and
    written relative to that open folder, never through a symlink.

    ``base`` itself is followed: it is the folder the user chose (``--workspace``), links and all.
    Each of ``parts`` must be a real folder (``create``: made when missing, with ``mode`` less the
    umask); a symlink anywhere below ``base`` raises :class:`UnsafePathError` before anything is
    read or written.  Because every later call goes through the folder's descriptor, swapping a
    folder for a link after the check changes nothing either: we keep using the folder we checked.
    Folders made here are listed in ``created`` (see :meth:`remove_created`).
    """

    def __init__(self, base: Path, parts: Sequence[str], *, create: bool = False, mode: int = 0o777) -> None:
        self.path = base.joinpath(*parts)
        self.created: list[Path] = []
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for i, part in enumerate(parts):
                if part in ("", ".", "..") or os.sep in part:
                    raise ValueError(f"{part!r} is not one folder name")
                child = self._open_child(fd, part, base.joinpath(*parts[: i + 1]), create, mode)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            self.remove_created()
            raise
        self.fd = fd

    def _open_child(self, fd: int, part: str, path: Path, create: bool, mode: int) -> int:
        for _ in range(3):  # a folder that another process makes or removes meanwhile: look again
            try:
                return os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
            except OSError as exc:
                raise _refusal(exc, fd, part, path, "folder") from None
            try:
                os.mkdir(part, mode, dir_fd=fd)
                self.created.append(path)
            except FileExistsError:
                pass
        raise FileNotFoundError(errno.ENOENT, "keeps disappearing", str(path))

    def __enter__(self) -> NoFollowDir:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def remove_created(self) -> None:
        """Remove the folders this made, deepest first, if they are still empty (best effort)."""
        for path in reversed(self.created):
            try:
                os.rmdir(path)  # rmdir never follows a link: a link put there meanwhile stays
            except OSError:
                break
        self.created = []

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry ``name`` itself (a link is not followed); None when there is none."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def check_file(self, name: str) -> os.stat_result | None:
        """:meth:`lstat`, refusing anything but a regular file."""
        st = self.lstat(name)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise _unsafe(st.st_mode, self.path / name, "file")
        return st

    def read(self, name: str) -> bytes | None:
        """The bytes of the regular file ``name``; None when it does not exist."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _refusal(exc, self.fd, name, self.path / name, "file") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _unsafe(st.st_mode, self.path / name, "file")
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def write(
        self, name: str, data: bytes, mode: int = 0o644, *, unless_changed: Callable[[], bool] | None = None
    ) -> bool:
        """:func:`atomic_write_bytes` for ``name`` in this folder; refuses to replace a symlink (or
        anything but a regular file) that is there now.  False when ``unless_changed`` said no."""
        self.check_file(name)
        tmp = _temp_name(Path(name)).name
        try:
            _write_temp(tmp, data, mode, self.fd)
            if unless_changed is not None and not unless_changed():
                os.unlink(tmp, dir_fd=self.fd)
                return False
            # rename(2) replaces the entry ``name`` itself: a link made there since the check is
            # replaced, never followed
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            _discard(tmp, self.fd)
            raise
        try:
            os.fsync(self.fd)
        except OSError:
            pass
        return True

    def unlink(self, name: str) -> None:
        os.unlink(name, dir_fd=self.fd)


def _unsafe(mode: int, path: Path, kind: str) -> UnsafePathError:
    what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file" if kind == "file" else "not a folder"
    return UnsafePathError(errno.ELOOP if stat.S_ISLNK(mode) else errno.EINVAL, f"is {what}", str(path))


def _refusal(exc: OSError, dir_fd: int, name: str, path: Path, kind: str) -> OSError:
    """What a failed ``O_NOFOLLOW`` open means: a link (ELOOP, or ENOTDIR for O_DIRECTORY on some
    systems) or something else there is UnsafePathError; any other error stays as it was."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):  # FreeBSD says EMLINK
        try:
            return _unsafe(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode, path, kind)
        except OSError:
            pass
    if exc.filename is None:
        exc.filename = str(path)
    return exc


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of Linux's ``/proc/<pid>/stat`` after the command name - state ("R", "S", "Z"...)
    first, then the parent's pid - or None when there is no such process (or no /proc).

    The command name is in parentheses and may itself hold spaces and ")": split after the last one.
    """
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields or None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not: it only waits for its parent to reap it).

    Both sides need it: the node daemon's lock holder in the job, a local job's supervisor here."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = proc_stat(pid)
    return fields is None or fields[0] != "Z"  # unreadable: kill() said it exists


class ProcessRecord:
    """A process we stored to signal later (a local job's supervisor): its pid and start time.

    A pid alone names whatever process has it now: once ours died, ``stop`` would signal a stranger's
    process that reused the number.  ``start`` None means a record from a version that kept no start
    time (or a system without /proc): then only the pid is checked, as before.
    """

    def __init__(self, pid: int, start: int | None) -> None:
        self.pid, self.start = pid, start

    @classmethod
    def of(cls, pid: int) -> ProcessRecord:
        """The process that has ``pid`` now (read it while that is surely ours, e.g. before reaping)."""
        return cls(pid, process_start_ticks(pid))

    def alive(self) -> bool:
        """Whether our process still runs (not a later one with the same pid)."""
        if not pid_alive(self.pid):
            return False
        return self.start is None or process_start_ticks(self.pid) == self.start

    def signal(self, sig: int) -> bool:
        """Send ``sig`` to our process only; False when it is gone (or the pid is someone else's now).

        Through a pidfd where there is one: it is opened first and the start time checked after, so a
        pid reused between the check and the signal gets nothing (the pidfd names the old process)."""
        import signal as signals

        pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # no pidfd here (ENOSYS, macOS), or gone (ESRCH)
            pidfd = os.pidfd_open(self.pid)
        try:
            if not self.alive():
                return False
            if pidfd is None:
                os.kill(self.pid, sig)
            else:
                signals.pidfd_send_signal(pidfd, sig)
        except (ProcessLookupError, PermissionError):
            return False
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return True


def end_process(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """End a child we started: SIGTERM, then SIGKILL after ``grace`` seconds; reaped either way.

    No pid-reuse check is needed: until we reap it, the child's pid cannot be given to anyone else, and
    Popen does not signal a child it has reaped."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def process_start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat`` field 22); None when
    there is no such process or no /proc.  With the pid it names one process: pids are reused, a pid and
    its start time within one boot are not."""
    fields = proc_stat(pid) if pid > 0 else None
    try:
        return int(fields[19]) if fields is not None else None  # fields start at field 3 (the state)
    except (IndexError, ValueError):
        return None


def process_gone(pid: int, start_ticks: int | None) -> str | None:
    """Why the process a document names (``pid``, and its start time when the document has one) no
    longer runs on this machine, None while it runs.  A zombie is gone: its sockets are closed already."""
    if pid <= 0:
        return "no process id"
    if not pid_alive(pid):
        return f"process {pid} is gone"
    if start_ticks is not None:
        now = process_start_ticks(pid)
        if now is not None and now != start_ticks:
            return f"process {pid} is gone (the pid now belongs to another process)"
    return None
