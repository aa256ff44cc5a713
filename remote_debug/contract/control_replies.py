"""The replies of a rank's control channel, defined once: ``container/rank/control.py`` builds them (``to_json``),
``laptop/connection/rank_control.py`` reads them (``read``).  The requests are ``spec.ControlOp``.

One JSON line per reply: ``{"ok": true, **fields}``, or :class:`Refused` (``{"ok": false, "error": ...}``).  A
reader is tolerant of what it does not know (a newer rank may add fields) but refuses a reply that lacks a field it
needs or has one of the wrong kind (ValueError), so a rank of another version fails with one clear line.

Stdlib only: the rank imports this inside the training process.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from remote_debug.contract.spec import StrEnum


@dataclass(frozen=True, kw_only=True)
class Reply:
    """Base of the ``ok`` replies; ``to_json()`` is the line the rank sends."""

    ok: ClassVar[bool] = True

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, **dataclasses.asdict(self)}


@dataclass(frozen=True, kw_only=True)
class Refused(Reply):
    """The rank said no (not authorised, an unknown op, an op this rank cannot do, a failure)."""

    ok: ClassVar[bool] = False
    error: str


@dataclass(frozen=True, kw_only=True)
class Proof(Reply):
    """The answer to the laptop's ``{"challenge": NONCE}``: ``job_secret.rank_proof``."""

    proof: str


@dataclass(frozen=True, kw_only=True)
class Listening(Reply):
    """``listen``: the rank's debug listener on its node's 127.0.0.1; ``detail``: how pause-safe went."""

    port: int
    detail: str | None = None

    @classmethod
    def read(cls, reply: dict[str, Any]) -> Listening:
        port = reply.get("port")
        if isinstance(port, bool) or not isinstance(port, int):
            raise ValueError(f"'listen' answered without a port number (port: {port!r})")
        return cls(port=port, detail=_detail(reply))


@dataclass(frozen=True, kw_only=True)
class Detail(Reply):
    """``pause-safe`` and ``run-on``: what the rank did, in words (``"pending: ..."``, ``"not waiting"``)."""

    detail: str | None = None

    @classmethod
    def read(cls, reply: dict[str, Any]) -> Detail:
        return cls(detail=_detail(reply))


@dataclass(frozen=True, kw_only=True)
class Frame:
    file: str
    line: int
    function: str


@dataclass(frozen=True, kw_only=True)
class ThreadStack:
    name: str
    frames: list[Frame]  # outermost first, as a traceback prints them
    # a rank held for a post-mortem: the exception line; ``frames`` are then its traceback
    exception: str | None = None
    internal: bool = False  # the debugger's own thread (debugpy's, remote_debug's): only with all_threads


@dataclass(frozen=True, kw_only=True)
class GroupCollectives:
    """One process group's collectives as this rank's PyTorch Flight Recorder saw them (``stacks``).

    Collective sequence ids count each group's collectives the same way on every member, so comparing
    ``last_entered`` across the members names those that never entered the newest one."""

    group: str  # the group's name (Flight Recorder's ``process_group[0]``): the same on every member
    desc: str | None = None  # its description ("default_pg", or what new_group was given)
    ranks: list[int] | None = None  # its members' global ranks (None: not known to this rank)
    last_entered: int = 0  # sequence id of the newest collective this rank entered (0: none yet)
    last_completed: int | None = None  # ... and of the newest it saw complete (None: not known)
    op: str | None = None  # what ``last_entered`` is, e.g. "all_reduce"

    @classmethod
    def read(cls, raw: dict[str, Any]) -> GroupCollectives:
        ranks = raw.get("ranks")
        return cls(
            group=str(raw.get("group", "")),
            desc=None if raw.get("desc") is None else str(raw["desc"]),
            ranks=[int(r) for r in ranks] if isinstance(ranks, list) else None,
            last_entered=int(raw.get("last_entered") or 0),
            last_completed=None if raw.get("last_completed") is None else int(raw["last_completed"]),
            op=None if raw.get("op") is None else str(raw["op"]),
        )


@dataclass(frozen=True, kw_only=True)
class Stacks(Reply):
    """``stacks``: every thread's Python stack (``sys._current_frames()``), and the rank's pid.

    ``collectives``: each of the rank's process groups as its Flight Recorder saw them, when the job has
    the Flight Recorder on (None: it is off, torch.distributed is not initialised, or an older rank)."""

    pid: int
    threads: list[ThreadStack] = field(default_factory=list)
    collectives: list[GroupCollectives] | None = None

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        if self.collectives is None:  # no Flight Recorder: the reply as it always was
            del data["collectives"]
        return data

    @classmethod
    def read(cls, reply: dict[str, Any]) -> Stacks:
        raw = reply.get("threads", [])
        if not isinstance(raw, list):
            raise ValueError(f"'stacks' answered threads that are not a list: {type(raw).__name__}")
        threads = [
            ThreadStack(
                name=str(t.get("name", "")),
                frames=[
                    Frame(file=str(f.get("file", "")), line=int(f.get("line", 0)), function=str(f.get("function", "")))
                    for f in t.get("frames", [])
                    if isinstance(f, dict)
                ],
                exception=None if t.get("exception") is None else str(t["exception"]),
                internal=t.get("internal") is True,
            )
            for t in raw
            if isinstance(t, dict)
        ]
        pid = reply.get("pid")
        groups = reply.get("collectives")
        collectives = (
            [GroupCollectives.read(g) for g in groups if isinstance(g, dict)] if isinstance(groups, list) else None
        )
        return cls(
            pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else 0,
            threads=threads,
            collectives=collectives,
        )


class ConnectStatus(StrEnum):
    """Where a PyCharm rank's connection out to the IDE stands when ``connect`` answers (it goes on after)."""

    CONNECTING = "connecting"
    ATTACHED = "attached"


@dataclass(frozen=True, kw_only=True)
class Connecting(Reply):
    """``connect``: a PyCharm rank connects out to the IDE now, from a background thread."""

    status: str  # a ConnectStatus; read as sent (a newer rank may know more)
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "status": str(self.status), "detail": self.detail}

    @classmethod
    def read(cls, reply: dict[str, Any]) -> Connecting:
        status = reply.get("status")
        return cls(status="" if status is None else str(status), detail=_detail(reply))


def _detail(reply: dict[str, Any]) -> str | None:
    detail = reply.get("detail")
    return None if detail is None else str(detail)
