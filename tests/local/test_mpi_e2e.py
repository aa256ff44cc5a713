"""MPI ranks (Open MPI's ``mpirun`` + mpi4py) get a debugger each, like torchrun ranks: the hook wraps
``mpirun``, every rank finds its identity in ``OMPI_COMM_WORLD_*``, and attach stops both at a breakpoint."""

from __future__ import annotations

import importlib.util
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from tests.helpers.ddp_job import break_line
from tests.helpers.jobs import launch_job

pytestmark = pytest.mark.skipif(
    shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None,
    reason="Open MPI (apt openmpi-bin) and mpi4py are needed (./dev setup installs both)",
)

SCRIPT = textwrap.dedent(
    """
    import sys
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    total = comm.allreduce(rank + 1)
    secret = 1000 + 7 * rank  # BREAK-HERE
    # one write per line: the ranks share mpirun's stdout, unbuffered, and print() writes each piece
    sys.stdout.write(f"rank {rank} total {total + secret}\\n")
    comm.Barrier()
    """
)


def test_both_mpi_ranks_stop_at_the_breakpoint_through_ssh(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = project / "train.py"
    script.write_text(SCRIPT)
    mpirun = ["mpirun", "-n", "2", "--oversubscribe", "--mca", "btl", "self,vader"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    # one "node" with one process (mpirun) under the hook; mpirun starts the two ranks
    job = launch_job("mpi", project, [*mpirun, "python", "train.py"], wait_seconds=90)
    plan = HeadlessPlan(breakpoints={str(script): [break_line(script)]}, steps=1)
    result = job.attach(AttachOptions(workspace=project, headless=plan, write_launch_json=False))

    assert result.job.status == "Completed", (result.job.failure_reason, job.logs())
    assert [r.rank for r in result.reports] == [0, 1]
    for report in result.reports:
        assert report.error is None, report.error
        first, after_step = report.stops[0], report.stops[1]
        assert first.line == break_line(script)
        assert first.variables["rank"] == str(report.rank)
        assert first.variables["total"] == "3"  # the allreduce of 1 + 2 happened
        assert after_step.variables["secret"] == str(1000 + 7 * report.rank)
    assert "total 1003" in job.logs() and "total 1010" in job.logs()
