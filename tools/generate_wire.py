"""The VS Code extension's types for the whole CLI<->extension wire, generated from its Python definitions.

The sources: the attach event stream (:mod:`remote_debug.laptop.wire.events`), JobInfo, every other document a
command prints with ``--json`` (:mod:`remote_debug.laptop.wire.documents`, and the adopt documents where they are
defined), and the shared formats (configuration names, ssh aliases).

``python tools/generate_wire.py [--out FILE]`` (the extension's ``npm run generate``); a dev-time tool, not part
of the shipped package.  ``tests/local/test_events_schema.py`` fails when the committed
``vscode-extension/src/generated/events.ts`` differs from what this prints.

A ``StrEnum`` field becomes a named union of its values (``export type RankState = 'idle' | ...;``, declared
once, before the interfaces), so the extension cannot compare a field with a value the CLI never sends.  A
TypedDict becomes an interface too, its ``total=False`` keys optional (``key?: T``).
"""

from __future__ import annotations

import dataclasses
import enum
import re
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

if __package__ in (None, ""):  # run as a script (python tools/generate_wire.py): the repo root is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from remote_debug.laptop.core.jobinfo import PLATFORM_DETAILS, PlatformDetails
from remote_debug.laptop.wire import documents
from remote_debug.laptop.wire.events import (
    COMPOUND_NAME_TEMPLATE,
    CONFIG_NAME_PREFIX_TEMPLATE,
    CONFIG_NAME_TEMPLATE,
    EVENT_TYPES,
    EVENTS_VERSION,
    TEXT_KEY,
    Event,
    json_key,
)
from remote_debug.oskit.osutil import atomic_write_text

GENERATED_HEADER = "// Generated, do not edit: python tools/generate_wire.py (npm run generate)\n"

# The TypeScript name of a class whose Python name says less outside its module.
TS_NAMES: dict[str, str] = {"Candidate": "AdoptCandidate"}


def _name(tp: type[Any]) -> str:
    return TS_NAMES.get(tp.__name__, tp.__name__)


def _is_typed_dict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _ts_type(tp: Any, nested: dict[str, type[Any]]) -> str:
    """``tp`` in TypeScript; a nested dataclass or an enum is recorded in ``nested`` and named."""
    if tp is Any or tp is object:
        return "unknown"
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        parts = [_ts_type(a, nested) for a in args if a is not type(None)]
        if type(None) in args:
            parts.append("null")
        return " | ".join(parts)
    if origin is list or origin is tuple:
        items = [a for a in typing.get_args(tp) if a is not Ellipsis]
        item = _ts_type(items[0], nested) if items else "unknown"
        return f"({item})[]" if " " in item else f"{item}[]"
    if origin is dict:
        _, item = typing.get_args(tp)
        return f"Record<string, {_ts_type(item, nested)}>"
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or issubclass(tp, enum.Enum) or _is_typed_dict(tp)):
        if issubclass(tp, enum.Enum) and not (issubclass(tp, str) and all(isinstance(m.value, str) for m in tp)):
            raise TypeError(f"enum {tp!r} has no TypeScript mapping: only a StrEnum does")
        known = nested.setdefault(_name(tp), tp)
        if known is not tp:
            raise TypeError(f"two types named {_name(tp)} ({known!r}, {tp!r}): TypeScript needs one name each")
        return _name(tp)
    mapping = {str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}
    if tp in mapping:
        return mapping[tp]
    raise TypeError(f"type {tp!r} has no TypeScript mapping")


def _ts_fields(cls: type[Any], nested: dict[str, type[Any]]) -> list[str]:
    hints = typing.get_type_hints(cls)
    if _is_typed_dict(cls):
        optional = cls.__optional_keys__
        return [f"  {key}{'?' if key in optional else ''}: {_ts_type(tp, nested)};" for key, tp in hints.items()]
    lines = []
    for f in dataclasses.fields(cls):
        if _is_platform_slot(hints[f.name]):  # JobInfo.details: a key per registered platform, in place
            lines += [f"  {key}: {_ts_type(kind, nested)} | null;" for key, kind in PLATFORM_DETAILS.items()]
            continue
        lines.append(f"  {json_key(f)}: {_ts_type(hints[f.name], nested)};")
    return lines


def _is_platform_slot(tp: Any) -> bool:
    return PlatformDetails in typing.get_args(tp)


def _ts_union(cls: type[enum.Enum]) -> list[str]:
    """``export type Name = 'a' | 'b';`` (one member a line when that is long)."""
    values = [_ts_string(str(member.value)) for member in cls]
    line = f"export type {cls.__name__} = {' | '.join(values)};"
    if len(line) <= 110:
        return [*_ts_doc(cls), line]
    return [*_ts_doc(cls), f"export type {cls.__name__} =", *(f"  | {v}" for v in values[:-1]), f"  | {values[-1]};"]


def _ts_interface_name(cls: type[Any]) -> str:
    if issubclass(cls, Event):
        base = cls.__name__.removesuffix("Event")
        return f"{base}Event"
    return _name(cls)


def _ts_doc(cls: type[Any]) -> list[str]:
    doc = cls.__doc__ or ""
    if not doc or doc.startswith(cls.__name__ + "(") or doc == dict.__doc__:  # dataclass's signature, dict's doc
        return []
    text = " ".join(doc.split()).replace("``", "`")
    text = re.sub(r":(?:class|func|meth|data):`~?([^`]+)`", r"\1", text)
    return [f"/** {text} */"]


def typescript(extra: Sequence[type[Any]] = ()) -> str:
    """The TypeScript declarations for every event and the ``extra`` documents (:func:`typescript_extra`)."""
    out: list[str] = [
        GENERATED_HEADER.rstrip("\n"),
        "// Source: remote_debug/laptop/wire/events.py (the attach event stream)"
        + "".join(f",\n//   {c.__module__}.{c.__name__}" for c in extra)
        + ".",
        "/* eslint-disable */",
        "",
        f"export const EVENTS_VERSION = {EVENTS_VERSION};",
        "",
        "/** The VS Code configuration names, as remote_debug.laptop.ide.vscode_launch writes them. */",
        f"export const CONFIG_NAME_PREFIX_TEMPLATE = {_ts_string(CONFIG_NAME_PREFIX_TEMPLATE)};",
        f"export const CONFIG_NAME_TEMPLATE = {_ts_string(CONFIG_NAME_TEMPLATE)};",
        f"export const COMPOUND_NAME_TEMPLATE = {_ts_string(COMPOUND_NAME_TEMPLATE)};",
        "",
        "function fill(template: string, values: Record<string, string | number>): string {",
        "  return template.replace(/\\{(\\w+)\\}/g, (whole: string, key: string) =>"
        " (key in values ? String(values[key]) : whole));",
        "}",
        "",
        "export function formatConfigName(job: string, rank: number, node: string): string {",
        "  return fill(CONFIG_NAME_TEMPLATE, { job, rank, node });",
        "}",
        "",
        "export function formatCompoundName(job: string): string {",
        "  return fill(COMPOUND_NAME_TEMPLATE, { job });",
        "}",
        "",
        "export function formatConfigNamePrefix(job: string): string {",
        "  return fill(CONFIG_NAME_PREFIX_TEMPLATE, { job });",
        "}",
        "",
        "/** A node's ssh Host alias, as remote_debug.laptop.connection.ssh_config writes it. */",
        f"export const SSH_ALIAS_TEMPLATE = {_ts_string(documents.SSH_ALIAS_TEMPLATE)};",
        "",
        "export function formatSshAlias(job: string, node: string): string {",
        "  return fill(SSH_ALIAS_TEMPLATE, { job, node });",
        "}",
        "",
    ]
    nested: dict[str, type[Any]] = {}
    blocks: list[str] = []
    for cls in EVENT_TYPES:
        lines = [*_ts_doc(cls), f"export interface {_ts_interface_name(cls)} {{"]
        lines += [f"  event: {_ts_string(cls.name)};", "  v: number;"]
        if any(json_key(f) == TEXT_KEY for f in dataclasses.fields(cls)):
            raise TypeError(f"{cls.__name__}: a field may not be called {TEXT_KEY!r}: that key is the human line")
        # the CLI's human line (laptop/wire/event_text.py); an older CLI sends none
        lines += [f"  {TEXT_KEY}?: string;"]
        lines += _ts_fields(cls, nested)
        lines.append("}")
        blocks.append("\n".join(lines))
    for cls in extra:
        lines = [*_ts_doc(cls), f"export interface {_name(cls)} {{", *_ts_fields(cls, nested), "}"]
        blocks.append("\n".join(lines))
    done: set[str] = set()
    enum_blocks: dict[str, str] = {}
    nested_blocks: list[str] = []
    while len(done) < len(nested):
        for key, cls in sorted(nested.items()):
            if key in done:
                continue
            done.add(key)
            if issubclass(cls, enum.Enum):
                enum_blocks[key] = "\n".join(_ts_union(cls))
                continue
            lines = [*_ts_doc(cls), f"export interface {key} {{", *_ts_fields(cls, nested), "}"]
            nested_blocks.append("\n".join(lines))
    interfaces = {_ts_interface_name(cls) for cls in EVENT_TYPES} | {_name(cls) for cls in extra}
    clash = sorted(interfaces & set(nested))
    if clash:
        raise TypeError(f"TypeScript names used twice: {clash}")
    if enum_blocks:
        out.append(
            "// The closed sets of values (Python StrEnums).  A newer CLI may send a value not listed here: the\n"
            "// parsers in ../events.ts keep it as is, and it compares equal to none of these.\n"
        )
    out.append("\n\n".join([enum_blocks[key] for key in sorted(enum_blocks)] + nested_blocks + blocks))
    out.append("")
    out.append("export type AttachEvent =")
    out += [f"  | {_ts_interface_name(cls)}" for cls in EVENT_TYPES]
    out[-1] += ";"
    out.append("")
    out.append("export type AttachEventName = AttachEvent['event'];")
    out.append("")
    out.append("export const EVENT_NAMES: readonly AttachEventName[] = [")
    out += [f"  {_ts_string(cls.name)}," for cls in EVENT_TYPES]
    out.append("];")
    out.append("")
    return "\n".join(out)


def _ts_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def typescript_extra() -> list[type[Any]]:
    """The documents besides the events: JobInfo, :data:`documents.DOCUMENT_TYPES`, and adopt's (defined where
    adopt builds them: the wire package may not import those modules)."""
    from remote_debug.laptop.adopt.candidates import Candidate
    from remote_debug.laptop.adopt.local_job import AdoptOutcome
    from remote_debug.laptop.core.jobinfo import JobInfo

    return [JobInfo, *documents.DOCUMENT_TYPES, Candidate, AdoptOutcome]  # AdoptedRank: nested


def main(argv: Sequence[str] | None = None) -> int:
    """Print the TypeScript; ``--out FILE``: write it there (atomically, only when it changed), as the
    extension's ``npm run generate`` does."""
    args = list(sys.argv[1:] if argv is None else argv)
    out: str | None = None
    if len(args) == 2 and args[0] == "--out":
        out = args[1]
    elif args:
        print("usage: python tools/generate_wire.py [--out FILE]", file=sys.stderr)
        return 2
    text = typescript(typescript_extra())
    if out is None:
        sys.stdout.write(text)
        return 0
    target = Path(out)
    if target.is_file() and target.read_text(encoding="utf-8") == text:
        return 0
    atomic_write_text(target, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
