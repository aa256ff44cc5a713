"""One read-modify-write of a user's launch.json, and the record that lets us undo what we added.

:mod:`vscode_launch` knows the JSONC model (what to change in the text); this module knows the
file: it locks the ``.vscode`` folder, reads, lets the caller change the document, and replaces the
file only if nobody (an editor) saved it meanwhile, retrying otherwise.  Next to the file's text it
keeps a :class:`LaunchRecord` under the state dir: what we added besides our entries (the file
itself, a top-level key, the blanks of an empty array), so that removing the last of our entries
gives the user their bytes back.  The record and the file change together: a record is written
before the edit (a crash between leaves a note, never an unnoted change) and put back when the
edit does not happen, including when an editor's save makes the write a no-op.

The repository the user cloned decides what ``.vscode`` and ``launch.json`` are, so both are opened
with ``O_NOFOLLOW`` (:class:`osutil.NoFollowDir`) and a link is refused: read through it, the file
it points at (a secret elsewhere in HOME) would end up in the workspace next to our entries.
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

import json5

from remote_debug.laptop.core.dir_lock import locked
from remote_debug.laptop.core.errors import LaunchJsonError as LaunchJsonError
from remote_debug.laptop.core.paths import StatePaths, private_dir
from remote_debug.oskit import osutil

WRITE_ATTEMPTS = 3
RECORD_VERSION = 1
Notes = dict[str, Any]  # see LaunchRecord


class EditableDocument(Protocol):
    """What an edit needs from the parsed file (vscode_launch's ``_Document``)."""

    nl: str

    def has_our_entries(self) -> bool: ...

    def render(self) -> str: ...


Doc = TypeVar("Doc", bound=EditableDocument)


def _unsafe(exc: osutil.UnsafePathError, kind: str = "file") -> LaunchJsonError:
    # a link here is the repository's choice, not the user's: following it would copy the file it
    # points at into the workspace, or write ours somewhere else
    return LaunchJsonError(
        f"{exc.filename}: {exc.strerror}; remote-debug edits launch.json only in a real {kind} "
        "(never through a link): replace it, or attach with --no-launch-json"
    )


def read_launch_json(folder: osutil.NoFollowDir, name: str) -> tuple[bytes | None, str | None]:
    """(bytes, text) of the file; (None, None) when it does not exist.  Never through a symlink."""
    path = folder.path / name
    try:
        data = folder.read(name)
    except osutil.UnsafePathError as exc:
        raise _unsafe(exc) from None
    except OSError as exc:
        raise LaunchJsonError(f"{path}: cannot read it ({exc.strerror})") from None
    if data is None:
        return None, None
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError:
        raise LaunchJsonError(f"{path}: not UTF-8 text; remote-debug did not change it") from None


def replace_if_unchanged(folder: osutil.NoFollowDir, name: str, expected: bytes | None, data: bytes) -> bool:
    """Atomically write ``data`` unless someone (an editor) changed the file meanwhile; False then."""
    path = folder.path / name
    try:
        st = folder.check_file(name)
        mode = stat.S_IMODE(st.st_mode) if expected is not None and st is not None else 0o644
        return folder.write(name, data, mode, unless_changed=lambda: read_launch_json(folder, name)[0] == expected)
    except osutil.UnsafePathError as exc:
        raise _unsafe(exc) from None
    except OSError as exc:
        raise LaunchJsonError(f"{path}: cannot write it ({exc.strerror}); remote-debug did not change it") from None


class LaunchRecord:
    """What we added to one launch.json besides our entries, kept under the state dir.

    ``created``: the file was missing (``text`` None) or blank (its text) and ``dir`` whether we made
    ``.vscode`` too; ``added_keys``: top-level arrays we added; ``empty_gaps``: the text inside an
    empty array before we appended to it; ``root_gap``: the same for an empty ``{ }``.  Reset
    whenever the file holds none of our entries.

    The record is kept for as long as the file holds entries of ours, notes or not: the records are
    also the list of launch.json files we have entries in, which ``remote-debug prune`` goes through
    (:func:`recorded_files`) to take out the entries of ended jobs.
    """

    def __init__(self, paths: StatePaths, target: Path) -> None:
        self.file = paths.launch_record(target)
        self.target = target
        self.kept = False  # whether the record file is there (for this target)
        self.notes = self._load()

    def _load(self) -> Notes:
        data = _read_record(self.file)
        if data is None or data.get("path") != str(self.target):
            return {}  # no record: removal still takes our entries out, it only keeps a key we added
        self.kept = True
        notes = data.get("notes")
        return notes if isinstance(notes, dict) else {}

    def save(self, notes: Notes, holds_ours: bool) -> None:
        """Record ``notes``; ``holds_ours``: the file has entries of ours (then the record stays, even
        without notes)."""
        keep = bool(notes) or holds_ours
        if notes == self.notes and keep == self.kept:
            return
        try:
            if not keep:
                with contextlib.suppress(FileNotFoundError):
                    self.file.unlink()
                with contextlib.suppress(OSError):  # the last record gone: so is its folder
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
        self.kept = keep

    def state(self) -> tuple[Notes, bool]:
        """(notes, kept), to put back with :meth:`restore` when an edit does not happen."""
        return copy.deepcopy(self.notes), self.kept

    def restore(self, state: tuple[Notes, bool]) -> None:
        self.save(state[0], state[1])


def _read_record(file: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != RECORD_VERSION or not isinstance(data.get("path"), str):
        return None
    return data


def recorded_files(paths: StatePaths) -> list[Path]:
    """Every launch.json we have recorded entries in (the file may have changed since: read it)."""
    folder = paths.launch_record(Path("/")).parent
    try:
        files = sorted(folder.glob("*.json"))
    except OSError:
        return []
    out: list[Path] = []
    for file in files:
        data = _read_record(file)
        if data is not None:
            target = Path(data["path"])
            if paths.launch_record(target) == file:  # a record is named after its target: anything else is not one
                out.append(target)
    return out


def read_entry_names(path: Path) -> list[str]:
    """The ``name`` of every configuration and compound in a launch.json (JSONC), read without following
    a link; [] when the file or its ``.vscode`` is gone.  Raises LaunchJsonError when it cannot be read."""
    folder = _open_folder(path, create=False)
    if folder is None:
        return []
    with folder:
        _, text = read_launch_json(folder, path.name)
    if text is None or not text.strip(" \t\r\n\ufeff"):
        return []
    try:
        doc = json5.loads(text)
    except (ValueError, RecursionError):
        raise LaunchJsonError(f"{path}: not valid JSON with comments; fix it and retry") from None
    names: list[str] = []
    if isinstance(doc, dict):
        for key in ("configurations", "compounds"):
            entries = doc.get(key)
            if isinstance(entries, list):
                names += [str(e["name"]) for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)]
    return names


def _open_folder(path: Path, *, create: bool) -> osutil.NoFollowDir | None:
    """``.vscode``, opened without following a link (None: it is missing and ``create`` is False)."""
    try:
        return osutil.NoFollowDir(path.parent.parent, [path.parent.name], create=create)
    except osutil.UnsafePathError as exc:
        raise _unsafe(exc, "folder") from None
    except FileNotFoundError:
        if not create:
            return None
        raise LaunchJsonError(f"{path.parent}: cannot create it (its workspace is missing)") from None
    except OSError as exc:
        raise LaunchJsonError(f"{path.parent}: cannot create it ({exc.strerror})") from None


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
    an editor that saved meanwhile (retried).  ``.vscode`` and the file are never followed through
    a symlink: a cloned repository decides what they are, and a link would copy the file it points
    at into the workspace (or write ours elsewhere).
    """
    paths = paths or StatePaths.default()
    folder = _open_folder(path, create=not remove)
    if folder is None:
        return False
    try:
        with folder, locked(path.parent, what=str(path)):
            return _edit_locked(path, folder, change, remove, paths, bool(folder.created), parse, skeleton)
    except BaseException:
        folder.remove_created()  # nothing was written (or Ctrl-C): the folder we made goes too
        raise


def _edit_locked(
    path: Path,
    folder: osutil.NoFollowDir,
    change: Callable[[Doc, Notes], None],
    remove: bool,
    paths: StatePaths,
    created_dir: bool,
    parse: Callable[[Path, str], Doc],
    skeleton: Callable[[str], str],
) -> bool:
    record = LaunchRecord(paths, path)
    for _ in range(WRITE_ATTEMPTS):
        data, text = read_launch_json(folder, path.name)
        notes = copy.deepcopy(record.notes)
        if text is not None and text.strip(" \t\r\n\ufeff"):
            fresh, text_in = False, text
        else:
            if remove:
                record.save({}, holds_ours=False)
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
            if not give_back_original(folder, path.name, data, created):
                continue  # an editor saved meanwhile: keep the record, look again
            record.save({}, holds_ours=False)
            return True
        holds_ours = doc.has_our_entries()
        if out == text:
            record.save(notes, holds_ours)
            return False
        before = record.state()
        if not remove:
            record.save(notes, holds_ours)  # first: a crash after it leaves a note, never an unnoted change
        try:
            replaced = replace_if_unchanged(folder, path.name, data, out.encode("utf-8"))
        except LaunchJsonError:
            with contextlib.suppress(LaunchJsonError):  # the edit did not happen: neither did its note
                record.restore(before)
            raise
        if not replaced:
            # an editor saved meanwhile: this attempt's notes describe an edit that did not happen
            # (a key "we added" may now be the user's); the retry starts from the old ones
            record.restore(before)
            continue
        if remove:
            record.save(notes, holds_ours)
        return True
    raise LaunchJsonError(f"{path}: it keeps changing while remote-debug edits it; retry")


def give_back_original(folder: osutil.NoFollowDir, name: str, data: bytes | None, created: dict[str, Any]) -> bool:
    """Our last entry is gone from a file we created (or that was blank): back to how it was.

    ``data`` is the file as read; False (nothing done) when an editor changed it since.
    """
    original = created.get("text")
    if isinstance(original, str):
        return replace_if_unchanged(folder, name, data, original.encode("utf-8"))
    if read_launch_json(folder, name)[0] != data:
        return False
    try:
        folder.unlink(name)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise LaunchJsonError(f"{folder.path / name}: cannot remove it ({exc.strerror})") from None
    if created.get("dir"):
        with contextlib.suppress(OSError):  # not empty: something else lives there now
            os.rmdir(folder.path)  # rmdir never follows a link
    return True
