"""The attach loop (``laptop/attach/attacher.py``) over a job that exists only in memory: no sshd, no ranks.

``tests/helpers/fake_backend.py`` scripts the job (ranks appear, restart, fail, the job ends) and fakes the
SSH half of the connection; the IDE side is the real VS Code one (launch.json in a temporary workspace),
or a recording one built on it.  What is asserted is what the loop does with what the job says: the
events it emits, the forwards and launch.json the IDE gets, what it cleans up, and its result.
"""

from __future__ import annotations

from pathlib import Path

import json5
import pytest

from remote_debug.contract import spec
from remote_debug.laptop.attach import attacher as attacher_module
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions, AttachResult, default_ide_side
from remote_debug.laptop.connection import job_connection
from remote_debug.laptop.core.backend import Backend
from remote_debug.laptop.core.errors import JobNotRunningError, UserError
from remote_debug.laptop.core.jobinfo import JobStatus
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide import IdeSide, RankForward, VsCodeIde
from remote_debug.laptop.ide.vscode_launch import launch_json_path
from remote_debug.laptop.wire import events
from tests.helpers.fake_backend import FakeBackend, FakeConnection

pytestmark = pytest.mark.timeout(10)


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    # the loop's pace is not what these tests are about; every round still runs in full
    monkeypatch.setattr(attacher_module, "POLL_SECONDS", 0.001)
    monkeypatch.setattr(attacher_module, "LOCAL_MANIFEST_POLL_SECONDS", 0.0)
    monkeypatch.setattr(job_connection, "POLL_SECONDS", 0.001)


class RecordingIde(VsCodeIde):
    """The VS Code side, recording what the loop tells it."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.told: list[tuple[str, list[int]]] = []

    def ranks_ready(self, forwards: list[RankForward]) -> None:
        if forwards:  # (every discovery round calls it, with the ranks new in that round)
            self.told.append(("ranks_ready", [f.rank for f in forwards]))

    def all_ready(self, forwards: list[RankForward], world_size: int | None) -> None:
        self.told.append(("all_ready", sorted(f.rank for f in forwards if f.local_port)))
        super().all_ready(forwards, world_size)


class Run:
    """One attach to the fake job, with everything it emitted."""

    def __init__(self, backend: FakeBackend, workspace: Path, *, recording: bool = False, **options: object) -> None:
        self.backend, self.workspace = backend, workspace
        self.events: list[events.Event] = []
        self.connection: FakeConnection | None = None
        self.ide: IdeSide | None = None
        self.options = AttachOptions(workspace=workspace, edit_user_ssh_config=False, ready_timeout=5, **options)  # type: ignore[arg-type]
        self.paths = StatePaths(workspace.parent / "state")

        def connection(b: Backend, job: str, paths: StatePaths, emit: events.Emit) -> FakeConnection:
            self.connection = FakeConnection(b, job, paths, emit)
            return self.connection

        def ide(b: Backend, job: str, opts: AttachOptions, emit: events.Emit) -> IdeSide:
            if recording:
                self.ide = RecordingIde(job, opts.workspace, emit, write_launch_json=opts.write_launch_json)
            else:
                self.ide = default_ide_side(b, job, opts, emit)
            return self.ide

        self.attacher = Attacher(
            backend, backend.job, self.options, self.events.append, self.paths, connection=connection, ide=ide
        )

    def run(self) -> AttachResult:
        return self.attacher.run()

    def of(self, kind: type[events.Event]) -> list[events.Event]:
        return [e for e in self.events if isinstance(e, kind)]

    def launch_ports(self) -> dict[str, int]:
        """launch.json's configurations of the job: name -> the port VS Code attaches to."""
        path = launch_json_path(self.workspace)
        if not path.exists():  # (the last entries taken back take the file they were written into)
            return {}
        doc = json5.loads(path.read_text())
        return {c["name"]: c["connect"]["port"] for c in doc["configurations"] if "connect" in c}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def test_ranks_that_report_late_are_forwarded_and_the_ide_told_once_all_are(workspace: Path) -> None:
    backend = FakeBackend(nproc_per_node=2)
    backend.steps = [
        lambda b: None,  # require_running
        lambda b: None,  # the nodes are up, no rank has reported: the loop waits
        lambda b: b.add_rank(0),
        lambda b: None,  # rank 0 is exposed; rank 1 still missing: not "ready" yet
        lambda b: b.add_rank(1),
        lambda b: None,
        lambda b: b.end(JobStatus.COMPLETED),
    ]
    run = Run(backend, workspace, recording=True)
    result = run.run()

    ready = [e for e in run.of(events.RankReady) if isinstance(e, events.RankReady)]
    assert [(e.rank, e.remote_port) for e in ready] == [(0, 5700), (1, 5701)]
    assert run.connection is not None
    tunnel = run.connection.fake_tunnels["algo-1"]
    assert [e.local_port for e in ready] == [tunnel.forwards[5700].local_port, tunnel.forwards[5701].local_port]
    # one debugger per rank: the forward refuses a second one, naming the rank
    assert tunnel.forwards[5700].exclusive == "rank 0 of job train"
    # the IDE side hears of each rank as it is exposed, and of "all ready" once, after the last one
    assert isinstance(run.ide, RecordingIde)
    assert run.ide.told == [("ranks_ready", [0]), ("ranks_ready", [1]), ("all_ready", [0, 1])]
    assert [e.ranks for e in run.of(events.Ready) if isinstance(e, events.Ready)] == [[0, 1]]
    # the job ended: the attach says so and returns its outcome
    assert isinstance(run.events[-1], events.JobEnded) and run.events[-1].status == JobStatus.COMPLETED
    assert result.exit_code == 0 and not result.detached
    assert [(f.rank, f.local_port) for f in result.forwards] == [(e.rank, e.local_port) for e in ready]
    # its launch.json entries named ports nobody holds once it ended: gone, and the tunnels closed
    assert run.launch_ports() == {}
    assert run.connection.closed and tunnel.closed


def test_a_restarted_rank_is_forwarded_again_on_the_port_launch_json_names(workspace: Path) -> None:
    backend = FakeBackend(nproc_per_node=2)
    backend.add_rank(0)
    backend.add_rank(1)
    seen: dict[str, int] = {}
    run: Run

    def restart(b: FakeBackend) -> None:
        seen.update(run.launch_ports())
        b.restart_rank(1, port=5801)

    def check_then_end(b: FakeBackend) -> None:
        seen_after = run.launch_ports()
        assert seen_after == seen  # VS Code's configuration stays valid across the restart
        b.end()

    backend.steps = [lambda b: None, lambda b: None, lambda b: None, restart, lambda b: None, check_then_end]
    old_pid = backend.rank(1).pid
    run = Run(backend, workspace)
    result = run.run()

    restarted = [e for e in run.of(events.RankRestarted) if isinstance(e, events.RankRestarted)]
    assert [(e.rank, e.old_pid, e.pid, e.run) for e in restarted] == [(1, old_pid, backend.rank(1).pid, 1)]
    ready = [e for e in run.of(events.RankReady) if isinstance(e, events.RankReady) and e.rank == 1]
    assert [e.remote_port for e in ready] == [5701, 5801]
    assert ready[0].local_port == ready[1].local_port  # the same local port, now reaching the new process
    assert run.connection is not None
    assert run.connection.fake_tunnels["algo-1"].retargeted == [(5701, 5801)]
    assert len(seen) == 2  # ranks 0 and 1: written before the restart
    assert {f.rank: f.remote_port for f in result.forwards} == {0: 5700, 1: 5801}


def test_a_failed_job_ends_the_attach_with_its_crash_reported(workspace: Path) -> None:
    backend = FakeBackend(nproc_per_node=2)
    backend.add_rank(0)
    backend.add_rank(1)

    def crash(b: FakeBackend) -> None:
        b.fail_rank(1, "ValueError: bad batch")
        b.end(JobStatus.FAILED, failure_reason="AlgorithmError: ValueError: bad batch")

    backend.steps = [lambda b: None, lambda b: None, lambda b: None, crash]
    run = Run(backend, workspace)
    result = run.run()

    failed = [e for e in run.of(events.RankFailed) if isinstance(e, events.RankFailed)]
    assert [(e.rank, e.error, e.held) for e in failed] == [(1, "ValueError: bad batch", False)]
    assert failed[0].traceback is not None and "ValueError" in failed[0].traceback
    ended = run.events[-1]
    assert isinstance(ended, events.JobEnded)
    assert (ended.status, ended.exit_code, ended.failure_reason) == (
        JobStatus.FAILED,
        1,
        "AlgorithmError: ValueError: bad batch",
    )
    assert result.exit_code == 1 and result.job.status == JobStatus.FAILED


def test_ctrl_c_gives_back_the_ide_configuration_and_says_nothing_more(workspace: Path) -> None:
    backend = FakeBackend(nproc_per_node=1)
    backend.add_rank(0)
    written: dict[str, int] = {}
    run: Run

    def interrupt(b: FakeBackend) -> None:
        written.update(run.launch_ports())
        raise KeyboardInterrupt

    backend.steps = [lambda b: None, lambda b: None, lambda b: None, interrupt]
    run = Run(backend, workspace)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    assert list(written) == ["remote-debug: train rank 0 (algo-1)"]  # in launch.json while attached...
    assert run.launch_ports() == {}  # ...and were taken back on the way out
    assert run.connection is not None and run.connection.closed
    # the caller prints "detached": nothing said after the interrupt, not even the job's state
    assert not run.of(events.JobEnded) and isinstance(run.events[-1], events.LaunchJson | events.Ready)
    # the job's attach lock is free again: a new attach is not refused
    assert backend.status == JobStatus.IN_PROGRESS
    again = FakeBackend(nproc_per_node=1)
    again.add_rank(0)
    again.steps = [lambda b: None, lambda b: None, lambda b: b.end()]
    assert Run(again, workspace).run().exit_code == 0


def test_lazy_ranks_are_asked_to_listen_before_they_are_forwarded(workspace: Path) -> None:
    backend = FakeBackend(nproc_per_node=2)
    backend.add_rank(0, port=0, state=spec.RankState.IDLE, control_port=6000)
    backend.add_rank(1, port=0, state=spec.RankState.IDLE, control_port=6001)
    backend.steps = [lambda b: None, lambda b: None, lambda b: None, lambda b: b.end()]
    run = Run(backend, workspace, write_launch_json=False)
    run.run()

    assert run.connection is not None
    control = run.connection.controls["algo-1"]
    assert sorted(r for op, r in control.requests if op == spec.ControlOp.LISTEN) == [0, 1]
    # the ports the ranks' listeners got are what is forwarded (not the 0 their documents said)
    ready = [e for e in run.of(events.RankReady) if isinstance(e, events.RankReady)]
    assert sorted(e.remote_port for e in ready) == [6100, 6101]
    assert [e.state for e in ready] == [spec.RankState.LISTENING] * 2


def test_a_job_launched_for_pycharm_is_refused_by_a_vscode_attach_naming_the_right_ide(workspace: Path) -> None:
    backend = FakeBackend(nproc_per_node=1)
    backend.add_rank(0, ide=spec.RankDebugger.PYDEVD)
    with pytest.raises(UserError, match="job train was launched for pycharm: attach with --ide pycharm"):
        Run(backend, workspace).run()


def test_a_job_that_has_ended_is_not_attached(workspace: Path) -> None:
    backend = FakeBackend()
    backend.end(JobStatus.COMPLETED)
    run = Run(backend, workspace)
    with pytest.raises(JobNotRunningError, match="job train is Completed: nothing to attach to"):
        run.run()
    assert run.connection is not None and not run.connection.fake_tunnels  # nothing was connected


def test_the_default_parts_are_the_real_ones(workspace: Path) -> None:
    """Without injection an attach builds today's connection and the IDE side of its options."""
    backend = FakeBackend()
    attacher = Attacher(backend, "train", AttachOptions(workspace=workspace, ide="pycharm"), events.ignore)  # type: ignore[arg-type]
    assert type(attacher.connection) is job_connection.JobConnection
    assert attacher.ide.debugger is spec.RankDebugger.PYDEVD and attacher.options.ide == "pycharm"
