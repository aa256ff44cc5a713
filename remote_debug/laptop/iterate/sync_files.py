"""Which files ``sync`` sends: the workspace walked once, with git's ignore rules and ours.

The list is computed here, once per sync, and both ways of sending (rsync and sftp, ``sync.py``) send
exactly it, so they can never disagree about what reaches a node.  The rules, in rising precedence:

* ``.gitignore`` in the source dir and in any folder below it, with git's semantics (a pattern is
  relative to its file's folder, a deeper file wins over a shallower one, ``!`` re-includes, and
  nothing below an ignored folder can be re-included: ignored folders are not even entered);
* ``.remote-debugignore`` in the same places, same syntax, over the ``.gitignore`` next to it (so
  ``!data.csv`` there sends a file git ignores);
* ``--exclude`` patterns, relative to the source dir, over everything;
* ``.git`` is always skipped, and so is anything that is not a regular file (fifos, sockets, devices).

Symlinks never lead out of the workspace: one whose target (followed to the end) lies outside the
source dir is skipped and reported; the others are sent as what they point to (a file's bytes, a
folder's files under the link's name), by both methods.  A folder link that leads back to one of its
own ancestors is skipped too (it would never end).

The list is a snapshot: by the time a file is read, it (or a folder above it) may have been swapped for
a link to ``~/.ssh/id_ed25519``.  So no file is read by its path: :func:`open_inside` resolves the path
once and then opens it one component at a time from the source dir's descriptor with ``O_NOFOLLOW``
(a component that has become a link since fails to open), and checks that what it opened is a regular
file; both methods send only what it opened (rsync: from a private staging tree, ``sync_stage.py``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from remote_debug.laptop.core.errors import UserError

IGNORE_FILES = (".gitignore", ".remote-debugignore")  # per folder, the later one wins
ALWAYS_SKIPPED = frozenset({".git"})


@dataclass(frozen=True)
class LocalFile:
    """One file to send: where it goes (relative to the code dir, ``/``-separated) and what decides
    whether the node's copy is current (size and whole-second mtime: what rsync's quick check and
    SFTP's attributes compare).  ``mtime_ns`` tells a rewrite within the same second apart."""

    path: str
    size: int
    mtime: int
    mode: int  # permission bits
    mtime_ns: int = 0


@dataclass
class FileList:
    root: Path  # the source dir, absolute
    files: list[LocalFile] = field(default_factory=list)
    leaving_links: list[str] = field(default_factory=list)  # symlinks skipped: they lead out of root
    dir_modes: dict[str, int] = field(default_factory=dict)  # folder (relative) -> permission bits

    def signature(self) -> frozenset[LocalFile]:
        """Equal for two lists exactly when a sync of one would send nothing after the other."""
        return frozenset(self.files)


@dataclass(frozen=True)
class _Layer:
    base: str  # the folder the patterns are relative to: "" (root) or "a/b/"
    spec: pathspec.GitIgnoreSpec
    where: str  # for error messages


def _spec(lines: Iterable[str], where: str, *, strict: bool) -> pathspec.GitIgnoreSpec:
    """The patterns as one spec; a pattern git cannot read (``!``, a trailing ``\\``) is an error when
    the user typed it (``strict``) and skipped in a file, as git skips it."""
    lines = list(lines)
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines)
    except ValueError as exc:  # pathspec's pattern errors are ValueErrors
        if strict:
            raise UserError(f"bad ignore pattern in {where}: {exc}") from None
    return pathspec.GitIgnoreSpec.from_lines([line for line in lines if _readable(line)])


def _readable(line: str) -> bool:
    try:
        pathspec.GitIgnoreSpec.from_lines([line])
    except ValueError:
        return False
    return True


def exclude_rules(patterns: Sequence[str]) -> _Layer | None:
    """``--exclude`` patterns as one rule layer (checked before any file's); None without patterns."""
    return _Layer("", _spec(patterns, "--exclude", strict=True), "--exclude") if patterns else None


def _folder_layers(folder: str, rel: str) -> list[_Layer]:
    layers = []
    for name in IGNORE_FILES:
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            continue
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
        layers.append(_Layer(rel, _spec(text.splitlines(), path, strict=False), path))
    return layers


def ignored(rel: str, is_dir: bool, layers: Sequence[_Layer], excludes: _Layer | None = None) -> bool:
    """Whether ``rel`` (relative to the source dir) is ignored by ``layers`` (shallowest first) and
    ``excludes``: the first layer that has a say, from the strongest, decides."""
    for layer in ([excludes] if excludes else []) + list(reversed(layers)):
        sub = rel[len(layer.base) :] + ("/" if is_dir else "")
        include = layer.spec.check_file(sub).include
        if include is not None:
            return bool(include)
    return False


def _inside(real: str, real_root: str) -> bool:
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def open_inside(root: Path, rel: str) -> int | None:
    """A read-only descriptor of the regular file ``rel`` (``/``-separated) below ``root``, or None when
    it vanished, leads out of ``root``, or is no regular file now.

    The check and the open are one operation: the path is resolved (in-workspace links followed, as the
    list sends them), then every component of the resolved path is opened relative to its folder's
    descriptor with ``O_NOFOLLOW``, so a link swapped in after the resolution is never followed."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root, *rel.split("/")))
    if real == real_root or not _inside(real, real_root):
        return None
    *folders, name = os.path.relpath(real, real_root).split(os.sep)
    nofollow = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        dir_fd = os.open(real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for folder in folders:
            inner = os.open(folder, nofollow | os.O_DIRECTORY, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = inner
        # O_NONBLOCK: a FIFO swapped in must not hang the sync until a writer comes (fstat refuses it next)
        fd = os.open(name, nofollow | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:  # ELOOP / ENOTDIR: a link or a file where the resolution saw a folder; ENOENT: gone
        return None
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def collect(source: Path, excludes: Sequence[str] = ()) -> FileList:
    """The files below ``source`` that a sync sends (see the module docstring), sorted by path."""
    root = Path(os.path.abspath(source))
    if not root.is_dir():
        raise UserError(f"source {source} is not a folder")
    real_root = os.path.realpath(root)
    out = FileList(root=root)
    cli = exclude_rules(excludes)

    def walk(folder: str, rel_dir: str, layers: list[_Layer], ancestors: frozenset[str]) -> None:
        layers = layers + _folder_layers(folder, rel_dir)
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return  # vanished while we walked
        for entry in entries:
            if entry.name in ALWAYS_SKIPPED:
                continue
            rel = rel_dir + entry.name
            try:
                is_link = entry.is_symlink()
                st = os.stat(entry.path)  # follows links: what would be sent
            except FileNotFoundError:
                continue  # vanished, or a dangling link: nothing to send
            except OSError as exc:
                raise UserError(f"cannot read {entry.path}: {exc.strerror or exc}") from None
            is_dir = stat.S_ISDIR(st.st_mode)
            if ignored(rel, is_dir, layers, cli):
                continue
            real = os.path.realpath(entry.path) if is_link else ""
            if is_link and not _inside(real, real_root):
                out.leaving_links.append(rel)
                continue
            if is_dir:
                real_dir = real or os.path.realpath(entry.path)
                if real_dir in ancestors:
                    continue  # a link back up its own path: it would never end
                out.dir_modes[rel] = stat.S_IMODE(st.st_mode)
                walk(entry.path, rel + "/", layers, ancestors | {real_dir})
            elif stat.S_ISREG(st.st_mode):
                out.files.append(LocalFile(rel, st.st_size, int(st.st_mtime), stat.S_IMODE(st.st_mode), st.st_mtime_ns))

    walk(str(root), "", [], frozenset({real_root}))
    out.files.sort(key=lambda f: f.path)
    return out
