"""``<workspace>/.vscode/launch.json``: one attach configuration per rank plus a compound, per job.

launch.json is the user's file, and it is JSONC: comments and trailing commas are normal there.  We
edit it through json-five's round-trip model (every token keeps the whitespace and comments around
it) instead of scanning lines, and we own only entries whose name starts with
``"remote-debug: <job> "``: those are replaced in place, stale ranks removed, new ones appended.
Everything else, including comments next to our entries, is written back byte for byte.

The model keeps the text *between* two items on the items themselves: whitespace and comments after
a comma belong to the next item (``wsc_before``; the first item's live in the container's
``leading_wsc``), those before a comma to the previous one (``wsc_after``), and those after a
trailing comma to that comma.  :class:`_Items` hides this so that removing or appending an item
moves the gaps, and keeps any comment in them, the way a person editing the file would.

The entries hold the ports of one attach's forwards, so they live exactly as long as it does: the
attach gives them back however it ends (:meth:`VsCodeIde.give_back`; SIGHUP and SIGTERM end it like
Ctrl-C), and those of an attach that was killed are given back by the next attach or ``prune``
(:func:`give_back_dead_attaches`).  Left behind, they would send the user's next F5 to a port nobody
of ours holds, which any local user can bind.

Removing the last of our entries gives the user their bytes back: what we added besides entries
(the file itself, a ``"compounds"`` key, the blanks of an empty array we appended to) is noted in a
record under the state dir (:mod:`launch_record`, which also does the locked, atomic
read-modify-write of the file, never through a symlink) and undone then.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import json5
from json5.dumper import ModelDumper
from json5.loader import ModelLoader
from json5.model import (
    Comment,
    DoubleQuotedString,
    Identifier,
    JSONArray,
    JSONObject,
    JSONText,
    Key,
    LineComment,
    Node,
    String,
    Value,
)

from remote_debug.contract import spec
from remote_debug.laptop.connection.ssh_config import natural_key
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide import attach_lock
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.launch_record import LaunchJsonError as LaunchJsonError
from remote_debug.laptop.ide.launch_record import Notes, edit_launch_json
from remote_debug.laptop.wire import events

Gap = list[str | Comment]  # whitespace and comments between two tokens, as json-five keeps them
DEFAULT_UNIT = "    "  # what VS Code writes when it creates launch.json
NEW_FILE = (
    "{{{nl}"
    '{u}// remote-debug adds, updates and removes the "remote-debug: <job> ..." entries;{nl}'
    "{u}// everything else in this file is yours.{nl}"
    '{u}"version": "0.2.0",{nl}'
    '{u}"configurations": [],{nl}'
    '{u}"compounds": []{nl}'
    "}}{nl}"
)


@dataclass(frozen=True)
class RankTarget:
    job: str
    rank: int
    node: str
    host: str  # where the forwarded debug port listens on this machine
    port: int
    local_root: str  # the code on this machine (usually the workspace)
    remote_root: str  # the code dir inside the job


# The names are defined once, in remote_debug.laptop.wire.events (the extension's copy is generated from it).
def config_name(job: str, rank: int, node: str) -> str:
    return events.format_config_name(job, rank, node)


def compound_name(job: str, ranks: Sequence[int] | None = None, world_size: int | None = None) -> str:
    """ "... all ranks" when it holds every rank of the job (or the world size is unknown), else
    named for the ranks it holds ("... rank 0", "... ranks 0,2")."""
    if ranks is None or world_size is None or set(ranks) == set(range(world_size)):
        return events.format_compound_name(job)
    return events.format_compound_name(job, list(ranks))


def _prefix(job: str) -> str:
    # the trailing space keeps job "a" from claiming the entries of job "a-b"
    return events.format_config_name_prefix(job)


def launch_json_path(workspace: Path) -> Path:
    return workspace / ".vscode" / "launch.json"


# --- editing the model ---------------------------------------------------------------------------


def _has_comment(gap: Gap) -> bool:
    return any(isinstance(x, Comment) for x in gap)


def _split_tail(gap: Gap) -> tuple[Gap, Gap]:
    """(everything up to the last comment, the whitespace after it)."""
    i = len(gap)
    while i and isinstance(gap[i - 1], str):
        i -= 1
    return gap[:i], gap[i:]


def _merge(dropped: Gap, kept: Gap) -> Gap:
    """The gap left when ``dropped`` (text before ``kept``) loses its item: only its comments survive.

    A gap is never left with a ``//`` comment running into the next token: every gap that holds
    one also holds the line break after it, so the original ``dropped + kept`` is always safe; we
    only drop ``dropped``'s trailing whitespace when ``kept`` starts on a new line anyway.
    """
    if not _has_comment(dropped):
        return kept
    if kept and isinstance(kept[0], str) and "\n" in kept[0]:
        return _split_tail(dropped)[0] + kept
    if _indent_of(dropped) is not None and kept and isinstance(kept[0], str) and not kept[0].strip():
        return dropped + kept[1:]  # "// a\n    " + " // b" would indent b one blank too far
    return dropped + kept


def _indent_of(gap: Gap) -> str | None:
    """The indentation a gap ends with, if it ends with a line break and blanks."""
    if gap and isinstance(gap[-1], str) and "\n" in gap[-1]:
        tail = gap[-1].rsplit("\n", 1)[1]
        if tail.strip(" \t") == "":
            return tail
    return None


_GAP_ATTRS = ("wsc_before", "wsc_after", "leading_wsc")


def _detach_carriage_returns(node: Any) -> None:
    """Move the ``\\r`` of a CRLF-ended ``//`` comment out of the comment, into the whitespace.

    json-five ends a line comment at ``\\n``, so in a CRLF file the comment keeps the ``\\r``; a
    line break we add after it would then read ``\\r\\r\\n``.  With the ``\\r`` in the whitespace
    the output is the same bytes, and our edits see whole line breaks.
    """
    for name, value in vars(node).items():
        if isinstance(value, Node):
            _detach_carriage_returns(value)
        elif isinstance(value, list):
            if name in _GAP_ATTRS:
                value[:] = _split_cr(value)
            for item in value:
                if isinstance(item, Node):
                    _detach_carriage_returns(item)


def _split_cr(gap: Gap) -> Gap:
    out: Gap = []
    for item in gap:
        if out and isinstance(item, str) and isinstance(out[-1], str):
            out[-1] += item
        else:
            out.append(item)
        if isinstance(item, LineComment) and item.value.endswith("\r"):
            item.value = item.value[:-1]
            out.append("\r")
    return out


def _gap_text(gap: Gap) -> str:
    return "".join(x if isinstance(x, str) else x.value for x in gap)


def _gap_from_text(text: str) -> Gap:
    model = json5.loads("[" + text + "]", loader=ModelLoader())
    assert isinstance(model.value, JSONArray)
    return _split_cr(list(model.value.leading_wsc))


def _comments(gap: Gap) -> list[str]:
    return [x.value for x in gap if isinstance(x, Comment)]


class _Items:
    """The items of an array (values) or an object (key/value pairs), with the gaps between them."""

    def __init__(self, node: JSONArray | JSONObject) -> None:
        self.node = node

    def __len__(self) -> int:
        return len(self.node.values)

    def _head(self, i: int) -> Value | Key:
        return self.node.keys[i] if isinstance(self.node, JSONObject) else self.node.values[i]

    def before(self, i: int) -> Gap:
        if i == 0:
            return list(self.node.leading_wsc) + list(self._head(0).wsc_before)
        return list(self._head(i).wsc_before)

    def set_before(self, i: int, gap: Gap) -> None:
        if i == 0:
            self.node.leading_wsc = list(gap)
            if len(self):
                self._head(0).wsc_before = []
        else:
            self._head(i).wsc_before = list(gap)

    def after(self, i: int) -> Gap:
        return list(self.node.values[i].wsc_after)

    def set_after(self, i: int, gap: Gap) -> None:
        self.node.values[i].wsc_after = list(gap)

    def _pop(self, i: int) -> None:
        del self.node.values[i]
        if isinstance(self.node, JSONObject):
            del self.node.keys[i]

    def replace(self, i: int, value: Value) -> None:
        old = self.node.values[i]
        value.wsc_before, value.wsc_after = list(old.wsc_before), list(old.wsc_after)
        self.node.values[i] = value

    def delete(self, i: int) -> None:
        n, tc = len(self), self.node.trailing_comma
        before, after = self.before(i), self.after(i)
        closing = (list(tc.wsc_before) + list(tc.wsc_after)) if tc else []
        if n == 1:
            closing = after + closing
            self._pop(i)
            self.node.trailing_comma = None  # "[,]" is not JSON
            keep = _has_comment(before) or _has_comment(closing)
            self.node.leading_wsc = _merge(before, closing) if keep else []
        elif i == 0:
            following = self.before(1)
            self._pop(0)
            plain = not (_has_comment(before) or _has_comment(after) or _has_comment(following))
            self.set_before(0, before if plain else _merge(before + after, following))
        elif i < n - 1:
            following = self.before(i + 1)
            self._pop(i)
            self.set_before(i, _merge(before + after, following))
        elif tc is not None:
            self._pop(i)
            tc.wsc_before, tc.wsc_after = [], _merge(before + after, closing)
        else:  # the last item's ``after`` is the text before the closing bracket: it stays
            previous = self.after(i - 1)
            self._pop(i)
            self.set_after(i - 1, previous + _merge(before, after))

    def append(self, key: Key | None, value: Value, indent: str, closing_indent: str, nl: str) -> None:
        n, tc = len(self), self.node.trailing_comma
        if key is None:  # an object value keeps its wsc_before: the blank after the colon
            value.wsc_before = []
        value.wsc_after = []
        if n == 0:
            comments, _ = _split_tail(list(self.node.leading_wsc))
            self._push(key, value)
            self.set_before(0, [*comments, nl + indent])
            self.set_after(0, [nl + closing_indent])
            return
        if tc is not None:  # "..., X, <gap> ]" -> "..., X, <comments> NEW, <gap's last blanks> ]"
            self.set_after(n - 1, self.after(n - 1) + list(tc.wsc_before))
            comments, tail = _split_tail(list(tc.wsc_after))
            tc.wsc_before, tc.wsc_after = [], tail
            self._push(key, value)
        else:  # "..., X <gap> ]" -> "..., X, <comments> NEW <gap's last blanks> ]"
            comments, tail = _split_tail(self.after(n - 1))
            self.set_after(n - 1, [])
            self._push(key, value)
            self.set_after(n, tail)
        self.set_before(n, [*comments, nl + indent])

    def _push(self, key: Key | None, value: Value) -> None:
        if isinstance(self.node, JSONObject):
            assert key is not None
            self.node.keys.append(key)
        self.node.values.append(value)


def _key_name(key: Key) -> str | None:
    if isinstance(key, Identifier):
        return key.name
    if isinstance(key, String):
        return key.characters
    return None


def _entry_name(value: Value) -> str | None:
    if isinstance(value, JSONObject):
        for key, val in zip(value.keys, value.values, strict=True):
            if _key_name(key) == "name" and isinstance(val, String):
                return val.characters
    return None


class _Document:
    """A parsed launch.json and the layout facts we need to add text that looks like the rest."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text
        self.nl = "\r\n" if "\r\n" in text else "\n"
        model = self._parse(text)
        if not isinstance(model.value, JSONObject):
            raise LaunchJsonError(f"{path}: the top level is not an object; remote-debug did not change it")
        self.model = model
        self.root = model.value
        self.unit = _indent_of(list(self.root.leading_wsc)) or DEFAULT_UNIT

    def _parse(self, text: str) -> JSONText:
        try:
            model = json5.loads(text, loader=ModelLoader())
        except (ValueError, RecursionError) as exc:  # JSON5DecodeError is a ValueError
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            if len(lines) > 2 and lines[0].startswith("There were multiple errors"):
                lines = lines[2:]  # json-five: "...multiple errors", "The primary error was:", <error>
            reason = lines[0] if lines else type(exc).__name__
            raise LaunchJsonError(
                f"{self.path}: not valid JSON with comments ({reason}); "
                "fix it and retry, remote-debug did not change it"
            ) from None
        if not isinstance(model, JSONText) or self.dump(model) != text:
            # never rewrite what we cannot reproduce: that would silently change the user's text
            raise LaunchJsonError(
                f"{self.path}: json-five cannot reproduce this file exactly; remote-debug did not change it"
            )
        _detach_carriage_returns(model)
        return model

    @staticmethod
    def dump(model: JSONText) -> str:
        # what json5.dumps(model, dumper=ModelDumper()) does; its annotation wants a BaseDumper
        dumper = ModelDumper()
        dumper.dump(model)
        dumper.env.outfile.seek(0)
        return dumper.env.outfile.read()

    def index(self, key: str) -> int | None:
        index = None
        for i, k in enumerate(self.root.keys):
            if _key_name(k) == key:
                index = i  # like JSON.parse, the last duplicate wins
        return index

    def has_our_entries(self) -> bool:
        for key in ("configurations", "compounds"):
            index = self.index(key)
            value = self.root.values[index] if index is not None else None
            if isinstance(value, JSONArray) and any(
                (_entry_name(v) or "").startswith("remote-debug: ") for v in value.values
            ):
                return True
        return False

    def array(self, key: str, notes: Notes) -> JSONArray:
        """The top-level array ``key``, appended (empty) when the file has none."""
        items = _Items(self.root)
        index = self.index(key)
        if index is None:
            if not len(items):  # "{ }": keep its blanks, as for an empty array below
                notes.setdefault("root_gap", _gap_text(list(self.root.leading_wsc)))
            added = notes.setdefault("added_keys", [])
            if key not in added:
                added.append(key)
            array = JSONArray()
            array.wsc_before = [" "]
            indent = (_indent_of(items.before(len(items) - 1)) if len(items) else None) or self.unit
            quoted = json.dumps(key)
            items.append(DoubleQuotedString(key, raw_value=quoted), array, indent, "", self.nl)
            return array
        value = self.root.values[index]
        if not isinstance(value, JSONArray):
            raise LaunchJsonError(f"{self.path}: {key!r} is not a list; remote-debug did not change the file")
        return value

    def _indent_for(self, key: str) -> str:
        for i, k in enumerate(self.root.keys):
            if _key_name(k) == key:
                return _indent_of(_Items(self.root).before(i)) or ""
        return ""

    def nodes(self, objs: Sequence[dict[str, Any]], indent: str) -> list[Value]:
        """Models of ``objs`` laid out at ``indent``; one parse for all (json-five parses slowly)."""
        texts = [json.dumps(o, indent=self.unit, ensure_ascii=False).replace("\n", self.nl + indent) for o in objs]
        array = json5.loads("[" + ",".join(texts) + "]", loader=ModelLoader()).value
        assert isinstance(array, JSONArray)
        values = list(array.values)
        for v in values:
            v.wsc_before, v.wsc_after = [], []
        return values

    def node(self, obj: dict[str, Any], indent: str, cache: dict[str, list[Value]] | None = None) -> Value:
        """The model of ``obj`` at ``indent``; ``cache`` holds the rest of a batch (see :meth:`sync`)."""
        if cache is None or indent not in cache:
            return self.nodes([obj], indent)[0]
        for i, v in enumerate(cache[indent]):
            if _entry_name(v) == obj["name"]:
                return cache[indent].pop(i)
        return self.nodes([obj], indent)[0]

    def sync(self, key: str, prefix: str, wanted: Sequence[dict[str, Any]], notes: Notes) -> None:
        """Make the ``prefix`` entries of array ``key`` exactly ``wanted``, leaving the rest alone."""
        array = self.array(key, notes)
        items = _Items(array)
        if wanted and not len(items) and key not in notes.get("added_keys", []):
            # appending drops the blanks inside "[ ]": keep them to put back when we leave
            notes.setdefault("empty_gaps", {}).setdefault(key, _gap_text(list(array.leading_wsc)))
        by_name = {str(w["name"]): w for w in wanted}
        key_indent = self._indent_for(key)
        # the indent every entry gets in the usual layout: their models are parsed in one go
        usual = (_indent_of(items.before(len(items) - 1)) if len(items) else None) or key_indent + self.unit
        cache = {usual: self.nodes(wanted, usual)} if wanted else {}
        seen: set[str] = set()
        stale: list[int] = []
        for i, value in enumerate(array.values):
            name = _entry_name(value)
            if name is None or not name.startswith(prefix):
                continue
            if name in by_name and name not in seen:
                seen.add(name)
                indent = _indent_of(items.before(i)) or key_indent + self.unit
                items.replace(i, self.node(by_name[name], indent, cache))
            else:
                stale.append(i)
        for i in reversed(stale):
            items.delete(i)
        for w in wanted:
            if str(w["name"]) not in seen:
                last = _indent_of(items.before(len(items) - 1)) if len(items) else None
                indent = last or key_indent + self.unit
                items.append(None, self.node(w, indent, cache), indent, key_indent, self.nl)

    def restore(self, notes: Notes) -> None:
        """Undo what ``notes`` says we added, where our entries are gone and the user changed nothing."""
        gaps: dict[str, str] = notes.get("empty_gaps", {})
        for key, text in list(gaps.items()):
            index = self.index(key)
            value = self.root.values[index] if index is not None else None
            if isinstance(value, JSONArray) and value.values:
                continue  # another job's entries (or the user's) are still in it
            if isinstance(value, JSONArray) and _comments(list(value.leading_wsc)) == _comments(_gap_from_text(text)):
                value.leading_wsc = _gap_from_text(text)
            del gaps[key]
        added: list[str] = notes.get("added_keys", [])
        drop: list[int] = []
        for key in list(added):
            index = self.index(key)
            value = self.root.values[index] if index is not None else None
            if isinstance(value, JSONArray) and value.values:
                continue
            if isinstance(value, JSONArray) and not _has_comment(list(value.leading_wsc)):
                assert index is not None
                drop.append(index)
            added.remove(key)
        for index in sorted(drop, reverse=True):
            _Items(self.root).delete(index)
        root_gap = notes.pop("root_gap", None)
        if isinstance(root_gap, str) and not self.root.keys and not added:
            if _comments(list(self.root.leading_wsc)) == _comments(_gap_from_text(root_gap)):
                self.root.leading_wsc = _gap_from_text(root_gap)
        elif root_gap is not None and added:
            notes["root_gap"] = root_gap  # not yet: a key we added is still in use
        for name in ("empty_gaps", "added_keys"):
            if not notes.get(name):
                notes.pop(name, None)

    def render(self) -> str:
        return self.dump(self.model)


# --- public API ----------------------------------------------------------------------------------


def _local_root(local_root: str, workspace: Path) -> str:
    """``${workspaceFolder}`` (or below it) when the code is the workspace: the file stays portable."""
    ws, local = workspace.resolve(), Path(local_root).expanduser().resolve()
    if local == ws:
        return "${workspaceFolder}"
    if local.is_relative_to(ws):
        return "${workspaceFolder}/" + local.relative_to(ws).as_posix()
    return local_root


def _configurations(
    workspace: Path, job: str, targets: Sequence[RankTarget], debug_type: str, world_size: int | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The job's configurations and compounds: the compound of every rank it holds first; with more than
    one node, a compound per node too (8 x 8 ranks: "all ranks", "node algo-3", or one rank - not a scroll
    through 64)."""
    spec.check_job_name(job)
    if not targets:
        raise spec.ContractError(f"no ranks of job {job} to write launch configurations for")
    ordered = sorted(targets, key=lambda t: t.rank)
    configs = []
    for t in ordered:
        if t.job != job:
            raise spec.ContractError(f"rank {t.rank} is of job {t.job}, not {job}")
        spec.check_port(t.port, f"debug port of rank {t.rank}", allow_zero=False)
        configs.append(
            {
                "name": config_name(job, t.rank, t.node),
                "type": debug_type,
                "request": "attach",
                "connect": {"host": t.host, "port": t.port},
                "pathMappings": [
                    {"localRoot": _local_root(t.local_root, workspace), "remoteRoot": t.remote_root},
                ],
                # what the rank prints, live in its Debug Console (debugpy's attach sends none without it)
                "redirectOutput": True,
                "justMyCode": False,
            }
        )
    if len({t.rank for t in ordered}) != len(ordered):
        raise spec.ContractError(f"a rank of job {job} appears twice")
    name = compound_name(job, [t.rank for t in ordered], world_size)
    compounds = [{"name": name, "configurations": [c["name"] for c in configs], "stopAll": False}]
    nodes = sorted({t.node for t in ordered}, key=natural_key)  # algo-2 before algo-10
    if len(nodes) > 1:
        for node in nodes:
            compounds.append(
                {
                    "name": events.format_node_compound_name(job, node),
                    "configurations": [c["name"] for c, t in zip(configs, ordered, strict=True) if t.node == node],
                    "stopAll": False,
                }
            )
    return configs, compounds


def _skeleton(nl: str) -> str:
    return NEW_FILE.format(nl=nl, u=DEFAULT_UNIT)


def _edit(path: Path, change: Callable[[_Document, Notes], None], *, remove: bool, paths: StatePaths | None) -> bool:
    return edit_launch_json(path, change, remove=remove, paths=paths, parse=_Document, skeleton=_skeleton)


def update_launch_json(
    workspace: Path,
    job: str,
    targets: list[RankTarget],
    *,
    debug_type: str = "debugpy",
    paths: StatePaths | None = None,
    world_size: int | None = None,
) -> Path:
    """Write the job's attach configurations and compound into ``<workspace>/.vscode/launch.json``
    (``world_size``: the job's number of ranks, which names the compound; see :func:`compound_name`)."""
    configs, compounds = _configurations(workspace, job, targets, debug_type, world_size)
    path = launch_json_path(workspace)

    def change(doc: _Document, notes: Notes) -> None:
        doc.sync("configurations", _prefix(job), configs, notes)
        doc.sync("compounds", _prefix(job), compounds, notes)

    _edit(path, change, remove=False, paths=paths)
    return path


def remove_job_configs(workspace: Path, job: str, *, paths: StatePaths | None = None) -> bool:
    """Remove the job's configurations and compound; True if the file changed.

    When they were the last of ours, what we added with them goes too (see :class:`launch_record.LaunchRecord`).
    """
    spec.check_job_name(job)
    path = launch_json_path(workspace)

    def change(doc: _Document, notes: Notes) -> None:
        for key in ("configurations", "compounds"):
            if doc.index(key) is not None:
                doc.sync(key, _prefix(job), [], notes)
        doc.restore(notes)

    return _edit(path, change, remove=True, paths=paths)


def give_back_holder(job: str, holder: attach_lock.Holder, paths: StatePaths | None = None) -> bool:
    """Remove the entries a killed VS Code attach of ``job`` left in its workspace's launch.json."""
    if holder.ide != Editor.VSCODE or not Path(holder.workspace).is_absolute():
        return False  # PyCharm's run configuration is not ours to edit here
    return remove_job_configs(Path(holder.workspace), job, paths=paths)


def give_back_dead_attaches(paths: StatePaths) -> list[str]:
    """The entries of every job whose attach was killed (its lock names a holder nobody holds); the
    jobs reclaimed.  A launch.json that cannot be edited now keeps its lock file: the next try redoes it."""

    def give_back(job: str, holder: attach_lock.Holder) -> None:
        give_back_holder(job, holder, paths)

    return attach_lock.reclaim_dead(paths, give_back)
