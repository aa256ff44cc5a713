"""Tests read attach events as the JSON lines ``attach --json`` prints (what the VS Code extension reads)."""

from __future__ import annotations

from typing import Any

from remote_debug.laptop.wire import events as ev


def as_json(event: ev.Event | dict[str, Any]) -> dict[str, Any]:
    """An emitted event as its JSON object (a plain dict passes through)."""
    return event.to_json() if isinstance(event, ev.Event) else dict(event)


class EventLog(list[dict[str, Any]]):
    """A list of events as JSON objects; ``append`` is an ``Emit`` (it takes event objects)."""

    def append(self, event: ev.Event | dict[str, Any], /) -> None:
        super().append(as_json(event))
