"""The human lines `attach`/`demo` print for their events (the JSON lines are the events themselves)."""

from __future__ import annotations

import json

import pytest

from remote_debug.cli.output import describe_event, event_printer
from remote_debug.contract.spec import RankDebugger, RankState
from remote_debug.laptop.core.jobinfo import JobStatus
from remote_debug.laptop.wire import events as ev
from remote_debug.laptop.wire.event_text import QUIET

# One event of each kind that has a human line, with its line.
SAMPLES: list[tuple[ev.Event, str]] = [
    (ev.Launched(job="j", nodes=2, nproc_per_node=4, workspace="/ws"), "launched job j (2 x 4 ranks); workspace /ws"),
    (ev.RankAttached(rank=1, node="algo-1"), "rank 1: debugger attached"),
    (
        ev.LogpointHit(rank=2, node="algo-1", file="/ws/train.py", line=12, message="loss=0.31"),
        "[rank 2] loss=0.31",
    ),
    (ev.RankPrinted(rank=3, node="algo-2", line="epoch 1 done", stream="stderr"), "[rank 3] epoch 1 done"),
    (
        ev.JobStatusEvent(job="j", status=JobStatus.IN_PROGRESS, secondary_status="Downloading", message=""),
        "job j: InProgress / Downloading",
    ),
    (ev.Waiting(what="nodes", nodes=["algo-1", "algo-2"]), "waiting for nodes to start: algo-1, algo-2"),
    (
        ev.SshConfig(aliases=["algo-1.j"], config="/h/.remote-debug/ssh_config"),
        "ssh entries written (algo-1.j): try `ssh algo-1.j`",
    ),
    (ev.NodeConnected(node="algo-1", alias="algo-1.j"), "connected to algo-1.j"),
    (
        ev.RankReady(
            rank=0,
            node="algo-1",
            local_port=4000,
            remote_port=5000,
            state=RankState.LISTENING,
            ide=RankDebugger.DEBUGPY,
            code_dir="/opt/ml/code",
        ),
        "rank 0 on algo-1: debugger at 127.0.0.1:4000",
    ),
    (
        ev.RankUnavailable(rank=1, node="algo-1", state=RankState.SKIPPED, error=None),
        "rank 1 on algo-1 has no debugger (skipped: )",
    ),
    (
        ev.LaunchJson(path="/ws/.vscode/launch.json", compound="remote-debug: j all ranks", configurations=[]),
        "VS Code: /ws/.vscode/launch.json has 'remote-debug: j all ranks'",
    ),
    (ev.Ready(ranks=[0, 1]), "ready: ranks [0, 1]"),
    (
        ev.Stopped(rank=0, node="algo-1", file="t.py", line=3, function="f", reason="breakpoint", variables={"x": "1"}),
        "rank 0 stopped at t.py:3 (breakpoint): {'x': '1'}",
    ),
    (ev.RankDetached(rank=0, node="algo-1"), "rank 0 detached"),
    (ev.Reconnected(node="algo-1"), "reconnected to algo-1"),
    (ev.TunnelDown(node="algo-1", error="EOF"), "tunnel to algo-1 is down, retrying: EOF"),
    (ev.WarningEvent(message="slow"), "warning: slow"),
    (
        ev.PycharmBuild(build="263.1", source="/opt/pycharm", installed="263.1.2", others=[]),
        "PyCharm build 263.1 from /opt/pycharm, pydevd-pycharm 263.1.2 installed",
    ),
    (
        ev.PycharmConfig(config_name="j", port=7000, path="/ws/.idea/x.xml", steps=["a", "b"]),
        "PyCharm run configuration 'j' (port 7000) written to /ws/.idea/x.xml\n  1. a\n  2. b",
    ),
    (ev.RankConnected(rank=0, node="algo-1", ide_port=5678), "rank 0 on algo-1: connected to PyCharm's debug server"),
    (ev.IdeNotListening(rank=0, node="algo-1", message="start it"), "rank 0 on algo-1 is waiting: start it"),
    (
        ev.RankFailed(rank=1, node="algo-1", pid=7, error="ValueError: x", traceback="Traceback\n  line\n", held=False),
        "rank 1 on algo-1 failed: ValueError: x\n    Traceback\n      line",
    ),
    (
        ev.RankFailed(rank=3, node="algo-2", pid=9, error="ValueError: x", held=True, root_cause=True),
        "rank 3 on algo-2 failed (root cause): ValueError: x; held for a post-mortem: a debugger attached to it stops "
        "at the exception, and it exits with this failure when you continue or detach (or when the hold ends)",
    ),
    (
        ev.RankHeld(rank=0, node="algo-1", pid=8, held_for=3, error="ValueError: x"),
        "rank 0 on algo-1 held with rank 3, which failed: paused where it was (a thread in a collective pauses when "
        "it returns to Python), it ends with the job when rank 3's hold ends",
    ),
    (
        ev.JobEnded(status=JobStatus.FAILED, exit_code=1, failure_reason="rank 1 failed"),
        "job ended: Failed, exit code 1 (rank 1 failed)",
    ),
    (
        ev.Detached(job="j", reason=ev.DetachReason.INTERRUPTED, status=JobStatus.IN_PROGRESS),
        "detached (Ctrl-C): job j keeps running",
    ),
    (
        ev.RankRestarted(rank=2, node="algo-2", pid=70, old_pid=60, run=1),
        "rank 2 on algo-2 restarted (run 1, pid 70): attaching to the new process",
    ),
    (
        ev.RunStarted(
            job="j", run=2, nodes=["algo-1", "algo-2"], command=["python", "-c", "print(1)"], master_port=4242
        ),
        "run 2 of job j: python -c 'print(1)' on algo-1, algo-2, rendezvous port 4242",
    ),
    (
        ev.RunEnded(job="j", run=2, exit_code=3, exit_codes={"algo-1": 3}),
        "run 2 ended, exit code 3; the nodes stay up (remote-debug release j ends them)",
    ),
    (
        ev.BreakpointsMissed(breakpoints=["train.py:5", "a.py:1"], ranks=[0, 1]),
        "no rank stopped at a breakpoint: train.py:5, a.py:1 were never hit in ranks 0-1",
    ),
    (
        ev.AllStop(rank=0, reason="breakpoint", pausing=[1, 2, 3]),
        "rank 0 stopped (breakpoint): pausing ranks 1-3 (all-stop)",
    ),
    (ev.AllPaused(rank=0, ranks=[0, 1, 2, 3], seconds=0.25), "all 4 ranks paused, 0.25 s after rank 0 stopped"),
    (
        ev.RankWaiting(rank=3, action=ev.GroupAction.PAUSE, seconds=1.5),
        "rank 3 has not paused after 1.5 s: it is in native code (a collective waiting for paused ranks, or I/O) "
        "and stops when it returns to Python",
    ),
    (
        ev.GroupActed(action=ev.GroupAction.CONTINUE, ranks=[1, 2, 3], origin="rank 0"),
        "Continue All (rank 0): ranks 1-3",
    ),
]


def test_every_described_event_has_its_line() -> None:
    assert {type(e) for e, _ in SAMPLES} == set(ev.EVENT_TYPES) - QUIET
    for event, line in SAMPLES:
        assert describe_event(event) == line


def test_pycharm_ready_held_failure_and_quiet_events() -> None:
    pycharm = ev.RankReady(
        rank=0,
        node="algo-1",
        local_port=4000,
        remote_port=5000,
        state=RankState.WAITING,
        ide=RankDebugger.PYDEVD,
        code_dir="/opt/ml/code",
    )
    assert describe_event(pycharm) == (
        "rank 0 on algo-1: its localhost:5000 leads to PyCharm's debug server at 127.0.0.1:4000"
    )
    held = describe_event(ev.RankFailed(rank=0, node="a", pid=1, error="E", held=True))
    assert held is not None and held.startswith("rank 0 on a failed: E; held for a post-mortem")
    assert describe_event(ev.PauseSafe(rank=1, node="a")) is None  # not worth a line
    assert describe_event(ev.RankListening(rank=1, node="a", remote_port=5000)) is None


def test_printer_prints_the_json_line_or_the_human_line(capsys: pytest.CaptureFixture[str]) -> None:
    event = ev.Ready(ranks=[0, 1])
    event_printer(True)(event)
    out, err = capsys.readouterr()
    # the JSON line carries the human line too: the extension shows it rather than wording the event again
    assert json.loads(out) == {"event": "ready", "v": ev.EVENTS_VERSION, "ranks": [0, 1], "text": "ready: ranks [0, 1]"}
    assert not err
    event_printer(False)(event)
    out, err = capsys.readouterr()
    assert not out and "remote-debug" in err and "ready: ranks [0, 1]" in err
    event_printer(False)(ev.PauseSafe(rank=1, node="a"))
    assert capsys.readouterr() == ("", "")


def test_enum_fields_print_their_values(capsys: pytest.CaptureFixture[str]) -> None:
    """A StrEnum field prints as its value in the human line (3.11's StrEnum; on 3.10 spec.StrEnum's
    __str__/__format__), and as a plain string in the JSON line."""
    events = [
        ev.RankUnavailable(rank=2, node="algo-1", state=RankState.IDLE, error="lazy"),
        ev.JobStatusEvent(job="j", status=JobStatus.IN_PROGRESS, secondary_status="Starting"),
        ev.JobEnded(status=JobStatus.STOPPED, exit_code=None),
    ]
    for event in events:
        event_printer(False)(event)
    err = capsys.readouterr().err
    assert "rank 2 on algo-1 has no debugger (idle: lazy)" in err
    assert "job j: InProgress / Starting" in err and "job ended: Stopped, exit code None" in err
    assert "RankState" not in err and "JobStatus" not in err
    for event in events:
        event_printer(True)(event)
    out = capsys.readouterr().out
    assert '"state": "idle"' in out and '"status": "InProgress"' in out and '"status": "Stopped"' in out
    assert "RankState" not in out and "JobStatus" not in out


def test_progress_says_what_it_waits_for_while_it_waits() -> None:
    """`stop` waits up to a job's grace period: off a terminal (a log, the extension's channel) a line says
    what it waits for at once and again every `every` seconds; with --json nothing is printed."""
    import io
    import time

    from rich.console import Console

    from remote_debug.cli.output import progress

    buffer = io.StringIO()
    out = Console(file=buffer, force_terminal=False, width=200)
    with progress("stopping job j, waiting for it to end", every=0.2, out=out):
        assert buffer.getvalue() == "remote-debug: stopping job j, waiting for it to end...\n"
        time.sleep(0.5)
    lines = buffer.getvalue().splitlines()
    assert len(lines) >= 3 and lines[1].startswith("remote-debug: still stopping job j, waiting for it to end ("), lines
    settled = buffer.getvalue()
    time.sleep(0.3)
    assert buffer.getvalue() == settled  # nothing after the block

    quiet = io.StringIO()
    with progress("stopping job j", enabled=False, every=0.05, out=Console(file=quiet, force_terminal=False)):
        time.sleep(0.15)
    assert quiet.getvalue() == ""
