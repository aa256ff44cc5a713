"""One read-modify-write of a user's launch.json, and the record that lets us undo what we added.

:mod:`vscode_launch` knows the JSONC model (what to change in the text); this module knows the
file: it locks the ``.vscode`` folder, reads, lets the caller change the document, and replaces the
file only if nobody (an editor) saved it meanwhile, retrying otherwise.  Next to the file's text it
keeps a :class:`LaunchRecord` under the state dir: what we added besides our entries (the file
itself, a top-level key, the blanks of an empty array), so that removing the last of our entries
gives the user their bytes back.  The record and the file change together: a record is written
before the edit (a crash between leaves a note, never an unnoted change) and put back when the
edit does not happen, including when an editor's save makes the write a no-op.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from remote_debug import osutil
from remote_debug.local.dir_lock import locked
from remote_debug.local.errors import UserError
from remote_debug.local.paths import StatePaths, private_dir

WRITE_ATTEMPTS = 3
RECORD_VERSION = 1
Notes = dict[str, Any]  # see LaunchRecord


class LaunchJsonError(UserError):
    """launch.json exists but cannot be edited safely (message: path and what is wrong, one line)."""


class EditableDocument(Protocol):
    """What an edit needs from the parsed file (vscode_launch's ``_Document``)."""

    nl: str

    def has_our_entries(self) -> bool: ...

    def render(self) -> str: ...


Doc = TypeVar("Doc", bound=EditableDocument)


def read_launch_json(path: Path) -> tuple[bytes | None, str | None]:
    """(bytes, text) of the file; (None, None) when it does not exist."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise LaunchJsonError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError:
        raise LaunchJsonError(f"{path}: not UTF-8 text; remote-debug did not change it") from None


def replace_if_unchanged(path: Path, expected: bytes | None, data: bytes) -> bool:
    """Atomically write ``data`` unless someone (an editor) changed the file meanwhile; False then."""
    mode = stat.S_IMODE(path.stat().st_mode) if expected is not None else 0o644
    try:
        return osutil.atomic_write_bytes(path, data, mode, unless_changed=lambda: read_launch_json(path)[0] == expected)
    except OSError as exc:
        raise LaunchJsonError(f"{path}: cannot write it ({exc.strerror}); remote-debug did not change it") from None


class LaunchRecord:
    """What we added to one launch.json besides our entries, kept under the state dir.

    ``created``: the file was missing (``text`` None) or blank (its text) and ``dir`` whether we made
    ``.vscode`` too; ``added_keys``: top-level arrays we added; ``empty_gaps``: the text inside an
    empty array before we appended to it; ``root_gap``: the same for an empty ``{ }``.  Reset
    whenever the file holds none of our entries.
    """

    def __init__(self, paths: StatePaths, target: Path) -> None:
        self.file = paths.launch_record(target)
        self.target = target
        self.notes = self._load()

    def _load(self) -> Notes:
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # no record: removal still takes our entries out, it only keeps a key we added
        if not isinstance(data, dict) or data.get("version") != RECORD_VERSION or data.get("path") != str(self.target):
            return {}
        notes = data.get("notes")
        return notes if isinstance(notes, dict) else {}

    def save(self, notes: Notes) -> None:
        if notes == self.notes:
            return
        try:
            if not notes:
                with contextlib.suppress(FileNotFoundError):
                    self.file.unlink()
                with contextlib.suppress(OSError):  # the last note gone: so is its folder
                    self.file.parent.rmdir()
            else:
                text = json.dumps({"version": RECORD_VERSION, "path": str(self.target), "notes": notes}, indent=2)
                made = not self.file.parent.exists()
                try:
                    private_dir(self.file.parent)
                    osutil.atomic_write_text(self.file, text + "\n", mode=0o600)
                except OSError:
                    if made:  # a full disk: leave no empty folder behind either
                        with contextlib.suppress(OSError):
                            self.file.parent.rmdir()
                    raise
        except OSError as exc:
            raise LaunchJsonError(
                f"{self.target}: cannot record the edit in {self.file} ({exc.strerror}); remote-debug did not change it"
            ) from None
        self.notes = copy.deepcopy(notes)


def _make_dir(path: Path) -> bool:
    """Create ``path`` if missing; True if this call created it."""
    try:
        os.mkdir(path)
    except FileExistsError:
        return False
    except OSError as exc:
        raise LaunchJsonError(f"{path}: cannot create it ({exc.strerror})") from None
    return True


def edit_launch_json(
    path: Path,
    change: Callable[[Doc, Notes], None],
    *,
    remove: bool,
    paths: StatePaths | None,
    parse: Callable[[Path, str], Doc],
    skeleton: Callable[[str], str],
) -> bool:
    """Read, apply ``change(doc, notes)``, write if the text differs; True if the file changed.

    ``parse`` makes the document, ``skeleton(nl)`` is the text of a file we create.  The folder's
    lock keeps other remote-debug runs out; the unless-changed check at the rename still catches
    an editor that saved meanwhile (retried).
    """
    paths = paths or StatePaths.default()
    created_dir = False
    if not path.parent.is_dir():
        if remove:
            return False
        created_dir = _make_dir(path.parent)
    try:
        with locked(path.parent, what=str(path)):
            return _edit_locked(path, change, remove, paths, created_dir, parse, skeleton)
    except BaseException:
        if created_dir:  # nothing was written (or Ctrl-C): the folder we made goes too
            with contextlib.suppress(OSError):
                path.parent.rmdir()
        raise


def _edit_locked(
    path: Path,
    change: Callable[[Doc, Notes], None],
    remove: bool,
    paths: StatePaths,
    created_dir: bool,
    parse: Callable[[Path, str], Doc],
    skeleton: Callable[[str], str],
) -> bool:
    record = LaunchRecord(paths, path)
    for _ in range(WRITE_ATTEMPTS):
        data, text = read_launch_json(path)
        notes = copy.deepcopy(record.notes)
        if text is not None and text.strip(" \t\r\n\ufeff"):
            fresh, text_in = False, text
        else:
            if remove:
                record.save({})
                return False
            nl = "\r\n" if text and "\r\n" in text else "\n"
            fresh, text_in = True, skeleton(nl)  # an absent or blank file starts afresh
            notes = {"created": {"text": text, "dir": created_dir}}
        doc = parse(path, text_in)
        if not fresh and not doc.has_our_entries():
            notes = {}  # whatever we noted before, the user has taken it over since
        change(doc, notes)
        out = doc.render()
        created = notes.get("created")
        if remove and isinstance(created, dict) and out == skeleton(doc.nl):
            if not give_back_original(path, data, created):
                continue  # an editor saved meanwhile: keep the record, look again
            record.save({})
            return True
        if out == text:
            record.save(notes)
            return False
        before = copy.deepcopy(record.notes)
        if not remove:
            record.save(notes)  # first: a crash after it leaves a note, never an unnoted change
        try:
            replaced = replace_if_unchanged(path, data, out.encode("utf-8"))
        except LaunchJsonError:
            with contextlib.suppress(LaunchJsonError):  # the edit did not happen: neither did its note
                record.save(before)
            raise
        if not replaced:
            # an editor saved meanwhile: this attempt's notes describe an edit that did not happen
            # (a key "we added" may now be the user's); the retry starts from the old ones
            record.save(before)
            continue
        if remove:
            record.save(notes)
        return True
    raise LaunchJsonError(f"{path}: it keeps changing while remote-debug edits it; retry")


def give_back_original(path: Path, data: bytes | None, created: dict[str, Any]) -> bool:
    """Our last entry is gone from a file we created (or that was blank): back to how it was.

    ``data`` is the file as read; False (nothing done) when an editor changed it since.
    """
    original = created.get("text")
    if isinstance(original, str):
        return replace_if_unchanged(path, data, original.encode("utf-8"))
    if read_launch_json(path)[0] != data:
        return False
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise LaunchJsonError(f"{path}: cannot remove it ({exc.strerror})") from None
    if created.get("dir"):
        with contextlib.suppress(OSError):  # not empty: something else lives there now
            path.parent.rmdir()
    return True
