"""``python -m bench --logpoints [--short]``: issue 32's logpoint row.

P18 the cost of a logpoint hit in a rank: 2 ranks of a running job attached headless (``attach --headless --log``'s
    plan: a logpoint in every rank, tagged ``[rank N]`` by the forward, each hit said as a ``logpoint`` event here).
    Each rank alternates timed chunks of the same loop, ``n`` calls of a two-line function: one function with the
    logpoint (a hit per call), one without (the baseline: attached, no logpoint).  The cost per hit is the chunks'
    difference (medians) over ``n``, in microseconds of the rank's time; the row fails unless every hit reached the
    attach.  (A logpoint's ``{expr}`` are evaluated before its line runs: the row logs ``i``, not the ``x`` the line
    assigns.)
P19 the cost of a ``print`` in a rank whose output goes to its debugger (VS Code's rank configurations and
    ``--show-output`` ask for it: DAP ``redirectOutput``): one rank prints chunks of lines before any debugger,
    attached headless with its output shown, and after that debugger detached (Detach All) - where pydevd alone
    would keep sending every print (``container/rank/dap_server.py`` takes its tee off).  Best chunk of each.
"""

from __future__ import annotations

import json
import statistics
import textwrap
import threading
import time
from pathlib import Path

from bench.rank_jobs import launch_rank_job, wait_for_ranks
from remote_debug.contract import spec
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.wire import events
from remote_debug.laptop.wire.documents import GroupAction

LOG_MARK = "# BENCH-LOG"
LOOPING_RANK = textwrap.dedent(
    """
    import json, os, pathlib, time
    rank = int(os.environ.get("RANK", "0"))
    marks = pathlib.Path({marks!r})
    calls, rounds = {calls}, {rounds}

    def plain(i):
        x = i * 2
        return x

    def logged(i):
        x = i * 2  # BENCH-LOG
        return x

    while not (marks / "go").exists():
        time.sleep(0.02)
    times = {{"plain": [], "logged": []}}
    for _ in range(rounds):
        for name, step in (("plain", plain), ("logged", logged)):
            start = time.perf_counter()
            for i in range(calls):
                step(i)
            times[name].append(time.perf_counter() - start)
    (marks / f"times-{{rank}}").write_text(json.dumps(times))
    while not (marks / "done").exists():
        time.sleep(0.05)
    """
)
NODES, NPROC = 1, 2
PRINTING_RANK = textwrap.dedent(
    """
    import json, pathlib, sys, time
    marks = pathlib.Path({marks!r})
    calls, rounds = {calls}, {rounds}

    def chunk():
        start = time.perf_counter()
        for i in range(calls):
            print("line", i)
        sys.stdout.flush()
        return (time.perf_counter() - start) / calls * 1e6

    said = {{}}
    for phase in ("before", "attached", "after"):
        while not (marks / phase).exists():
            time.sleep(0.02)
        said[phase] = min(chunk() for _ in range(rounds))
        (marks / f"{{phase}}-done").write_text("")
    (marks / "times").write_text(json.dumps(said))
    while not (marks / "done").exists():
        time.sleep(0.05)
    """
)


def logpoint_rows(work: Path, short: bool) -> dict[str, dict[str, float]]:
    paths = StatePaths(work / "state")
    return {**_logpoint_row(paths, work, short), **_print_row(paths, work, short)}


def _wait_for(path: Path, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench: no {what} in {timeout:g} s")
        time.sleep(0.05)


def _print_row(paths: StatePaths, work: Path, short: bool) -> dict[str, dict[str, float]]:
    calls, rounds = (2000, 2) if short else (5000, 5)
    name = "bench-prints"
    marks = work / f"{name}-marks"
    marks.mkdir(parents=True, exist_ok=True)
    backend, src = launch_rank_job(
        paths,
        work,
        name,
        1,
        1,
        script=PRINTING_RANK.format(marks=str(marks), calls=calls, rounds=rounds),
        wait_seconds=0,
    )
    said: list[events.Event] = []
    try:
        wait_for_ranks(backend, name, 1, spec.RankState.IDLE)
        (marks / "before").write_text("")
        _wait_for(marks / "before-done", "chunks before the attach")
        # no breakpoint: the session stays until it is detached, the rank's prints shown
        plan = HeadlessPlan(show_output=True, max_stops=1, attach_timeout=120)
        options = AttachOptions(
            workspace=src, headless=plan, write_launch_json=False, edit_user_ssh_config=False, ready_timeout=120
        )
        attacher = Attacher(backend, name, options, said.append, paths)
        thread = threading.Thread(target=attacher.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 300
        while not any(isinstance(e, events.RankAttached) for e in said):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: the rank did not attach")
            time.sleep(0.05)
        time.sleep(1.0)  # configurationDone follows rank-attached
        (marks / "attached").write_text("")
        _wait_for(marks / "attached-done", "chunks while attached")
        attacher.group.act(GroupAction.DETACH, origin="bench")
        while not any(isinstance(e, events.RankDetached) for e in said):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: the rank's session did not end on Detach All")
            time.sleep(0.05)
        time.sleep(1.0)  # the rank sees its debugger's connection close
        (marks / "after").write_text("")
        _wait_for(marks / "times", "chunks after the detach")
        times = json.loads((marks / "times").read_text())
        shown = sum(isinstance(e, events.RankPrinted) for e in said)
        if not shown:
            raise RuntimeError(f"{name}: no print of the rank reached its debugger")
    finally:
        (marks / "done").write_text("")
        backend.stop(name, wait_seconds=60)
    thread.join(60)
    return {
        "P19 print in a rank: no debugger, its output shown in the debugger, after it detached": {
            "before_us_per_print": times["before"],
            "attached_us_per_print": times["attached"],
            "after_detach_us_per_print": times["after"],
            "lines_shown": float(shown),
        }
    }


def _logpoint_row(paths: StatePaths, work: Path, short: bool) -> dict[str, dict[str, float]]:
    calls, rounds = (1000, 2) if short else (2000, 5)
    name = "bench-logpoints"
    marks = work / f"{name}-marks"
    marks.mkdir(parents=True, exist_ok=True)
    ranks = NODES * NPROC
    backend, src = launch_rank_job(
        paths,
        work,
        name,
        NODES,
        NPROC,
        script=LOOPING_RANK.format(marks=str(marks), calls=calls, rounds=rounds),
        wait_seconds=0,
    )
    script = src / "ranks.py"
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if LOG_MARK in text)
    said: list[events.Event] = []
    attached = threading.Event()

    def emit(event: events.Event) -> None:
        said.append(event)
        if sum(isinstance(e, events.RankAttached) for e in said) == ranks:
            attached.set()

    try:
        wait_for_ranks(backend, name, ranks, spec.RankState.IDLE)
        plan = HeadlessPlan(logpoints={str(script): [(line, "i={i}")]}, max_stops=0, attach_timeout=120)
        options = AttachOptions(
            workspace=src, headless=plan, write_launch_json=False, edit_user_ssh_config=False, ready_timeout=120
        )
        attacher = Attacher(backend, name, options, emit, paths)
        thread = threading.Thread(target=attacher.run, daemon=True)
        thread.start()
        if not attached.wait(300):
            raise RuntimeError(f"{name}: not every rank attached")
        time.sleep(1.0)  # configurationDone (with the logpoints) follows rank-attached
        (marks / "go").write_text("")
        deadline = time.monotonic() + (60 if short else 600)
        while not all((marks / f"times-{r}").exists() for r in range(ranks)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: the ranks did not finish their loops")
            time.sleep(0.1)
        expected = ranks * calls * rounds
        while sum(isinstance(e, events.LogpointHit) for e in said) < expected:
            if time.monotonic() > deadline:
                hits = sum(isinstance(e, events.LogpointHit) for e in said)
                raise RuntimeError(f"{name}: {hits} of {expected} logpoint hits reached the attach")
            time.sleep(0.1)
        plain: list[float] = []
        logged: list[float] = []
        for rank in range(ranks):
            times = json.loads((marks / f"times-{rank}").read_text())
            plain += times["plain"]
            logged += times["logged"]
    finally:
        (marks / "done").write_text("")
        backend.stop(name, wait_seconds=60)
    thread.join(60)
    base, with_logpoint = statistics.median(plain), statistics.median(logged)
    return {
        f"P18 logpoint hit in a rank ({ranks} ranks, {calls} hits a chunk, attached headless)": {
            "no_logpoint_us_per_call": base / calls * 1e6,
            "logpoint_us_per_call": with_logpoint / calls * 1e6,
            "us_per_hit": (with_logpoint - base) / calls * 1e6,
            "hits_delivered": float(expected),
        }
    }
