"""What AWS checks on its servers and botocore does not: string patterns and lengths, value ranges.

botocore's client-side ``ParamValidator`` checks types, required members and minimum lengths only;
the service model also gives each shape a ``pattern`` (a Java regular expression) and ``max``
lengths, which SageMaker, SSM and CloudWatch Logs enforce on the server (Coral's validation) and
answer with a ``ValidationException``.  moto checks none of them, so a request AWS refuses - a
newline in a ``ContainerEntrypoint`` item, whose pattern is ``.*`` - went through every stand-in.
This module holds those requests to the same rules, and words the refusal as AWS does::

    1 validation error detected: Value '[/bin/sh, -c, ...]' at 'algorithmSpecification.containerEntrypoint'
    failed to satisfy constraint: Member must satisfy constraint: [Member must satisfy regular expression
    pattern: .*]

How a Java pattern is matched here, as the service matches it:

* against the whole value (``Matcher.matches``), never a prefix or a substring;
* ``.`` matches anything but a line terminator (``\\n``, ``\\r``, U+0085, U+2028, U+2029): Java's
  default, which Python's ``.`` (all but ``\\n``) is kinder than;
* ``\\w``, ``\\d``, ``\\s`` are ASCII, as in Java without ``UNICODE_CHARACTER_CLASS``;
* ``\\p{L}`` and friends are Unicode properties (the ``regex`` package; the stdlib has none), and a
  surrogate-pair range (``\\uD800\\uDC00-\\uDBFF\\uDFFF``) is the supplementary planes it spells in UTF-16.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import regex
from botocore.model import ListShape, MapShape, Shape, StructureShape

# Java's line terminators: what its "." never matches (Pattern without DOTALL or UNIX_LINES).
_JAVA_DOT = "[^\\n\\r\\u0085\\u2028\\u2029]"
_SURROGATE_RANGE = "\\uD800\\uDC00-\\uDBFF\\uDFFF"  # UTF-16 spelling of U+10000..U+10FFFF in a Java class
_SUPPLEMENTARY = "\\U00010000-\\U0010FFFF"
_SHOWN_MAX = 1024  # a value quoted in a message is cut here, as AWS cuts long values
# Java's \\w, \\d, \\s (and \\W, \\D, \\S) are ASCII; Python's (and regex's) are Unicode, and its ASCII flag
# would make \\p{L} ASCII too.  So each is spelled out as the inside of a class (a negation as the complement).
_ASCII_CLASSES = {
    "w": "a-zA-Z0-9_",
    "W": "\\x00-\\x2F\\x3A-\\x40\\x5B-\\x5E\\x60\\x7B-\\U0010FFFF",
    "d": "0-9",
    "D": "\\x00-\\x2F\\x3A-\\U0010FFFF",
    "s": " \\t\\n\\x0B\\f\\r",
    "S": "\\x00-\\x08\\x0E-\\x1F\\x21-\\U0010FFFF",
}


@functools.lru_cache(maxsize=1024)
def java_pattern(pattern: str) -> regex.Pattern[str]:
    """``pattern`` (Java syntax, from a botocore model) compiled to match as the service matches it."""
    return regex.compile(_translate(pattern.replace(_SURROGATE_RANGE, _SUPPLEMENTARY)), regex.V0)


def _translate(pattern: str) -> str:
    """Java's meaning of ``.`` and of ``\\w``/``\\d``/``\\s`` and their negations, spelled for Python."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            letter = pattern[i + 1]
            end = i + 2
            if letter in "pP" and pattern[end : end + 1] == "{":
                end = pattern.index("}", end) + 1
            ascii_class = _ASCII_CLASSES.get(letter)
            if ascii_class is not None:
                out.append(ascii_class if in_class else f"[{ascii_class}]")
            else:
                out.append(pattern[i:end])
            i = end
            # in Java a "-" right after a class escape inside [...] is a literal ([\w-_], [\w-\/.])
            if in_class and letter in "wWdDsSpP" and pattern[i : i + 1] == "-" and pattern[i + 1 : i + 2] != "]":
                out.append("\\-")
                i += 1
            continue
        if in_class:
            if ch == "]":
                in_class = False
            elif ch == "[":  # Java allows nested classes (unions); [\w-_] and friends stay literal
                out.append("\\[")
                i += 1
                continue
        elif ch == "[":
            in_class = True
            out.append(ch)
            # a "]" or "^]" right after "[" is a literal, as in both dialects
            if pattern[i + 1 : i + 2] == "^":
                out.append("^")
                i += 1
            if pattern[i + 1 : i + 2] == "]":
                out.append("\\]")
                i += 1
            i += 1
            continue
        elif ch == ".":
            out.append(_JAVA_DOT)
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _lower_camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _show(value: Any) -> str:
    """A value as Coral prints it: strings bare, lists ``[a, b]``, maps ``{k=v}``, null ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_show(k)}={_show(v)}" for k, v in value.items()) + "}"
    return str(value)


def _quoted(value: Any) -> str:
    shown = _show(value)
    if len(shown) > _SHOWN_MAX:
        shown = shown[:_SHOWN_MAX] + "..."
    return "null" if value is None else f"'{shown}'"


def _own_violations(shape: Shape, value: Any) -> list[str]:
    """The constraints of ``shape`` itself that ``value`` breaks, as "Member must ..." phrases."""
    meta = shape.metadata
    found: list[str] = []
    if isinstance(value, (str, list, dict)) and not isinstance(value, bool):
        size = len(value)
        if "max" in meta and size > meta["max"]:
            found.append(f"Member must have length less than or equal to {meta['max']}")
        if "min" in meta and size < meta["min"]:
            found.append(f"Member must have length greater than or equal to {meta['min']}")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "max" in meta and value > meta["max"]:
            found.append(f"Member must have value less than or equal to {meta['max']}")
        if "min" in meta and value < meta["min"]:
            found.append(f"Member must have value greater than or equal to {meta['min']}")
    if isinstance(value, str) and "pattern" in meta and java_pattern(meta["pattern"]).fullmatch(value) is None:
        found.append(f"Member must satisfy regular expression pattern: {meta['pattern']}")
    if isinstance(value, str) and meta.get("enum") and value not in meta["enum"]:
        found.append(f"Member must satisfy enum value set: [{', '.join(meta['enum'])}]")
    return found


def _collect(shape: Shape, value: Any, path: str, errors: list[str]) -> None:
    for phrase in _own_violations(shape, value):
        errors.append(f"Value {_quoted(value)} at '{path}' failed to satisfy constraint: {phrase}")
    if isinstance(shape, StructureShape) and isinstance(value, Mapping):
        for name, member in shape.members.items():
            if name in value and value[name] is not None:
                _collect(member, value[name], f"{path}.{_lower_camel(name)}" if path else _lower_camel(name), errors)
    elif isinstance(shape, ListShape) and isinstance(value, list):
        member = shape.member
        if isinstance(member, (StructureShape, ListShape, MapShape)):
            for index, item in enumerate(value, start=1):
                _collect(member, item, f"{path}.{index}.member", errors)
        else:  # a list of scalars: one error naming the list, its members' constraints in brackets
            phrases = _unique(p for item in value for p in _own_violations(member, item))
            if phrases:
                errors.append(
                    f"Value {_quoted(value)} at '{path}' failed to satisfy constraint: "
                    f"Member must satisfy constraint: [{', '.join(phrases)}]"
                )
    elif isinstance(shape, MapShape) and isinstance(value, Mapping):
        for part, subshape, items in (("Map keys", shape.key, list(value)), ("Map value", shape.value, value.values())):
            phrases = _unique(p for item in items for p in _own_violations(subshape, item))
            if phrases:
                errors.append(
                    f"Value {_quoted(value)} at '{path}' failed to satisfy constraint: "
                    f"{part} must satisfy constraint: [{', '.join(phrases)}]"
                )
        if isinstance(shape.value, (StructureShape, ListShape, MapShape)):
            for key, item in value.items():
                _collect(shape.value, item, f"{path}.{key}", errors)


def _unique(phrases: Any) -> list[str]:
    return list(dict.fromkeys(phrases))


def constraint_errors(shape: Shape | None, params: Mapping[str, Any]) -> list[str]:
    """Each server-side constraint ``params`` breaks, one AWS-worded sentence per broken member."""
    if shape is None:
        return []
    errors: list[str] = []
    _collect(shape, params, "", errors)
    return errors


def validation_message(errors: list[str]) -> str:
    """The ``ValidationException`` message AWS gives for ``errors`` (non-empty)."""
    count = len(errors)
    return f"{count} validation error{'' if count == 1 else 's'} detected: " + "; ".join(errors)
