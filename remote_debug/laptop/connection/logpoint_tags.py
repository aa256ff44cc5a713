"""Logpoints on every rank, each line tagged with its rank: ``[rank 2] loss=0.31`` in the Debug Console.

A logpoint set in VS Code (or by ``attach --headless --log``) reaches every rank's session: each one's
``setBreakpoints`` passes through the rank's forward (:mod:`dap_tap`).  pydevd prints a hit as an ``output`` event
of category ``stdout``, the same as a line the rank printed (``redirectOutput``), with nothing that tells the two
apart nor which logpoint it was.  So, per session (:class:`LogpointTags`):

* each ``logMessage`` on its way to the rank gets a mark in front: an id between two invisible separators
  (:data:`MARK`), one id per (file, line); pydevd's interpolation leaves it as it is (no braces, no ``%``);
* an ``output`` event that starts with a mark is a logpoint's hit: on its way to the IDE the mark becomes the rank's
  tag (``spec.RANK_OUTPUT_PREFIX``), and the event gets the logpoint's ``source`` and ``line`` (DAP's fields: VS
  Code links the line to the logpoint) and :data:`LOGPOINT_KEY` (how the headless client knows a hit).

Every other message passes unchanged, byte for byte.  What is lost: a logpoint whose expression fails prints
pydevd's error text alone (no mark), as it does without us.
"""

from __future__ import annotations

import threading
from typing import Any

from remote_debug.contract import spec

JsonDict = dict[str, Any]
LOGPOINT_KEY = "remoteDebugLogpoint"  # in an output event's body: the hit of a logpoint (its text is tagged)
MARK = "\u2063"  # INVISIBLE SEPARATOR: around a logpoint's id at the start of its message


class LogpointTags:
    """One debugger session's logpoints (the IDE may send setBreakpoints again for a file at any time)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._lock = threading.Lock()
        self._ids: dict[tuple[str, int], int] = {}  # (file, line) -> its id
        self._where: dict[int, tuple[JsonDict, int]] = {}  # id -> (the IDE's source, line)

    def request(self, message: JsonDict) -> JsonDict | None:
        """The IDE's ``setBreakpoints`` with each logpoint's message marked; None for any other message (it goes
        unchanged)."""
        if message.get("type") != "request" or message.get("command") != "setBreakpoints":
            return None
        arguments = message.get("arguments")
        if not isinstance(arguments, dict) or not isinstance(arguments.get("breakpoints"), list):
            return None
        found = arguments.get("source")
        source: JsonDict = found if isinstance(found, dict) else {}
        key = str(source.get("path") or source.get("name") or source.get("sourceReference") or "")
        marked: list[Any] = []
        changed = False
        for bp in arguments["breakpoints"]:
            text = bp.get("logMessage") if isinstance(bp, dict) else None
            line = bp.get("line") if isinstance(bp, dict) else None
            if not isinstance(text, str) or not text or not isinstance(line, int) or text.startswith(MARK):
                marked.append(bp)
                continue
            with self._lock:
                ident = self._ids.setdefault((key, line), len(self._ids) + 1)
                self._where[ident] = (dict(source), line)
            marked.append({**bp, "logMessage": f"{MARK}{ident}{MARK}{text}"})
            changed = True
        if not changed:
            return None
        return {**message, "arguments": {**arguments, "breakpoints": marked}}

    def output(self, message: JsonDict) -> JsonDict | None:
        """A logpoint's hit as the IDE gets it (tagged, with its source and line); None for any other message."""
        if message.get("type") != "event" or message.get("event") != "output":
            return None
        body = message.get("body")
        if not isinstance(body, dict):
            return None
        text = body.get("output")
        if not isinstance(text, str) or not text.startswith(MARK):
            return None
        ident, sep, rest = text[len(MARK) :].partition(MARK)
        with self._lock:
            where = self._where.get(int(ident)) if sep and ident.isdigit() else None
        if where is None:
            return None
        source, line = where
        tagged = {
            **body,
            "output": spec.RANK_OUTPUT_PREFIX.format(rank=self.rank) + rest,
            "source": source,
            "line": line,
            LOGPOINT_KEY: True,
        }
        return {**message, "body": tagged}
