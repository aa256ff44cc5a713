"""RankGroup's decisions, message by message, with recording sessions in place of the forwards' taps (the
real taps and ranks: test_all_stop_e2e.py)."""

from __future__ import annotations

from typing import Any, cast

from remote_debug.laptop.attach import rank_group
from remote_debug.laptop.attach.rank_group import RankGroup
from remote_debug.laptop.connection.dap_tap import GROUP_MARK, DapTap
from remote_debug.laptop.wire.documents import GroupAction, RankPhase
from tests.helpers.event_log import EventLog


class Session:
    """What a DapTap does for the group: requests to the rank, events to the IDE (recorded)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []
        self.told: list[tuple[str, Any]] = []
        self.callbacks: list[Any] = []

    def request(self, command: str, arguments: Any = None, on_response: Any = None) -> int:
        self.requests.append((command, arguments))
        if on_response is not None:
            self.callbacks.append(on_response)
        return len(self.requests)

    def tell_ide(self, event: str, body: Any = None) -> None:
        self.told.append((event, body))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _group(ranks: int, *, all_stop: bool = True) -> tuple[RankGroup, list[Session], EventLog, Clock]:
    log, clock = EventLog(), Clock()
    group = RankGroup(log.append, all_stop=all_stop, clock=clock)
    sessions = [Session() for _ in range(ranks)]
    for rank, session in enumerate(sessions):
        hooks = group.hooks(rank)
        hooks.opened(cast(DapTap, session))
        hooks.from_ide(cast(DapTap, session), {"type": "request", "seq": 9, "command": "configurationDone"})
    return group, sessions, log, clock


def _stopped(reason: str, thread: int = 1) -> dict[str, Any]:
    return {"type": "event", "seq": 5, "event": "stopped", "body": {"reason": reason, "threadId": thread}}


def _from_rank(group: RankGroup, sessions: list[Session], rank: int, message: dict[str, Any]) -> Any:
    return group.hooks(rank).from_rank(cast(DapTap, sessions[rank]), message)


def _from_ide(group: RankGroup, sessions: list[Session], rank: int, command: str, **arguments: Any) -> None:
    message = {"type": "request", "seq": 20, "command": command, "arguments": arguments}
    group.hooks(rank).from_ide(cast(DapTap, sessions[rank]), message)


def test_a_breakpoint_pauses_the_others_and_their_stops_say_why() -> None:
    group, sessions, log, clock = _group(3)
    shown = _from_rank(group, sessions, 1, _stopped("breakpoint"))
    assert shown["body"] == {"reason": "breakpoint", "threadId": 1}  # the rank's own stop: as pydevd said it
    assert sessions[0].requests == [("pause", {"threadId": "*"})] == sessions[2].requests
    assert sessions[1].requests == []
    assert [e for e in log if e["event"] == "all-stop"] == [
        {"event": "all-stop", "v": 1, "rank": 1, "reason": "breakpoint", "pausing": [0, 2]}
    ]
    clock.now += 0.25
    paused = _from_rank(group, sessions, 0, _stopped("pause", thread=7))
    assert paused["body"]["description"] == "All-stop: rank 1"
    assert paused["body"]["preserveFocusHint"] is True and paused["body"][GROUP_MARK] is True
    assert not [e for e in log if e["event"] == "all-paused"]  # rank 2 has not stopped yet
    _from_rank(group, sessions, 2, _stopped("pause"))
    [all_paused] = [e for e in log if e["event"] == "all-paused"]
    assert (all_paused["rank"], all_paused["ranks"], all_paused["seconds"]) == (1, [0, 1, 2], 0.25)
    assert [(s.rank, s.phase, s.by_group) for s in group.status()] == [
        (0, RankPhase.STOPPED, True),
        (1, RankPhase.STOPPED, False),
        (2, RankPhase.STOPPED, True),
    ]


def test_one_continue_continues_every_rank_and_the_next_stop_is_a_new_one() -> None:
    group, sessions, log, _ = _group(3)
    _from_rank(group, sessions, 0, _stopped("breakpoint"))
    _from_rank(group, sessions, 1, _stopped("pause", thread=4))
    _from_rank(group, sessions, 2, _stopped("pause", thread=6))
    _from_ide(group, sessions, 0, "continue", threadId=1)
    assert sessions[1].requests[-1] == ("continue", {"threadId": 4})
    assert sessions[2].requests[-1] == ("continue", {"threadId": 6})
    assert sessions[0].requests == []  # the IDE's own continue goes to rank 0 as it is
    assert log[-1]["event"] == "group-action" and log[-1]["ranks"] == [1, 2] and log[-1]["origin"] == "rank 0"
    assert {s.phase for s in group.status()} == {RankPhase.RUNNING}
    _from_rank(group, sessions, 2, _stopped("exception"))
    assert log[-1]["event"] == "all-stop" and log[-1]["rank"] == 2 and log[-1]["pausing"] == [0, 1]


def test_non_stop_pauses_nobody_and_continues_only_its_rank() -> None:
    group, sessions, log, _ = _group(2, all_stop=False)
    _from_rank(group, sessions, 0, _stopped("breakpoint"))
    _from_ide(group, sessions, 0, "continue", threadId=1)
    assert sessions[1].requests == [] and not [e for e in log if e["event"] in ("all-stop", "group-action")]


def test_a_step_steps_only_its_rank_and_its_end_pauses_nobody_new() -> None:
    group, sessions, log, _ = _group(2)
    _from_rank(group, sessions, 0, _stopped("breakpoint"))
    _from_rank(group, sessions, 1, _stopped("pause"))
    _from_ide(group, sessions, 0, "next", threadId=1)
    shown = _from_rank(group, sessions, 0, _stopped("step"))
    assert GROUP_MARK not in shown["body"]
    assert sessions[1].requests == [("pause", {"threadId": "*"})]  # only the first pause
    assert len([e for e in log if e["event"] == "all-stop"]) == 1


def test_step_over_all_steps_each_main_thread_and_reports_the_ones_that_wait() -> None:
    group, sessions, log, clock = _group(2, all_stop=False)
    assert group.act(GroupAction.PAUSE) == [0, 1]
    for rank in (0, 1):
        _from_rank(group, sessions, rank, _stopped("pause", thread=3))
    assert group.act(GroupAction.STEP) == [0, 1]
    for session in sessions:  # the group asks for the threads, then steps the main one
        assert session.requests[-1] == ("threads", {})
        session.callbacks[-1]({"body": {"threads": [{"id": 3, "name": "pin"}, {"id": 8, "name": "MainThread"}]}})
        assert session.requests[-1] == ("next", {"threadId": 8})
    stepped = _from_rank(group, sessions, 0, _stopped("step", thread=8))
    assert stepped["body"]["description"] == "Step Over All"
    clock.now += rank_group.WAIT_SECONDS
    group.report_waiting()
    [waiting] = [e for e in log if e["event"] == "rank-waiting"]
    assert (waiting["rank"], waiting["action"]) == (1, "step")
    assert sessions[1].told and "native code" in sessions[1].told[-1][1]["output"]
    group.report_waiting()  # said once
    assert len([e for e in log if e["event"] == "rank-waiting"]) == 1


def test_a_pause_overtaken_by_continue_is_not_shown_as_a_stop() -> None:
    group, sessions, log, clock = _group(2)
    _from_rank(group, sessions, 0, _stopped("breakpoint"))  # rank 1: pausing, inside a collective
    _from_ide(group, sessions, 0, "continue", threadId=1)
    assert sessions[1].requests[-1] == ("continue", {"threadId": "*"})
    clock.now += 0.05  # the collective returned before rank 1 read our continue: the old pause lands
    assert _from_rank(group, sessions, 1, _stopped("pause")) is None
    assert len([e for e in log if e["event"] == "all-stop"]) == 1
    assert {s.phase for s in group.status()} == {RankPhase.RUNNING}


def test_detach_all_ends_every_ide_session_and_a_closed_session_leaves_the_group() -> None:
    group, sessions, _, _ = _group(2)
    assert group.act(GroupAction.DETACH) == [0, 1]
    assert all(s.told == [("terminated", {})] for s in sessions)
    group.hooks(0).closed(cast(DapTap, sessions[0]))
    assert [s.rank for s in group.status()] == [1]


def test_a_rank_that_attaches_while_the_others_are_stopped_is_paused_too() -> None:
    group, sessions, _, _ = _group(1)
    _from_rank(group, sessions, 0, _stopped("breakpoint"))
    late = Session()
    hooks = group.hooks(1)
    hooks.opened(cast(DapTap, late))
    assert late.requests == []  # not before its IDE has configured it
    hooks.from_ide(cast(DapTap, late), {"type": "request", "seq": 3, "command": "configurationDone"})
    assert late.requests == [("pause", {"threadId": "*"})]


def test_nothing_is_sent_into_a_session_after_its_ide_said_goodbye() -> None:
    """A pause read by pydevd after the IDE's disconnect would leave the rank suspended for the next debugger."""
    group, sessions, _, _ = _group(2)
    _from_ide(group, sessions, 0, "disconnect")
    _from_rank(group, sessions, 1, _stopped("breakpoint"))
    assert sessions[0].requests == []
    assert [s.rank for s in group.status()] == [1]


def test_a_rank_attaching_after_the_stopped_ones_left_is_not_paused_for_their_stop() -> None:
    group, sessions, _, _ = _group(1)
    _from_rank(group, sessions, 0, _stopped("breakpoint"))
    _from_ide(group, sessions, 0, "disconnect")
    late = Session()
    hooks = group.hooks(1)
    hooks.opened(cast(DapTap, late))
    hooks.from_ide(cast(DapTap, late), {"type": "request", "seq": 3, "command": "configurationDone"})
    assert late.requests == []
