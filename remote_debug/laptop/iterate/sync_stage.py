"""What rsync reads: a private tree of the listed files, each staged from a descriptor ``open_inside`` opened.

rsync opens the files of its ``--files-from`` list itself, by path, and follows links doing it (every
folder component, and the file with ``--copy-links``): a file or folder swapped for a link to
``~/.ssh`` between our listing and rsync's read would be sent.  So rsync never reads the workspace:
each listed file is opened the safe way (:func:`sync_files.open_inside`: no link followed after the
check, a regular file) and hard-linked into a private 0700 folder through ``/proc/self/fd`` (the very
inode that was opened, whatever the name points at by then: no bytes copied, size / mtime / mode the
file's own, so rsync's quick check still skips unchanged files); where no hard link can be made (another
filesystem, no /proc) it is copied from the descriptor with its mode and mtime.  The tree holds no links,
and it is removed after the sync.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from remote_debug.laptop.core.paths import private_dir
from remote_debug.laptop.iterate.sync_files import FileList, LocalFile, open_inside

CHUNK = 1 << 20
# a staging folder this old is a killed sync's (SIGKILL skips the cleanup): removed by the next sync
STALE_SECONDS = 24 * 3600


@contextlib.contextmanager
def staged(files: FileList, under: Path) -> Iterator[tuple[Path, list[LocalFile]]]:
    """A fresh staging folder below ``under`` (made 0700) holding ``files``; yields it and the files that
    could be staged (one that vanished or became a link since the listing is left out); removed after."""
    base = private_dir(under)
    _remove_stale(base)
    top = Path(tempfile.mkdtemp(prefix="stage-", dir=base))
    try:
        yield top, [f for f in files.files if _stage(files.root, f, top)]
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _remove_stale(base: Path) -> None:
    now = time.time()
    for old in base.glob("stage-*"):
        with contextlib.suppress(OSError):
            if now - old.lstat().st_mtime > STALE_SECONDS:
                shutil.rmtree(old, ignore_errors=True)


def _stage(root: Path, f: LocalFile, top: Path) -> bool:
    fd = open_inside(root, f.path)
    if fd is None:
        return False
    try:
        dst = top.joinpath(*f.path.split("/"))
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not _link(fd, dst):
            _copy(fd, dst)
        return True
    finally:
        os.close(fd)


def _link(fd: int, dst: Path) -> bool:
    """Hard-link the inode behind ``fd`` at ``dst`` (Linux: linkat through the /proc magic link)."""
    try:
        os.link(f"/proc/self/fd/{fd}", dst, follow_symlinks=True)
    except OSError:  # EXDEV (another filesystem), EPERM (protected_hardlinks), ENOENT (no /proc)
        return False
    opened, made = os.fstat(fd), os.lstat(dst)
    if (made.st_dev, made.st_ino) != (opened.st_dev, opened.st_ino) or not stat.S_ISREG(made.st_mode):
        os.unlink(dst)  # not the inode we opened: never hand rsync anything else
        return False
    return True


def _copy(fd: int, dst: Path) -> None:
    opened = os.fstat(fd)
    out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        while chunk := os.read(fd, CHUNK):
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
        os.fchmod(out, stat.S_IMODE(opened.st_mode))
        os.utime(out, ns=(opened.st_atime_ns, opened.st_mtime_ns))
    finally:
        os.close(out)
