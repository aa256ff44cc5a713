"""Standard-library helpers both sides need: atomic file writes and process liveness.

Not part of the contract (:mod:`remote_debug.spec`), but the only other package module the container
side may import (``tests/test_import_rules.py``): the node hook writes its manifests atomically and
watches processes exactly as the laptop writes ssh config and watches local jobs.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path


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


def _write_temp(tmp: Path, data: bytes, mode: int) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)  # private until done
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)


def _discard(tmp: Path) -> None:
    try:
        os.unlink(tmp)
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
