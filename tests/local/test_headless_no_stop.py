"""``attach --headless --break FILE:LINE`` whose breakpoints no rank ever reached (a wrong line, a wrong file): the
job runs past them, and the attach says so in one line and exits 1 - not 0, as if its stops had been made.  A
headless attach without breakpoints asked for no stop, and misses none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from remote_debug.laptop.attach.attacher import AttachResult
from remote_debug.laptop.core.jobinfo import JobInfo, JobStatus
from remote_debug.laptop.ide.headless_session import HeadlessPlan, RankReport, StopRecord, missed_breakpoints
from tests.helpers.jobs import launch_job

# The rank waits for its debugger (--wait), then runs to its end without passing the NEVER line.
SCRIPT = textwrap.dedent(
    """
    def never_called():
        return "unreached"  # NEVER


    print("trained", flush=True)
    """
)
NEVER_LINE = SCRIPT.splitlines().index('    return "unreached"  # NEVER') + 1


def test_breakpoints_no_rank_reached_are_named_and_fail_the_attach(home: Path, tmp_path: Path) -> None:
    del home
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    job = launch_job("missed", project, wait_seconds=60)

    attach = [sys.executable, "-m", "remote_debug", "attach", job.name, "--no-ssh-include", "--json"]
    breakpoints = ["--break", f"train.py:{NEVER_LINE}", "--break", "other.py:1"]
    done = subprocess.run(
        [*attach, "--workspace", str(project), "--headless", *breakpoints],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )

    assert done.returncode == 1, done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    missed = [e for e in events if e["event"] == "breakpoints-missed"]
    assert missed == [
        {
            "event": "breakpoints-missed",
            "v": 1,
            "breakpoints": [f"train.py:{NEVER_LINE}", "other.py:1"],
            "ranks": [0],
            "text": f"no rank stopped at a breakpoint: train.py:{NEVER_LINE}, other.py:1 were never hit in rank 0",
        }
    ], events
    assert job.wait_status(("Completed", "Failed"), 60) == "Completed"  # the job itself went well
    assert "trained" in job.logs()


def _result(reports: list[RankReport], missed: list[str]) -> AttachResult:
    info = JobInfo(name="j", backend="local", status=JobStatus.IN_PROGRESS, secondary_status="Training", nodes=["n"])
    return AttachResult(info, [], reports, None, [], detached=True, breakpoints_missed=missed)


def test_only_breakpoints_that_no_rank_stopped_at_are_missed(tmp_path: Path) -> None:
    script = str(tmp_path / "train.py")
    plan = HeadlessPlan(breakpoints={script: [3, 7]})
    stepped = RankReport(1, "algo-1", stops=[StopRecord(script, 4, "f", "step", {})])
    at_breakpoint = RankReport(0, "algo-1", stops=[StopRecord(script, 7, "f", "breakpoint", {})])

    assert missed_breakpoints(plan, [stepped], tmp_path) == ["train.py:3", "train.py:7"]
    assert missed_breakpoints(plan, [stepped, at_breakpoint], tmp_path) == []  # one rank stopped: the plan worked
    assert missed_breakpoints(HeadlessPlan(), [], tmp_path) == []  # no breakpoints asked for no stop
    assert missed_breakpoints(HeadlessPlan(breakpoints={script: [3]}, max_stops=0), [], tmp_path) == []
    assert missed_breakpoints(HeadlessPlan(breakpoints={"/elsewhere/x.py": [2]}), [], tmp_path) == ["/elsewhere/x.py:2"]

    assert _result([stepped], ["train.py:3"]).exit_code == 1
    assert _result([at_breakpoint], []).exit_code == 0
