"""Pause-safe when the debugger comes early: ranks launched with ``--wait`` (as the SageMaker templates do)
are attached, and asked to be pause-safe, before the script imports torch.  The rank raises its
process-group timeout itself once ``init_process_group`` returns, before the script's first collective.

The script asks for a 3 s process-group timeout; rank 0 is held 6 s at a breakpoint right after init while
rank 1 is already in an ``all_reduce``.  Pause-safe: the job completes.  ``REMOTE_DEBUG_PG_TIMEOUT=0``
(pause-safe off): rank 1's all_reduce times out and the job fails, which shows that the first run passes
only because of pause-safe.  Real ranks (gloo on CPU) under torchrun, and under Open MPI's ``mpirun``."""

from __future__ import annotations

import importlib.util
import os
import shutil
import textwrap
import time
from pathlib import Path

import pytest

from remote_debug.contract import spec
from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.machine.backend import free_port
from remote_debug.laptop.wire import events as ev
from tests.helpers.ddp_job import break_line
from tests.helpers.event_log import EventLog
from tests.helpers.jobs import launch_job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

PG_TIMEOUT = 3  # seconds: what the script asks init_process_group for
HELD = 6  # seconds rank 0 stays stopped at its breakpoint

# rank and world from torchrun's variables, or Open MPI's (then the rendezvous address comes from the test)
HEAD = textwrap.dedent(
    """
    import os, pathlib, sys, time
    from datetime import timedelta

    marks = pathlib.Path({marks!r})
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        os.environ.update(
            RANK=os.environ["OMPI_COMM_WORLD_RANK"],
            WORLD_SIZE=os.environ["OMPI_COMM_WORLD_SIZE"],
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT={master_port!r},
        )
    rank = os.environ["RANK"]
    """
)
# launched with --wait: the debugger is attached (the wait window is over) and torch is not imported yet
BEFORE_IMPORT = """
(marks / ("imported-" + rank)).write_text(repr("torch.distributed" in sys.modules))
"""
# launched without --wait (lazy listeners): the script holds its import of torch.distributed at the moment
# c10d is half-imported (in sys.modules, its functions not all defined) until its debugger has attached;
# the attach asks the rank to listen, and so to be pause-safe, in that moment.  The hold is in the loader
# of the next torch.distributed module c10d imports, never in a finder: Python calls finders holding its
# global import lock, and the rank's listen thread, importing debugpy meanwhile, would wait for it forever
DURING_IMPORT = textwrap.dedent(
    """
    import importlib.machinery

    def hold_until_attached():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            debugpy = sys.modules.get("debugpy")  # imported by the rank's listen, in its control thread
            try:
                if debugpy is not None and debugpy.is_client_connected():
                    debugpy.wait_for_client()  # the IDE's breakpoints are set
                    break
            except AttributeError:  # debugpy half-imported
                pass
            time.sleep(0.05)
        # both ranks attached before either goes on: init_process_group's rendezvous has only the
        # script's 3 s, and on a loaded machine one rank's attach can come that much after the other's
        (marks / ("attached-" + rank)).write_text("")
        world = int(os.environ["WORLD_SIZE"])
        while time.monotonic() < deadline and len(list(marks.glob("attached-*"))) < world:
            time.sleep(0.05)

    class HeldLoader:
        def __init__(self, loader):
            self.loader = loader

        def __getattr__(self, name):
            return getattr(self.loader, name)

        def create_module(self, spec):
            return self.loader.create_module(spec)

        def exec_module(self, module):
            c10d = sys.modules["torch.distributed.distributed_c10d"]
            half = c10d.__spec__._initializing and not hasattr(c10d, "init_process_group")
            (marks / ("half-imported-" + rank)).write_text(repr(half))
            hold_until_attached()
            self.loader.exec_module(module)

    class HoldTheImport:
        held = False

        def find_spec(self, name, path=None, target=None):
            if self.held or "torch.distributed.distributed_c10d" not in sys.modules:
                return None
            if not name.startswith("torch.distributed."):
                return None
            self.held = True
            spec = importlib.machinery.PathFinder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = HeldLoader(spec.loader)
            return spec

    sys.meta_path.insert(0, HoldTheImport())
    """
)
BODY = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds={timeout}))
    flag = torch.ones(1)
    if dist.get_rank() == 0:
        held = 1  # BREAK-HERE
    dist.all_reduce(flag)  # rank 1 waits here while rank 0 is held
    print("rank", rank, "reduced", int(flag.item()), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    """
)


def _mpirun() -> list[str]:
    command = ["mpirun", "-n", "2", "--oversubscribe", "--mca", "btl", "self,vader"]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    return [*command, "python", "train.py"]


_MPI = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is needed (apt openmpi-bin)")
LAUNCHERS = [pytest.param("torchrun", id="torchrun"), pytest.param("mpirun", id="mpirun", marks=_MPI)]


def _attach_early(tmp_path: Path, launcher: str, *, during_import: bool = False) -> tuple[str, EventLog, float, str]:
    """Launch, attach headless (every rank; a breakpoint that only rank 0 reaches, held :data:`HELD` s)
    and watch the job to its end: its status, the attach's events, how long after rank 0 stopped the
    attach returned, the job's output."""
    project, marks = tmp_path / "project", tmp_path / "marks"
    project.mkdir()
    marks.mkdir()
    script = project / "train.py"
    template = HEAD + (DURING_IMPORT if during_import else BEFORE_IMPORT) + BODY
    script.write_text(template.format(marks=str(marks), master_port=str(free_port()), timeout=PG_TIMEOUT))
    wait = 0 if during_import else 120  # --wait: the ranks wait for their debugger before the script runs
    if launcher == "torchrun":
        job = launch_job("early", project, nproc_per_node=2, wait_seconds=wait)
    else:  # one process (mpirun) under the hook; mpirun starts the two ranks
        job = launch_job("early", project, _mpirun(), wait_seconds=wait)
    events = EventLog()
    stopped: list[float] = []

    def emit(event: ev.Event) -> None:
        events.append(event)
        if isinstance(event, ev.Stopped):
            stopped.append(time.monotonic())

    plan = HeadlessPlan(breakpoints={str(script): [break_line(script)]}, pause_seconds=HELD)
    result = job.attach(AttachOptions(workspace=project, headless=plan, write_launch_json=False), emit)
    held = time.monotonic() - stopped[0] if stopped else 0.0
    mark = "half-imported-" if during_import else "imported-"
    # the situation under test was real: mid-import (c10d half-imported), or before any torch import
    expected = "True" if during_import else "False"
    assert {p.name: p.read_text() for p in marks.glob(mark + "*")} == {mark + "0": expected, mark + "1": expected}
    return result.job.status, events, held, job.logs()


def _asked_before_init(events: EventLog) -> None:
    """Both ranks were asked (by "listen") while they had no process group: they raised it themselves."""
    listening = {e["rank"]: e["detail"] for e in events if e["event"] == "rank-listening"}
    assert listening == {0: "pending: no process group yet", 1: "pending: no process group yet"}, events


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_attached_before_torch_is_imported_survives_a_pause_longer_than_its_pg_timeout(
    home: Path, tmp_path: Path, launcher: str
) -> None:
    status, events, held, logs = _attach_early(tmp_path, launcher)

    assert status == "Completed", (events, logs[-6000:])
    assert logs.count("reduced 2") == 2
    assert held >= HELD
    _asked_before_init(events)
    assert "cannot raise the process-group timeout" not in logs


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_without_pause_safe_the_same_pause_kills_the_job(
    home: Path, tmp_path: Path, launcher: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(spec.ENV_PG_TIMEOUT, "0")  # inherited by the local job's ranks
    status, events, _, logs = _attach_early(tmp_path, launcher)

    assert status == "Failed", (events, logs[-6000:])
    assert f"Timed out waiting {PG_TIMEOUT * 1000}ms" in logs
    assert "reduced 2" not in logs


@pytest.mark.parametrize("pg_timeout", ["", "0"], ids=["pause-safe", "pause-safe-off"])
def test_a_rank_attached_while_it_imports_torch_distributed_survives_the_pause(
    home: Path, tmp_path: Path, pg_timeout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(spec.ENV_PG_TIMEOUT, pg_timeout)  # "": the default, 7200 s
    status, events, held, logs = _attach_early(tmp_path, "torchrun", during_import=True)

    if pg_timeout == "0":  # the same pause without pause-safe: the test can fail
        assert status == "Failed", (events, logs[-6000:])
        assert f"Timed out waiting {PG_TIMEOUT * 1000}ms" in logs
        return
    assert status == "Completed", (events, logs[-6000:])
    assert logs.count("reduced 2") == 2
    assert held >= HELD
    _asked_before_init(events)
    assert "cannot raise the process-group timeout" not in logs
