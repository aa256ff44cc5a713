"""The rank group's adapter for DAP: VS Code's and the headless client's rank sessions, seen in the attach's
forwards (:mod:`~remote_debug.laptop.connection.dap_tap`).  A rank's stop marked by the group reaches the IDE
with the group's reason as the stop's ``description`` (VS Code shows it as the session's state in the Call
Stack) and ``preserveFocusHint``; each rank's logpoint hits get its rank tag (:mod:`logpoint_tags`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remote_debug.laptop.attach.rank_session import IdeSaid
from remote_debug.laptop.connection.dap_tap import GROUP_MARK, DapTap, JsonDict
from remote_debug.laptop.connection.logpoint_tags import LogpointTags

if TYPE_CHECKING:
    from remote_debug.laptop.attach.rank_group import RankGroup

_STEPS = frozenset({"next", "stepIn", "stepOut", "stepBack", "reverseContinue", "goto"})


def marked(message: JsonDict, body: JsonDict, why: str) -> JsonDict:
    """The stop as the IDE shows it: why this rank stopped, and the focus left where it is."""
    marked = {**body, "description": why, "preserveFocusHint": True, GROUP_MARK: True}
    return {**message, "body": marked}


@dataclass(frozen=True)
class DapSession:
    """A DAP session as the group acts in it; equal to another for the same tap."""

    tap: DapTap

    def pause_all(self) -> None:
        self.tap.request("pause", {"threadId": "*"})  # pydevd: every thread of the rank

    def continue_all(self, thread: Any) -> None:
        self.tap.request("continue", {"threadId": thread if thread is not None else "*"})

    def step_main(self, fallback: Any) -> None:
        tap = self.tap

        def step_main(response: JsonDict) -> None:
            # the training loop is the main thread's; the last stop may have been any thread's
            threads = (response.get("body") or {}).get("threads") or []
            main = next((t.get("id") for t in threads if t.get("name") == "MainThread"), fallback)
            tap.request("next", {"threadId": main if main is not None else fallback})

        tap.request("threads", {}, step_main)

    def end(self) -> None:
        # the IDE ends the session as at a debuggee's end: it sends `disconnect`, pydevd resumes the rank
        self.tap.tell_ide("terminated", {})

    def say(self, text: str) -> None:
        self.tap.tell_ide("output", {"category": "console", "output": text})


_IDE_SAID = {"disconnect": IdeSaid.GONE, "terminate": IdeSaid.GONE, "configurationDone": IdeSaid.READY}
_IDE_SAID.update({"continue": IdeSaid.CONTINUED, **dict.fromkeys(_STEPS, IdeSaid.STEPPED)})


class DapHooks:
    """One rank's sessions: the group's part, and its logpoints' rank tags (:mod:`logpoint_tags`)."""

    def __init__(self, group: RankGroup, rank: int) -> None:
        self.group, self.rank = group, rank
        self._logpoints: dict[int, LogpointTags] = {}  # id(session) -> its logpoints, while it is open

    def opened(self, session: DapTap) -> None:
        self._logpoints[id(session)] = LogpointTags(self.rank)
        self.group.session_opened(self.rank, DapSession(session))

    def from_ide(self, session: DapTap, message: JsonDict) -> JsonDict | None:
        said = _IDE_SAID.get(str(message.get("command"))) if message.get("type") == "request" else None
        if said is not None:
            self.group.ide_said(self.rank, DapSession(session), said)
        tags = self._logpoints.get(id(session))
        return tags.request(message) if tags is not None else None

    def from_rank(self, session: DapTap, message: JsonDict) -> JsonDict | None:
        tags = self._logpoints.get(id(session))
        hit = tags.output(message) if tags is not None else None
        return hit if hit is not None else self._from_rank(session, message)

    def _from_rank(self, session: DapTap, message: JsonDict) -> JsonDict | None:
        if message.get("type") != "event":
            return message
        name = message.get("event")
        if name == "continued":
            self.group.rank_running(self.rank, DapSession(session))
        if name != "stopped":
            return message
        body = message.get("body")
        body = body if isinstance(body, dict) else {}
        reason = str(body.get("reason", ""))
        why = self.group.rank_stopped(self.rank, DapSession(session), reason, body.get("threadId"))
        if why is None:
            return None
        return marked(message, body, why) if why else message

    def closed(self, session: DapTap) -> None:
        self._logpoints.pop(id(session), None)
        self.group.session_closed(self.rank, DapSession(session))
