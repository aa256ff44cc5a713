"""RankGroup with PyCharm's ranks: pydevd's line protocol, message by message, through the group's pydevd adapter
(recording taps in place of the reverse forwards' :class:`PydevdTap`; the real one: test_pycharm_all_stop_e2e.py)."""

from __future__ import annotations

from typing import Any, cast

from remote_debug.laptop.attach.rank_group import RankGroup
from remote_debug.laptop.connection import pydevd_tap as pydevd
from remote_debug.laptop.connection.pydevd_tap import Line, PydevdHooks, PydevdTap
from remote_debug.laptop.ide.pydevd_server import parse_suspend
from remote_debug.laptop.wire.documents import GroupAction, RankPhase
from tests.helpers.event_log import EventLog


class Tap:
    """What a PydevdTap does for the group: commands to the rank, lines to PyCharm's console, close."""

    def __init__(self) -> None:
        self.commands: list[tuple[int, str]] = []
        self.callbacks: list[Any] = []
        self.said: list[str] = []
        self.closed = False

    def request(self, cmd: int, text: str, on_response: Any = None) -> int:
        self.commands.append((cmd, text))
        if on_response is not None:
            self.callbacks.append(on_response)
        return 1_000_000_001 + 2 * len(self.commands)

    def say(self, text: str) -> None:
        self.said.append(text)

    def close(self) -> None:
        self.closed = True


def _suspend(thread: str, stop_reason: int) -> Line:
    text = (
        f'<xml><thread id="{thread}" stop_reason="{stop_reason}" suspend_type="trace">'
        '<frame id="1" name="step" file="/w/train.py" line="12"></frame></thread></xml>'
    )
    return Line(pydevd.CMD_THREAD_SUSPEND, 2, text)


def _run(thread: str) -> Line:
    return Line(pydevd.CMD_THREAD_RUN, 4, f"{thread}\t{pydevd.CMD_THREAD_SUSPEND}")


def _group(ranks: int) -> tuple[RankGroup, list[PydevdHooks], list[Tap], EventLog]:
    log = EventLog()
    group = RankGroup(log.append, all_stop=True)
    hooks = [group.pydevd_hooks(rank) for rank in range(ranks)]
    taps = [Tap() for _ in range(ranks)]
    for hook, tap in zip(hooks, taps, strict=True):
        hook.opened(cast(PydevdTap, tap))
        hook.from_ide(cast(PydevdTap, tap), Line(pydevd.CMD_RUN, 5, ""))  # PyCharm set its breakpoints: ready
    return group, hooks, taps, log


def _from_rank(hooks: list[PydevdHooks], taps: list[Tap], rank: int, line: Line) -> Line | None:
    return hooks[rank].from_rank(cast(PydevdTap, taps[rank]), line)


def test_a_breakpoint_suspends_every_other_rank_and_their_suspensions_say_why() -> None:
    group, hooks, taps, log = _group(3)
    own = _suspend("pid_1_id_1", pydevd.CMD_SET_BREAK)
    assert _from_rank(hooks, taps, 1, own) is own  # the rank's own stop: the same bytes go on
    assert taps[0].commands == [(pydevd.CMD_THREAD_SUSPEND, "*")] == taps[2].commands
    assert taps[1].commands == []
    [stop] = [e for e in log if e["event"] == "all-stop"]
    assert (stop["rank"], stop["reason"], stop["pausing"]) == (1, "breakpoint", [0, 2])

    # rank 0's two threads suspend: each suspension carries the reason, its console says it once
    for thread in ("pid_0_id_1", "pid_0_id_2"):
        shown = _from_rank(hooks, taps, 0, _suspend(thread, pydevd.CMD_THREAD_SUSPEND))
        assert shown is not None
        assert parse_suspend(shown.text).message == "[remote-debug] All-stop: rank 1"
        assert parse_suspend(shown.text).thread_id == thread and shown.seq == 2
    assert taps[0].said == ["[remote-debug] rank 0: All-stop: rank 1\n"]
    assert not [e for e in log if e["event"] == "all-paused"]
    _from_rank(hooks, taps, 2, _suspend("pid_2_id_1", pydevd.CMD_THREAD_SUSPEND))
    [paused] = [e for e in log if e["event"] == "all-paused"]
    assert paused["rank"] == 1 and paused["ranks"] == [0, 1, 2]
    assert {s.rank: (s.phase, s.by_group) for s in group.status()} == {
        0: (RankPhase.STOPPED, True),
        1: (RankPhase.STOPPED, False),
        2: (RankPhase.STOPPED, True),
    }

    # PyCharm's Resume in rank 1 resumes every rank (every thread: "*")
    hooks[1].from_ide(cast(PydevdTap, taps[1]), Line(pydevd.CMD_THREAD_RUN, 7, "pid_1_id_1"))
    assert taps[0].commands[-1] == (pydevd.CMD_THREAD_RUN, "*") == taps[2].commands[-1]
    [continued] = [e for e in log if e["event"] == "group-action"]
    assert continued["ranks"] == [0, 2] and continued["origin"] == "rank 1"
    assert all(s.phase == RankPhase.RUNNING for s in group.status())
    # the ranks' threads run again (pydevd says so thread by thread): a later stop is a new one
    for rank, thread in ((0, "pid_0_id_1"), (0, "pid_0_id_2"), (1, "pid_1_id_1"), (2, "pid_2_id_1")):
        assert _from_rank(hooks, taps, rank, _run(thread)) is not None  # PyCharm learns it too
    _from_rank(hooks, taps, 2, _suspend("pid_2_id_1", pydevd.CMD_ADD_EXCEPTION_BREAK))
    assert [(e["rank"], e["reason"]) for e in log if e["event"] == "all-stop"][-1] == (2, "exception")


def test_a_step_in_one_rank_is_not_a_stop_of_the_group_and_its_end_is() -> None:
    group, hooks, taps, _log = _group(2)
    _from_rank(hooks, taps, 0, _suspend("pid_0_id_1", pydevd.CMD_SET_BREAK))
    _from_rank(hooks, taps, 1, _suspend("pid_1_id_1", pydevd.CMD_THREAD_SUSPEND))
    hooks[0].from_ide(cast(PydevdTap, taps[0]), Line(pydevd.CMD_STEP_OVER, 9, "pid_0_id_1"))
    assert {s.rank: s.phase for s in group.status()} == {0: RankPhase.STEPPING, 1: RankPhase.STOPPED}
    _from_rank(hooks, taps, 0, Line(pydevd.CMD_THREAD_RUN, 6, f"pid_0_id_1\t{pydevd.CMD_STEP_OVER}"))
    done = _from_rank(hooks, taps, 0, _suspend("pid_0_id_1", pydevd.CMD_STEP_OVER))
    assert done is not None and parse_suspend(done.text).message == ""  # its own step: not marked
    assert [s.reason for s in group.status()] == ["step", "pause"]
    assert taps[1].commands == [(pydevd.CMD_THREAD_SUSPEND, "*")]  # rank 1 was not resumed by the step


def test_group_actions_on_pycharm_ranks() -> None:
    group, hooks, taps, _log = _group(2)
    assert group.act(GroupAction.PAUSE) == [0, 1]
    assert [t.commands for t in taps] == [[(pydevd.CMD_THREAD_SUSPEND, "*")]] * 2
    for rank in (0, 1):
        shown = _from_rank(hooks, taps, rank, _suspend(f"pid_{rank}_id_2", pydevd.CMD_THREAD_SUSPEND))
        assert shown is not None and parse_suspend(shown.text).message == "[remote-debug] Pause All"

    # Step Over All: each rank's main thread, found by its name (the last stop was another thread's)
    assert group.act(GroupAction.STEP) == [0, 1]
    assert taps[0].commands[-1] == (pydevd.CMD_LIST_THREADS, "")
    threads = '<xml><thread name="pydevd.Reader" id="pid_0_id_9" /><thread name="MainThread" id="pid_0_id_1" /></xml>'
    taps[0].callbacks[-1](Line(pydevd.CMD_RETURN, 1_000_000_003, threads))
    assert taps[0].commands[-1] == (pydevd.CMD_STEP_OVER, "pid_0_id_1")
    taps[1].callbacks[-1](Line(pydevd.CMD_ERROR, 1_000_000_003, "no threads"))  # no list: the last stop's thread
    assert taps[1].commands[-1] == (pydevd.CMD_STEP_OVER, "pid_1_id_2")
    stepped = _from_rank(hooks, taps, 0, _suspend("pid_0_id_1", pydevd.CMD_STEP_OVER))
    assert stepped is not None and parse_suspend(stepped.text).message == "[remote-debug] Step Over All"

    # Detach All: the rank resumes, then its connection ends (pydevd has no "session over" for PyCharm)
    assert group.act(GroupAction.DETACH) == [0, 1]
    assert all(t.commands[-1] == (pydevd.CMD_THREAD_RUN, "*") and t.closed for t in taps)
    for hook, tap in zip(hooks, taps, strict=True):
        hook.closed(cast(PydevdTap, tap))
    assert group.status() == []


def test_a_rank_that_connects_while_the_others_are_stopped_is_suspended_when_ready() -> None:
    log = EventLog()
    group = RankGroup(log.append, all_stop=True)
    first, late = group.pydevd_hooks(0), group.pydevd_hooks(1)
    taps = [Tap(), Tap()]
    first.opened(cast(PydevdTap, taps[0]))
    first.from_ide(cast(PydevdTap, taps[0]), Line(pydevd.CMD_RUN, 5, ""))
    first.from_rank(cast(PydevdTap, taps[0]), _suspend("pid_0_id_1", pydevd.CMD_SET_BREAK))
    late.opened(cast(PydevdTap, taps[1]))
    assert taps[1].commands == []  # PyCharm is still setting its breakpoints: nothing of ours before CMD_RUN
    late.from_ide(cast(PydevdTap, taps[1]), Line(pydevd.CMD_RUN, 5, ""))
    assert taps[1].commands == [(pydevd.CMD_THREAD_SUSPEND, "*")]
