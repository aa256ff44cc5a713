"""``stacks``' hang view: the ranks grouped by where they are, the odd ones first (LLNL STAT's equivalence classes).

"Which rank is stuck?" is answered by the few ranks whose stack differs from everyone else's, not by reading N
listings.  Ranks whose main thread has the same frames (file, line, function) form a class; a rank that could not be
read is classed by its error (each error its own class), and "blocked in native code", a held rank and the root
cause of a failure split classes too.  Classes are listed fewest ranks first (ties: the one holding the lowest rank),
except that the root cause's leads.

With PyTorch's Flight Recorder on in the job, each rank's control channel also reports the newest collective it
entered in each of its process groups (``container/rank/flight_recorder.py``): :func:`stuck_collectives` names the
members of a group that never entered the collective the others wait in.

Pure data: a :class:`StacksReport` in, its classes and text out (``collect_stacks`` reads the ranks).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from remote_debug.contract import spec
from remote_debug.laptop.wire.documents import (
    GroupCollectives,
    RankStacks,
    StackClass,
    StackFrame,
    StacksReport,
    StackThread,
    StuckCollective,
)

SUMMARY_FRAMES = 3  # frames on a class's header line: the innermost, then the code's own callers
MAIN_THREAD = "MainThread"

# The innermost Python frame of a rank waiting in a collective is torch.distributed's function itself (the wait is
# C, below it).  A control channel's reading has no "blocked in native code" of its own (py-spy's says it from the
# thread's native stack), so it is said only here, where it is near certain; anywhere else it stays unknown (None),
# not False: a frame calling time.sleep or a C extension looks the same as one running Python.
_COLLECTIVE_FILE = "distributed_c10d.py"
COLLECTIVES = frozenset(
    {
        "all_gather",
        "all_gather_coalesced",
        "all_gather_into_tensor",
        "all_reduce",
        "all_reduce_coalesced",
        "all_to_all",
        "all_to_all_single",
        "barrier",
        "batch_isend_irecv",
        "broadcast",
        "gather",
        "monitored_barrier",
        "recv",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "scatter",
        "send",
    }
)
# frames of installed packages and of the standard library: skipped on the header line after the innermost one,
# so a torch wrapper (c10d_logger's) does not hide the training code's own call
_LIBRARY = re.compile(r"[/\\](site|dist)-packages[/\\]|[/\\]lib[/\\]python\d[\d.]*[/\\]|^<frozen ")
# The debugger's own frames: a rank stopped at a breakpoint (or paused) waits inside pydevd's trace function, called
# from the user's frame; what the user wants is where it stopped ("main (train.py:43)"), not "wait (threading.py)".
_DEBUGGER = re.compile(r"[/\\](debugpy|_pydevd_bundle|_pydevd_frame_eval|_pydev_bundle)[/\\]|[/\\]pydevd\.py$")


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 5, 7, 8, 9]`` -> ``"0-3,5,7-9"``: a header's ranks, without spaces."""
    return spec.format_rank_ranges(ranks, sep=",")


def main_thread(r: RankStacks) -> StackThread | None:
    """The thread a rank is classed by: its main thread (``MainThread``; py-spy's ``main``), else its first one.

    The others (a DataLoader's pin-memory thread, a user's) stay in ``--flat``: the main thread is where a
    training loop waits, and classing by every thread would split ranks by threads that differ only in timing."""
    threads = [t for t in r["threads"] if not t.get("internal")]
    return next((t for t in threads if t.get("main") or t["name"] == MAIN_THREAD), threads[0] if threads else None)


def blocked_in_native(r: RankStacks, thread: StackThread | None) -> bool | None:
    """py-spy's answer when it read the rank; for a control channel's reading True only in a collective (see
    ``COLLECTIVES``), else None: not known."""
    if "blocked_in_native" in r:
        return r["blocked_in_native"]
    if thread and thread["frames"]:
        inner = thread["frames"][-1]
        if os.path.basename(inner["file"]) == _COLLECTIVE_FILE and inner["function"] in COLLECTIVES:
            return True
    return None


@dataclass
class _Class:
    members: list[RankStacks] = field(default_factory=list)
    thread: StackThread | None = None
    blocked: bool | None = None
    error: str | None = None  # the first member's own words (a class of several: with "rank N")
    root_cause: bool = False
    frames: list[StackFrame] = field(default_factory=list)  # the thread's, less the debugger's (see _DEBUGGER)
    in_debugger: bool = False


def classify(report: StacksReport) -> list[StackClass]:
    """The report's ranks in classes of equal stacks, in the order printed (see the module's docstring)."""
    code_dirs = report.get("code_dirs") or {}
    classes: dict[tuple[object, ...], _Class] = {}
    for r in report["ranks"]:
        thread = main_thread(r)
        blocked = blocked_in_native(r, thread) if not r["error"] else None
        held = (r.get("state") == spec.RankState.HELD, r.get("held_for"))
        own, in_debugger = without_debugger(thread["frames"] if thread else [])
        if r["error"]:
            key: tuple[object, ...] = ("error", _error_key(r["error"], r["rank"]), held)
        else:
            frames = tuple(_frame_key(f, code_dirs.get(r["node"] or "")) for f in own)
            exception = thread.get("exception") if thread else None
            key = ("stack", frames, in_debugger, exception, blocked, bool(r.get("root_cause")), held)
        c = classes.setdefault(
            key, _Class(thread=thread, blocked=blocked, error=r["error"], frames=own, in_debugger=in_debugger)
        )
        c.members.append(r)
        c.root_cause = c.root_cause or bool(r.get("root_cause"))
    ordered = sorted(
        classes.values(), key=lambda c: (not c.root_cause, len(c.members), min(m["rank"] for m in c.members))
    )
    return [_stack_class(c) for c in ordered]


def without_debugger(frames: Sequence[StackFrame]) -> tuple[list[StackFrame], bool]:
    """``frames`` (outermost first) up to the first frame of the debugger called from the program's own, and
    whether there was one: the rank is stopped in the debugger (a breakpoint, a pause, a step)."""
    for i, f in enumerate(frames):
        if i > 0 and _DEBUGGER.search(f["file"]) and not _DEBUGGER.search(frames[i - 1]["file"]):
            return list(frames[:i]), True
    return list(frames), False


def _error_key(error: str, rank: int) -> str:
    """An error with its rank's own number taken out: "rank 5 has failed" and "rank 6 has failed" are one class."""
    return re.sub(rf"\brank {rank}\b", "rank N", error)


def _frame_key(f: StackFrame, code_dir: str | None) -> tuple[str, int, str]:
    """A frame as classes compare it: a file under the node's code dir by its path there (each node of a job of
    this machine has its own copy of the code, the same file)."""
    path = f["file"]
    if code_dir:
        prefix = code_dir.rstrip("/") + "/"
        if path.startswith(prefix):
            path = "<code>/" + path[len(prefix) :]
    return (path, f["line"], f["function"])


def _stack_class(c: _Class) -> StackClass:
    ranks = sorted(m["rank"] for m in c.members)
    error = c.error
    if error is not None and len(ranks) > 1:
        error = _error_key(error, c.members[0]["rank"])
    frames = c.frames if c.thread and error is None else []
    summary = f"unavailable: {error}" if error is not None else call_path(frames)
    return {
        "ranks": ranks,
        "ranges": rank_ranges(ranks),
        "count": len(ranks),
        "thread": c.thread["name"] if c.thread and error is None else None,
        "frames": frames,
        "summary": summary,
        "blocked_in_native": c.blocked,
        "error": error,
        "exception": (c.thread.get("exception") if c.thread and error is None else None),
        "root_cause": c.root_cause,
        "in_debugger": c.in_debugger and error is None,
    }


def call_path(frames: Sequence[StackFrame]) -> str:
    """The header's call path, innermost first: ``all_reduce (distributed_c10d.py:2950) ← step (train.py:88) ← ...``.

    The innermost frame, then the next ones that are not a library's (installed packages, the standard library),
    up to ``SUMMARY_FRAMES``; "..." when more frames lie outside.  The whole stack follows the header."""
    if not frames:
        return "(no Python frames)"
    inner = list(reversed(frames))
    shown = [0]
    for i, f in enumerate(inner[1:], start=1):
        if len(shown) == SUMMARY_FRAMES:
            break
        if not _LIBRARY.search(f["file"]):
            shown.append(i)
    if len(shown) == 1 and len(inner) > 1:  # nothing but library frames: the nearest ones, then
        shown = list(range(min(SUMMARY_FRAMES, len(inner))))
    parts = [f"{inner[i]['function']} ({os.path.basename(inner[i]['file'])}:{inner[i]['line']})" for i in shown]
    if shown[-1] < len(inner) - 1:
        parts.append("...")
    return " ← ".join(parts)


# --- Flight Recorder ------------------------------------------------------------------------------------------


def stuck_collectives(ranks: Sequence[RankStacks]) -> list[StuckCollective]:
    """Per process group, the newest collective some members entered and others never did (from the ranks'
    Flight Recorder readings; none without them).  ``unknown``: members whose reading is missing (not selected,
    unreadable, or an older rank)."""
    views: dict[str, dict[int, GroupCollectives]] = {}
    members: dict[str, set[int]] = {}
    for r in ranks:
        for g in r.get("collectives") or []:
            views.setdefault(g["group"], {})[r["rank"]] = g
            members.setdefault(g["group"], set()).update(g["ranks"] or [])
    stuck: list[StuckCollective] = []
    for group in sorted(views, key=lambda name: (not name.isdigit(), int(name) if name.isdigit() else 0, name)):
        seen = views[group]
        newest = max(g["last_entered"] for g in seen.values())
        entered = sorted(rank for rank, g in seen.items() if g["last_entered"] >= newest)
        missing = sorted(rank for rank, g in seen.items() if g["last_entered"] < newest)
        # a collective any member saw complete was entered by every member: the readings only straddled it
        completed = any((seen[rank]["last_completed"] or 0) >= newest for rank in entered)
        if newest <= 0 or not missing or completed:
            continue
        op = next((seen[rank]["op"] for rank in entered if seen[rank]["op"]), None)
        desc = next((g["desc"] for g in seen.values() if g["desc"]), None)
        behind = {seen[rank]["last_entered"] for rank in missing}
        item: StuckCollective = {
            "group": group,
            "desc": desc,
            "seq": newest,
            "op": op,
            "entered": entered,
            "missing": missing,
            "unknown": sorted(members.get(group, set()) - set(seen)),
            "summary": "",
        }
        item["summary"] = _collective_line(item, behind.pop() if len(behind) == 1 else None, seen)
        stuck.append(item)
    return stuck


def _collective_line(c: StuckCollective, behind: int | None, seen: Mapping[int, GroupCollectives]) -> str:
    """``collective #3 all_reduce (group 0, default_pg): rank 1 never entered it (its newest: #2 barrier); ranks 0,2
    wait in it``."""
    # torch names a new_group without a description "undefined": no help to anyone
    group = f"group {c['group']}" + (f", {c['desc']}" if c["desc"] and c["desc"] != "undefined" else "")
    line = f"collective #{c['seq']}{' ' + c['op'] if c['op'] else ''} ({group}): "
    line += f"{_ranks_label(c['missing'])} never entered it"
    if behind is not None:
        op = next((seen[r]["op"] for r in c["missing"] if seen[r]["op"]), None) if behind > 0 else None
        newest = f"#{behind}{' ' + op if op else ''}" if behind > 0 else "none"
        line += f" ({'its' if len(c['missing']) == 1 else 'their'} newest: {newest})"
    line += f"; {_ranks_label(c['entered'])} wait{'s' if len(c['entered']) == 1 else ''} in it"
    if c["unknown"]:
        line += f"; not read: {_ranks_label(c['unknown'])}"
    return line


def _ranks_label(ranks: Sequence[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(ranks)}"


# --- the report -----------------------------------------------------------------------------------------------


def add_classes(report: StacksReport) -> StacksReport:
    """``report`` with its ``classes`` and ``collectives`` (``stacks --json``; the text is made from them)."""
    report["classes"] = classify(report)
    report["collectives"] = stuck_collectives(report["ranks"])
    return report


def format_classes(report: StacksReport) -> str:
    """The hang view: one header line per class (``ranks 0-62 (63): all_reduce (...) ← step (train.py:88) ← ...``),
    its thread's frames below it, outermost first like a traceback; then the Flight Recorder's stuck collectives."""
    classes = report.get("classes")
    if classes is None:
        classes = classify(report)
    by_rank = {r["rank"]: r for r in report["ranks"]}
    lines: list[str] = []
    for c in classes:
        marks = "".join(f" [{m}]" for m in _marks(c, [by_rank[rank] for rank in c["ranks"] if rank in by_rank]))
        lines.append(f"{_ranks_label(c['ranks'])} ({c['count']}): {c['summary']}{marks}")
        for f in c["frames"]:
            lines.append(f'  File "{f["file"]}", line {f["line"]}, in {f["function"]}')
        if c["exception"]:
            lines.append(f"  {c['exception']}")
        lines.append("")
    collectives = report.get("collectives")
    if collectives is None:
        collectives = stuck_collectives(report["ranks"])
    lines.extend(f"Flight Recorder: {c['summary']}" for c in collectives)
    if any(len([t for t in r["threads"] if not t.get("internal")]) > 1 for r in report["ranks"]):
        lines.append("(ranks are classed by their main thread; remote-debug stacks --flat shows every thread)")
    return "\n".join(lines).rstrip("\n")


def _marks(c: StackClass, members: Sequence[RankStacks]) -> list[str]:
    marks = []
    if c["blocked_in_native"]:
        marks.append("blocked in native code")
    if c.get("in_debugger"):
        marks.append("stopped in the debugger")
    if c["root_cause"]:
        marks.append("root cause")
    held = [m for m in members if m.get("state") == spec.RankState.HELD]
    if held:
        held_for = {m.get("held_for") for m in held}
        if len(held_for) == 1 and None not in held_for:
            marks.append(spec.held_with_phrase(held[0]["held_for"]))
        else:
            left = [s for s in (m.get("hold_seconds_left") for m in held) if s is not None]
            marks.append(spec.held_phrase(min(left) if left else None))
    return marks
