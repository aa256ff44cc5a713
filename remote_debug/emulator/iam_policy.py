"""IAM's evaluation of identity-based policies, for the emulator's ``--policy`` mode and the tests.

``evaluate(policies, action, resource, context)`` decides as IAM does for one principal's identity
policies (no SCPs, boundaries, session or resource policies): an explicit Deny wins, else an Allow,
else the implicit deny.  A statement applies when its ``Action``/``NotAction``, ``Resource``/
``NotResource`` and every ``Condition`` match the request.

Why our own: moto's access control checks StringEquals only, treats a failed condition of an Allow
as an explicit deny and knows no policy variables, and no maintained evaluator is on PyPI.  What this
one implements (what ``templates/iam`` and AWS's examples use), as the IAM User Guide documents it:

* wildcards ``*`` and ``?``; actions case-insensitively, resources per ARN segment, case-sensitively;
* policy variables ``${aws:userid}`` etc. (with ``${key, 'default'}``, ``${*}``, ``${?}``, ``${$}``) in
  ``Resource`` and condition values; a variable without a value makes its value match nothing;
* String*, Arn*, Bool, Null and Numeric* operators, ``...IfExists``, ``ForAllValues:``/``ForAnyValue:``;
  condition keys case-insensitively; several values of one key OR, several keys and operators AND;
  a missing key makes a condition false, except the negated operators, ``IfExists``,
  ``ForAllValues:`` and ``Null``.

Anything else (Date*, IpAddress, Binary) raises :class:`PolicyError` rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

ContextValue = str | Sequence[str]
Context = Mapping[str, ContextValue]

_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_SPECIAL = {"*": "*", "?": "?", "$": "$"}  # ${*} is a literal '*' (not a wildcard), and so on
_STRING_OPS = {
    "StringEquals",
    "StringNotEquals",
    "StringEqualsIgnoreCase",
    "StringNotEqualsIgnoreCase",
    "StringLike",
    "StringNotLike",
}
_ARN_OPS = {"ArnEquals", "ArnLike", "ArnNotEquals", "ArnNotLike"}
_NUMERIC_OPS = {
    "NumericEquals",
    "NumericNotEquals",
    "NumericLessThan",
    "NumericLessThanEquals",
    "NumericGreaterThan",
    "NumericGreaterThanEquals",
}
_NEGATED = {
    "StringNotEquals",
    "StringNotEqualsIgnoreCase",
    "StringNotLike",
    "ArnNotEquals",
    "ArnNotLike",
    "NumericNotEquals",
}


class PolicyError(ValueError):
    """A policy this evaluator cannot judge (malformed, or an operator it does not implement)."""


class Decision(str, Enum):
    ALLOWED = "allowed"
    IMPLICIT_DENY = "implicitDeny"
    EXPLICIT_DENY = "explicitDeny"


@dataclass(frozen=True)
class Result:
    decision: Decision
    missing: tuple[str, ...]  # condition keys a matching statement needed and the context lacked
    statement: str = ""  # the Sid (or index) of the statement that decided; "" for the implicit deny

    @property
    def allowed(self) -> bool:
        return self.decision == Decision.ALLOWED


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _values(context: Mapping[str, list[str]], key: str) -> list[str] | None:
    return context.get(key.lower())


def normalize(context: Context) -> dict[str, list[str]]:
    """Condition keys are case-insensitive; a value is one string or a list of them."""
    return {k.lower(): [v] if isinstance(v, str) else [str(x) for x in v] for k, v in context.items()}


def _substitute(text: str, context: Mapping[str, list[str]], *, like: bool) -> str | None:
    """``text`` with its policy variables replaced: a regex when ``like`` (wildcards active in the
    policy's own text, never in a variable's value), else the plain string.  None: a variable has no
    value (and no default), so the value can match nothing."""
    out: list[str] = []
    position = 0

    def literal(chunk: str) -> str:
        if not like:
            return chunk
        return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in chunk)

    for match in _VARIABLE.finditer(text):
        out.append(literal(text[position : match.start()]))
        position = match.end()
        name, _, default = match.group(1).partition(",")
        name = name.strip()
        if name in _SPECIAL:
            value: str | None = _SPECIAL[name]
        else:
            found = _values(context, name)
            value = found[0] if found else None
            if value is None and default.strip():
                value = default.strip().strip("'")
        if value is None:
            return None
        out.append(re.escape(value) if like else value)
    out.append(literal(text[position:]))
    return "".join(out)


def _like(pattern: str, value: str, context: Mapping[str, list[str]], *, case: bool = True) -> bool:
    regex = _substitute(pattern, context, like=True)
    return regex is not None and re.fullmatch(regex, value, 0 if case else re.IGNORECASE | re.DOTALL) is not None


def _arn_like(pattern: str, value: str, context: Mapping[str, list[str]]) -> bool:
    """ARNs compare segment by segment (arn:partition:service:region:account:resource): a wildcard does
    not run from one segment into the next.  Something that is not an ARN compares as a whole."""
    if pattern == "*":
        return True
    parts, values = _arn_segments(pattern), value.split(":", 5)
    if len(parts) != 6 or len(values) != 6:
        return _like(pattern, value, context)
    return all(_like(p, v, context) for p, v in zip(parts, values, strict=True))


def _arn_segments(pattern: str) -> list[str]:
    """``pattern`` split at its first five colons, except those inside a ``${...}`` variable."""
    parts: list[str] = []
    current, depth = "", 0
    for i, char in enumerate(pattern):
        if char == "{" and pattern[i - 1 : i] == "$":
            depth += 1
        elif char == "}" and depth:
            depth -= 1
        if char == ":" and not depth and len(parts) < 5:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise PolicyError(f"not a number in a Numeric condition: {text!r}") from None


def _match_one(base: str, value: str, wanted: list[str], context: Mapping[str, list[str]]) -> bool:
    """Whether one request value satisfies ``base`` (without IfExists/set prefix) against the policy's
    values (any of them; for a negated operator: none of them matches the positive form)."""
    positive = base.replace("Not", "", 1) if base in _NEGATED else base
    if positive in ("StringEquals", "ArnEquals"):
        hit = any(_substitute(w, context, like=False) == value for w in wanted)
    elif positive == "StringEqualsIgnoreCase":
        hit = any((_substitute(w, context, like=False) or "\0").lower() == value.lower() for w in wanted)
    elif positive == "StringLike":
        hit = any(_like(w, value, context) for w in wanted)
    elif positive == "ArnLike":
        hit = any(_arn_like(w, value, context) for w in wanted)
    elif positive == "Bool":
        hit = any(w.lower() == value.lower() for w in wanted)
    elif positive == "NumericEquals":
        hit = any(_number(value) == _number(w) for w in wanted)
    elif positive.startswith("Numeric"):
        compare = {
            "NumericLessThan": float.__lt__,
            "NumericLessThanEquals": float.__le__,
            "NumericGreaterThan": float.__gt__,
            "NumericGreaterThanEquals": float.__ge__,
        }[positive]
        hit = any(compare(_number(value), _number(w)) for w in wanted)
    else:
        raise PolicyError(f"unsupported condition operator {base}")
    return not hit if base in _NEGATED else hit


def _condition(operator: str, key: str, wanted_raw: Any, context: Mapping[str, list[str]], missing: set[str]) -> bool:
    wanted = [str(w).lower() if isinstance(w, bool) else str(w) for w in _list(wanted_raw)]
    qualifier, _, base = operator.rpartition(":")
    if qualifier not in ("", "ForAllValues", "ForAnyValue"):
        raise PolicyError(f"unsupported condition operator {operator}")
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    values = _values(context, key)
    if base == "Null":
        absent = not values
        return any((w.lower() == "true") == absent for w in wanted)
    if base not in _STRING_OPS | _ARN_OPS | _NUMERIC_OPS | {"Bool"}:
        raise PolicyError(f"unsupported condition operator {operator}")
    if not values:
        if qualifier == "ForAllValues":
            return True  # vacuously: no value fails
        if if_exists:
            return True
        if base in _NEGATED:
            return True  # "the key is not there" satisfies "is not equal"
        missing.add(key)
        return False
    results = [_match_one(base, v, wanted, context) for v in values]
    if qualifier == "ForAllValues":
        return all(results)
    if qualifier == "ForAnyValue":
        return any(results)
    return all(results) if base in _NEGATED else any(results)


def _statement_applies(
    statement: Mapping[str, Any], action: str, resource: str, context: Mapping[str, list[str]], missing: set[str]
) -> bool:
    if ("Action" in statement) == ("NotAction" in statement):
        raise PolicyError(f"statement {statement.get('Sid', '?')}: exactly one of Action and NotAction")
    actions = _list(statement.get("Action", statement.get("NotAction")))
    named = any(_like(a, action, {}, case=False) for a in actions)
    if named != ("Action" in statement):
        return False
    if ("Resource" in statement) == ("NotResource" in statement):
        raise PolicyError(f"statement {statement.get('Sid', '?')}: exactly one of Resource and NotResource")
    resources = _list(statement.get("Resource", statement.get("NotResource")))
    covered = any(_arn_like(r, resource, context) for r in resources)
    if covered != ("Resource" in statement):
        return False
    conditions = statement.get("Condition") or {}
    if not isinstance(conditions, Mapping):
        raise PolicyError(f"statement {statement.get('Sid', '?')}: Condition is not an object")
    needed: set[str] = set()
    ok = all(
        _condition(op, key, wanted, context, needed) for op, keys in conditions.items() for key, wanted in keys.items()
    )
    missing.update(needed)
    return ok


def statements(policies: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for policy in policies:
        if "Statement" not in policy:
            raise PolicyError("a policy document needs a Statement")
        out += _list(policy["Statement"])
    return out


def evaluate(policies: Iterable[Mapping[str, Any]], action: str, resource: str, context: Context) -> Result:
    """The decision for ``action`` on ``resource`` with the request's ``context`` values."""
    values = normalize(context)
    missing: set[str] = set()
    allowed_by = ""
    for index, statement in enumerate(statements(policies)):
        effect = statement.get("Effect")
        if effect not in ("Allow", "Deny"):
            raise PolicyError(f"statement {statement.get('Sid', index)}: Effect must be Allow or Deny")
        if not _statement_applies(statement, action, resource, values, missing):
            continue
        sid = str(statement.get("Sid", index))
        if effect == "Deny":
            return Result(Decision.EXPLICIT_DENY, tuple(sorted(missing)), sid)
        allowed_by = allowed_by or sid
    if allowed_by:
        return Result(Decision.ALLOWED, tuple(sorted(missing)), allowed_by)
    return Result(Decision.IMPLICIT_DENY, tuple(sorted(missing)))
