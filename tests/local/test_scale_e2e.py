"""64 ranks (8 nodes x 8, each node in its own network namespace; root only): a running job's every
rank stops at a breakpoint with its own values in one headless attach, and ``remote-debug stacks``
lists all 64.  Light ranks (plain Python, no torch): what is measured is the attach, not training."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from remote_debug.contract import spec
from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.machine.job_dir import read_job_file
from remote_debug.oskit import netns
from tests.helpers.event_log import EventLog
from tests.helpers.jobs import LocalJob, launch_job
from tests.helpers.waiting import wait_for

NODES, PER_NODE = 8, 8
RANKS = NODES * PER_NODE

# each rank computes a value of its own before the breakpoint: a session attached to the wrong rank
# (or a mixed-up forward) would show another rank's number
LIGHT_RANK = textwrap.dedent(
    """
    import os, time
    rank = int(os.environ["RANK"])
    node_of_rank = os.environ["SM_CURRENT_HOST"]
    for step in range(100000):
        mine = rank * 1000 + 7  # SCALE-BREAK
        time.sleep(0.05)
    """
)


def _running_idle(job: LocalJob) -> bool:
    ranks = [r for m in job.backend.manifests(job.name).values() if m for r in m.ranks]
    return len(ranks) == RANKS and all(r.state == spec.RankState.IDLE for r in ranks)


@pytest.mark.skipif(not netns.available(), reason="network namespaces need root and iproute2")
def test_64_ranks_of_a_running_job_stop_with_their_own_values_and_stacks_lists_them(
    home: Path, tmp_path: Path, job_namespaces: list[str]
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "ranks.py").write_text(LIGHT_RANK)
    line = next(i for i, text in enumerate(LIGHT_RANK.splitlines(), 1) if "SCALE-BREAK" in text)
    job = launch_job("scale64", project, ["python", "ranks.py"], nodes=NODES, nproc_per_node=PER_NODE)
    job_namespaces.extend(read_job_file(job.paths.job_dir("scale64"))["netns"])
    # a job that runs undebugged (no --wait): every rank idle, no debugpy imported, until the attach asks
    wait_for(lambda: _running_idle(job), 120, "64 idle ranks")

    events = EventLog()
    plan = HeadlessPlan(breakpoints={str(project / "ranks.py"): [line]}, max_stops=1, attach_timeout=120)
    result = job.attach(
        AttachOptions(
            workspace=project,
            headless=plan,
            ready_timeout=120,
            write_launch_json=False,
            edit_user_ssh_config=False,
            detach_when_done=True,
        ),
        events.append,
    )

    assert result.detached and result.exit_code == 0
    assert sorted(r.rank for r in result.reports) == list(range(RANKS))
    for report in result.reports:
        assert report.error is None, (report.rank, report.error)
        [stop] = report.stops
        assert stop.line == line
        assert stop.variables["rank"] == str(report.rank)
        assert stop.variables["mine"] == str(report.rank * 1000 + 7)
        # node algo-N holds ranks 8(N-1)..8N-1: the session really reached that node's process
        assert report.node == f"algo-{report.rank // PER_NODE + 1}"
        assert stop.variables["node_of_rank"] == repr(report.node)

    out = subprocess.run(
        [str(Path(sys.executable).parent / "remote-debug"), "stacks", "scale64", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    listed = json.loads(out.stdout)["ranks"]
    assert [r["rank"] for r in listed] == list(range(RANKS))
    for r in listed:
        assert r["error"] is None, r
        frames = [f for t in r["threads"] for f in t["frames"]]
        assert any(f["file"].endswith("ranks.py") and f["function"] == "<module>" for f in frames), r
    assert job.backend.describe("scale64").status == "InProgress"  # the attach detached; the job ran on
    job.backend.stop("scale64", wait_seconds=60)
