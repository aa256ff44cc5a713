"""The benchmark command runs to completion in its short mode and reports every measurement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def _bench(*rows: str) -> dict[str, Any]:
    """``python -m bench [ROWS] --short --json``: its rows (it fails outright when a row cannot be measured)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *rows, "--short", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_bench_short_mode_reports_every_row(home: Path) -> None:
    rows = _bench()
    p2 = rows["P2 idle overhead (call-heavy loop)"]
    assert p2["none_cpu_s"] > 0 and p2["hook_vs_none"] > 0
    p3 = rows["P3 torch CPU DDP step (attached, no breakpoints; then detached)"]
    assert p3["after_detach_step_ms"] > 0  # the bench fails outright if the rank kept its tracer after detach
    assert set(rows["P4 attach -> all ranks stopped"]) == {"1_ranks_s", "2_ranks_s"}  # every rank stopped
    assert rows["P5 DAP next latency"]["tunnel_next_ms"] > 0
    p6 = rows["P6 attach discovery, 100,000 log events before the manifest"]
    assert 0 < p6["discovery_s"] <= p6["goal_s"] == 5.0


def test_bench_pycharm_rows_connect_and_untrace_a_pycharm_rank(home: Path) -> None:
    # the rows fail outright unless the idle rank had no pydevd, the connected one a tracer, and none after
    rows = _bench("--pycharm")
    [p2] = [v for k, v in rows.items() if k.startswith("P2-PyCharm")]
    [p3] = [v for k, v in rows.items() if k.startswith("P3-PyCharm")]
    assert p2["idle_vs_none"] > 0
    assert p3["attached_step_ms"] > 0 and p3["after_detach_step_ms"] > 0 and p3["connect_s"] < 30


def test_bench_all_stop_rows_pause_and_continue_every_rank(home: Path) -> None:
    # the rows fail outright unless every rank paused after rank 0's stop and every rank ran again after Continue All
    rows = _bench("--all-stop")
    p14 = rows["P14/P15 all-stop, 8 ranks (1 x 8)"]
    assert p14["paused_s"] > 0 and p14["continue_all_s"] > 0
    p16 = rows["P16 call-heavy loop, attached all-stop vs non-stop (no stop)"]
    assert p16["ratio"] > 0 and p16["goal_ratio"] == 1.02


def test_bench_tensor_rows_show_the_view_fast_and_without_a_host_copy(home: Path) -> None:
    rows = _bench("--tensors")
    [p17] = [v for k, v in rows.items() if k.startswith("P17 ")]  # the bench fails unless the rank used our view
    assert p17["stock_frame_ms"] > 0 and p17["ours_frame_ms"] <= p17["goal_ms"] == 100.0
    assert p17["ours_rss_growth_mb"] < 64  # the 256 MiB tensor was not copied to host memory
    [storage] = [v for k, v in rows.items() if k.startswith("P17-storage")]
    assert storage["stock_frame_ms"] > storage["ours_frame_ms"] > 0


def test_bench_stacks_row_reads_every_rank_grouped(home: Path) -> None:
    # the row fails outright unless every rank was read and the ranks came back grouped in classes
    rows = _bench("--stacks")
    [p12] = [v for k, v in rows.items() if k.startswith("P12 ")]
    assert p12["cli_s"] > 0 and p12["cli_json_s"] > 0 and p12["in_process_s"] > 0
    assert p12["goal_s"] in (1.0, 2.0) and p12["cli_vs_goal"] == p12["cli_s"] / p12["goal_s"]


def test_bench_logpoint_rows_measure_every_ranks_hits_and_the_shown_output(home: Path) -> None:
    # the rows fail outright unless every logpoint hit reached the attach and the rank's prints reached its debugger
    rows = _bench("--logpoints")
    [p18] = [v for k, v in rows.items() if k.startswith("P18 ")]
    assert p18["us_per_hit"] > 0 and p18["hits_delivered"] == 4000
    [p19] = [v for k, v in rows.items() if k.startswith("P19 ")]
    assert p19["lines_shown"] > 0 and p19["before_us_per_print"] > 0
