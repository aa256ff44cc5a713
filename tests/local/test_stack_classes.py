"""``stacks``' hang view on data: ranks grouped by stack, the odd classes first, rank ranges, the header line, the
JSON the VS Code extension reads, and the Flight Recorder's "who never entered the collective" (from a dump torch
2.13 wrote for a gloo job; the whole path runs in tests/local/test_stacks_e2e.py)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from remote_debug.container.rank import flight_recorder
from remote_debug.contract import control_replies as replies
from remote_debug.laptop.diagnose.stack_classes import (
    add_classes,
    call_path,
    classify,
    format_classes,
    rank_ranges,
    stuck_collectives,
)
from remote_debug.laptop.wire.documents import GroupCollectives, RankStacks, StackFrame, StacksReport, StackThread

SITE = "/venv/lib/python3.11/site-packages/torch/distributed"
TRAIN = "/opt/ml/code/train.py"
ALL_REDUCE = [
    (TRAIN, 120, "main"),
    (TRAIN, 88, "step"),
    (f"{SITE}/c10d_logger.py", 83, "wrapper"),
    (f"{SITE}/distributed_c10d.py", 2950, "all_reduce"),
]
LOADER = [
    (TRAIN, 120, "main"),
    (TRAIN, 80, "step"),
    ("/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", 631, "__next__"),
]


def frames(stack: list[tuple[str, int, str]]) -> list[StackFrame]:
    return [{"file": file, "line": line, "function": function} for file, line, function in stack]


def thread(stack: list[tuple[str, int, str]], name: str = "MainThread", **extra: Any) -> StackThread:
    return cast(StackThread, {"name": name, "frames": frames(stack), "exception": None, "internal": False, **extra})


def rank(n: int, *threads: StackThread, error: str | None = None, node: str = "algo-1", **extra: Any) -> RankStacks:
    fields: dict[str, Any] = {
        "rank": n,
        "node": node,
        "pid": 1000 + n,
        "state": "running",
        "hold_seconds_left": None,
        "source": "control",
        "threads": list(threads),
        "error": error,
        **extra,
    }
    return cast(RankStacks, fields)


def report(*ranks: RankStacks, **extra: Any) -> StacksReport:
    return cast(StacksReport, {"job": "j", "ranks": list(ranks), **extra})


@pytest.mark.parametrize(
    ("ranks", "text"),
    [([], ""), ([5], "5"), (range(63), "0-62"), ([9, 8, 7, 5, 3, 2, 1, 0, 3], "0-3,5,7-9"), ([1, 3], "1,3")],
)
def test_rank_ranges_compress_runs(ranks: list[int], text: str) -> None:
    assert rank_ranges(ranks) == text


def test_the_odd_rank_comes_first_and_the_63_that_agree_are_one_line() -> None:
    ranks = [rank(n, thread(ALL_REDUCE)) for n in range(63)] + [rank(63, thread(LOADER))]
    text = format_classes(report(*ranks)).splitlines()
    assert text[0] == "rank 63 (1): __next__ (dataloader.py:631) ← step (train.py:80) ← main (train.py:120)"
    # the frames below it outermost first, like a traceback, with their full paths
    assert text[1:4] == [
        f'  File "{TRAIN}", line 120, in main',
        f'  File "{TRAIN}", line 80, in step',
        '  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 631, in __next__',
    ]
    # the torch wrapper between all_reduce and step is on the frame lines, not on the header
    [header] = [line for line in text if line.startswith("ranks ")]
    assert header == (
        "ranks 0-62 (63): all_reduce (distributed_c10d.py:2950) ← step (train.py:88) ← main (train.py:120)"
        " [blocked in native code]"
    )
    assert len([line for line in text if not line.startswith(" ") and line]) == 2


def test_order_fewest_ranks_first_ties_by_lowest_rank_and_the_root_cause_leads() -> None:
    a, b, c = ALL_REDUCE, LOADER, LOADER[:2]
    ranks = [rank(0, thread(a)), rank(1, thread(a)), rank(2, thread(c)), rank(3, thread(b)), rank(4, thread(a))]
    assert [k["ranges"] for k in classify(report(*ranks))] == ["2", "3", "0-1,4"]
    ranks[4]["root_cause"] = True  # its failure came first: it leads, alone (a root cause is a class of its own)
    classes = classify(report(*ranks))
    assert [(k["ranges"], k["root_cause"]) for k in classes] == [
        ("4", True),
        ("2", False),
        ("3", False),
        ("0-1", False),
    ]
    assert format_classes(report(*ranks)).splitlines()[0].endswith(" [blocked in native code] [root cause]")


def test_errors_are_classes_of_their_own_and_the_same_failure_of_several_ranks_is_one() -> None:
    ranks = [
        rank(0, thread(ALL_REDUCE)),
        rank(4, error="rank 4 has failed"),
        rank(6, error="rank 6 has failed"),
        rank(7, error="rank 7 has no control channel (pycharm rank, or started by an older hook)"),
    ]
    classes = classify(report(*ranks))
    assert [(k["ranges"], k["error"]) for k in classes] == [
        ("0", None),
        ("7", "rank 7 has no control channel (pycharm rank, or started by an older hook)"),
        ("4,6", "rank N has failed"),
    ]
    assert classes[2]["frames"] == [] and classes[2]["thread"] is None and classes[2]["blocked_in_native"] is None
    assert "ranks 4,6 (2): unavailable: rank N has failed" in format_classes(report(*ranks)).splitlines()


def test_a_rank_is_classed_by_its_main_thread_and_its_other_threads_are_left_to_flat() -> None:
    worker = thread(LOADER, name="pin_memory")
    ranks = [rank(0, worker, thread(ALL_REDUCE)), rank(1, thread(ALL_REDUCE))]
    [only] = classify(report(*ranks))
    assert only["ranges"] == "0-1" and only["thread"] == "MainThread"
    assert format_classes(report(*ranks)).splitlines()[-1] == (
        "(ranks are classed by their main thread; remote-debug stacks --flat shows every thread)"
    )
    # py-spy names the main thread by its flag; its "blocked in native" splits a class (unlike a control reading's)
    spied = [
        rank(n, thread(LOADER[:2], name=str(4000 + n), main=True), source="py-spy", blocked_in_native=n == 1)
        for n in range(3)
    ]
    classes = classify(report(*spied))
    assert [(k["ranges"], k["blocked_in_native"], k["thread"]) for k in classes] == [
        ("1", True, "4001"),
        ("0,2", False, "4000"),
    ]


def test_blocked_in_native_from_a_control_reading_is_said_only_in_a_collective() -> None:
    [in_collective] = classify(report(rank(0, thread(ALL_REDUCE))))
    [elsewhere] = classify(report(rank(0, thread(LOADER))))
    assert in_collective["blocked_in_native"] is True and elsewhere["blocked_in_native"] is None


def test_each_nodes_copy_of_the_code_is_the_same_file() -> None:
    def on(node: str, n: int) -> RankStacks:
        stack = [(f"/jobs/j/nodes/{node}/code/train.py", 5, "main"), (f"/jobs/j/nodes/{node}/code/train.py", 9, "f")]
        return rank(n, thread(stack), node=node)

    dirs = {"algo-1": "/jobs/j/nodes/algo-1/code", "algo-2": "/jobs/j/nodes/algo-2/code/"}
    assert [k["ranges"] for k in classify(report(on("algo-1", 0), on("algo-2", 1), code_dirs=dirs))] == ["0-1"]
    assert [k["ranges"] for k in classify(report(on("algo-1", 0), on("algo-2", 1)))] == ["0", "1"]


def test_call_path_shows_the_innermost_frame_then_the_codes_own_callers() -> None:
    deep = [(TRAIN, 200 + i, f"level{i}") for i in range(5)] + ALL_REDUCE[2:]
    assert call_path(frames(deep)) == (
        "all_reduce (distributed_c10d.py:2950) ← level4 (train.py:204) ← level3 (train.py:203) ← ..."
    )
    only_library = [(f"{SITE}/run.py", n, f"f{n}") for n in range(1, 5)]
    assert call_path(frames(only_library)) == "f4 (run.py:4) ← f3 (run.py:3) ← f2 (run.py:2) ← ..."
    assert call_path([]) == "(no Python frames)"


def test_a_held_rank_shows_what_it_raised_after_where() -> None:
    raised = thread(LOADER[:2], exception="ValueError: bad 42")
    held = rank(1, raised, state="held", hold_seconds_left=55)
    [c] = classify(report(held))
    assert c["exception"] == "ValueError: bad 42"
    lines = format_classes(report(held)).splitlines()
    assert lines[0] == "rank 1 (1): step (train.py:80) ← main (train.py:120) [held for post-mortem, 55 s left]"
    assert lines[-1] == "  ValueError: bad 42"
    gang = [rank(n, thread(ALL_REDUCE), state="held", held_for=3) for n in (0, 1)]
    assert format_classes(report(*gang)).splitlines()[0].endswith("[held with rank 3, which failed]")


def test_the_json_keeps_the_flat_ranks_and_adds_the_classes_in_printed_order() -> None:
    ranks = [rank(n, thread(ALL_REDUCE)) for n in range(3)] + [rank(3, thread(LOADER))]
    flat = json.loads(json.dumps(ranks))
    out = json.loads(json.dumps(add_classes(report(*ranks))))
    assert out["ranks"] == flat and out["collectives"] == []
    first = out["classes"][0]
    assert set(first) == {
        "ranks",
        "ranges",
        "count",
        "thread",
        "frames",
        "summary",
        "blocked_in_native",
        "error",
        "exception",
        "root_cause",
        "in_debugger",
    }
    assert (first["ranks"], first["count"], first["frames"]) == ([3], 1, frames(LOADER))
    assert format_classes(out).splitlines()[0] == f"rank 3 (1): {first['summary']}"


# --- Flight Recorder --------------------------------------------------------------------------------------------

# _dump_fr_trace_json() of rank 0 of a 3-rank gloo job (torch 2.13, TORCH_FR_BUFFER_SIZE=100), trimmed to the fields
# read: group "1" (ranks 0,1) - rank 0 entered broadcast #2, which rank 1 never did
RANK0_DUMP = {
    "entries": [
        {"collective_seq_id": 1, "is_p2p": False, "process_group": ["0", "default_pg"],
         "profiling_name": "gloo:all_reduce", "retired": True, "state": "scheduled"},
        {"collective_seq_id": 1, "is_p2p": False, "process_group": ["1", "undefined"],
         "profiling_name": "gloo:all_reduce", "retired": True, "state": "scheduled"},
        {"collective_seq_id": 2, "is_p2p": False, "process_group": ["0", "default_pg"],
         "profiling_name": "gloo:barrier", "retired": True, "state": "scheduled"},
        {"collective_seq_id": 2, "is_p2p": False, "process_group": ["1", "undefined"],
         "profiling_name": "gloo:broadcast", "retired": False, "state": "scheduled"},
    ],
    "pg_config": {"": {"desc": "", "name": "", "ranks": "[]"}},
    "pg_status": {
        "0": {"last_completed_collective": "2", "last_enqueued_collective": "2", "last_started_collective": "-1"},
        "1": {"last_completed_collective": "1", "last_enqueued_collective": "2", "last_started_collective": "-1"},
    },
    "version": "2.10",
}  # fmt: skip


def test_a_flight_recorder_dump_becomes_each_groups_newest_collective() -> None:
    groups = {"0": ("default_pg", [0, 1, 2]), "1": ("undefined", [0, 1]), "2": ("idle", [0, 2])}
    assert flight_recorder.summarize(RANK0_DUMP, groups) == [
        replies.GroupCollectives(
            group="0", desc="default_pg", ranks=[0, 1, 2], last_entered=2, last_completed=2, op="barrier"
        ),
        replies.GroupCollectives(
            group="1", desc="undefined", ranks=[0, 1], last_entered=2, last_completed=1, op="broadcast"
        ),
        # a group it belongs to but has not used yet: entered nothing
        replies.GroupCollectives(group="2", desc="idle", ranks=[0, 2], last_entered=0, last_completed=None, op=None),
    ]


def test_the_flight_recorder_is_on_as_torch_reads_it() -> None:
    assert flight_recorder.buffer_size({}) == 0
    assert flight_recorder.buffer_size({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}) == 2000
    assert flight_recorder.buffer_size({"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}) == 0
    assert flight_recorder.buffer_size({"TORCH_FR_BUFFER_SIZE": "lots"}) == 0


def seen(group: str, ranks: list[int], entered: int, completed: int, op: str | None) -> GroupCollectives:
    return {
        "group": group,
        "desc": "default_pg" if group == "0" else "undefined",
        "ranks": ranks,
        "last_entered": entered,
        "last_completed": completed,
        "op": op,
    }


def test_the_ranks_that_never_entered_the_collective_the_others_wait_in_are_named() -> None:
    world = [0, 1, 2, 3, 4]
    ranks = [rank(n, thread(ALL_REDUCE), collectives=[seen("0", world, 7, 6, "all_reduce")]) for n in (0, 2)]
    ranks += [rank(n, thread(LOADER), collectives=[seen("0", world, 6, 6, "barrier")]) for n in (1, 3)]
    ranks.append(rank(4, error="rank 4 has failed"))
    [stuck] = stuck_collectives(ranks)
    assert (stuck["seq"], stuck["op"], stuck["entered"], stuck["missing"], stuck["unknown"]) == (
        7,
        "all_reduce",
        [0, 2],
        [1, 3],
        [4],
    )
    assert stuck["summary"] == (
        "collective #7 all_reduce (group 0, default_pg): ranks 1,3 never entered it (their newest: #6 barrier); "
        "ranks 0,2 wait in it; not read: rank 4"
    )
    assert format_classes(add_classes(report(*ranks))).splitlines()[-1] == f"Flight Recorder: {stuck['summary']}"


def test_no_stuck_collective_without_a_gap_a_completed_one_or_the_flight_recorder() -> None:
    world = [0, 1]
    level = [rank(n, thread(ALL_REDUCE), collectives=[seen("0", world, 5, 4, "all_reduce")]) for n in world]
    assert stuck_collectives(level) == []
    # rank 0 saw #5 complete: rank 1's older reading only straddled it
    straddled = [
        rank(0, thread(ALL_REDUCE), collectives=[seen("0", world, 5, 5, "all_reduce")]),
        rank(1, thread(ALL_REDUCE), collectives=[seen("0", world, 4, 4, "all_reduce")]),
    ]
    assert stuck_collectives(straddled) == []
    assert stuck_collectives([rank(n, thread(ALL_REDUCE)) for n in world]) == []  # off, or older ranks


def test_a_subgroup_is_judged_by_its_own_members() -> None:
    world, pair = [0, 1, 2], [0, 1]
    ranks = [
        rank(
            0, thread(ALL_REDUCE), collectives=[seen("0", world, 2, 2, "barrier"), seen("1", pair, 2, 1, "broadcast")]
        ),
        rank(1, thread(LOADER), collectives=[seen("0", world, 2, 2, "barrier"), seen("1", pair, 1, 1, "all_reduce")]),
        rank(2, thread(ALL_REDUCE), collectives=[seen("0", world, 3, 2, "all_reduce")]),
    ]
    assert [s["summary"] for s in stuck_collectives(ranks)] == [
        "collective #3 all_reduce (group 0, default_pg): ranks 0-1 never entered it (their newest: #2 barrier); "
        "rank 2 waits in it",
        "collective #2 broadcast (group 1): rank 1 never entered it (its newest: #1 all_reduce); rank 0 waits in it",
    ]


def test_the_stacks_reply_carries_the_collectives_and_an_older_ranks_reply_still_reads() -> None:
    group = replies.GroupCollectives(group="0", desc="default_pg", ranks=[0, 1], last_entered=3, last_completed=2)
    sent = replies.Stacks(pid=7, collectives=[group]).to_json()
    assert replies.Stacks.read(json.loads(json.dumps(sent))).collectives == [group]
    assert replies.Stacks.read({"ok": True, "pid": 7, "threads": []}).collectives is None
    with pytest.raises(ValueError):
        replies.Stacks.read({"ok": True, "pid": 7, "collectives": [{"group": "0", "last_entered": "many"}]})


def test_a_rank_stopped_in_the_debugger_is_shown_where_it_stopped_not_in_pydevd() -> None:
    """Ranks at a breakpoint wait in pydevd's trace function: the class shows the user's line, marked."""
    debugpy = "/venv/lib/python3.11/site-packages/debugpy/_vendored/pydevd"
    paused = [
        (TRAIN, 120, "main"),
        (TRAIN, 43, "step"),
        (f"{debugpy}/_pydevd_bundle/pydevd_trace_dispatch_regular.py", 469, "__call__"),
        (f"{debugpy}/pydevd.py", 2197, "do_wait_suspend"),
        ("/usr/lib/python3.11/threading.py", 331, "wait"),
    ]
    report: StacksReport = {"job": "j", "ranks": [rank(0, thread(paused)), rank(1, thread(paused))]}
    [c] = classify(report)
    assert [f["function"] for f in c["frames"]] == ["main", "step"]
    assert c["summary"] == "step (train.py:43) ← main (train.py:120)"
    assert c["in_debugger"] is True
    assert format_classes(report).splitlines()[0] == (
        "ranks 0-1 (2): step (train.py:43) ← main (train.py:120) [stopped in the debugger]"
    )
    # a rank running the same code is another class, and not marked
    running: StacksReport = {"job": "j", "ranks": [rank(0, thread(paused)), rank(1, thread(paused[:2]))]}
    assert sorted(c["in_debugger"] for c in classify(running)) == [False, True]
