"""``remote-debug attach``: from a job name to IDE-ready ranks, and keeping them reachable.

discover nodes (:class:`JobConnection`: manifests -> ssh entries -> one SSH connection per node) ->
expose every selected rank to the IDE (:class:`IdeSide`: VS Code, headless or PyCharm) -> make every
rank pause-safe -> watch the job: report crashed ranks, re-establish dropped tunnels, exit when the
job ends.

Progress is reported as typed events (:mod:`remote_debug.laptop.wire.events`) to a callback: the CLI
prints them for humans or as JSON lines for the VS Code extension.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from remote_debug.contract import spec
from remote_debug.laptop.attach.group_socket import GroupServer
from remote_debug.laptop.attach.pause_safe import PauseSafe
from remote_debug.laptop.attach.rank_group import RankGroup
from remote_debug.laptop.connection.job_connection import POLL_SECONDS, JobConnection
from remote_debug.laptop.connection.rank_control import WaitRelease, fan_out
from remote_debug.laptop.core import interrupts
from remote_debug.laptop.core.backend import Backend
from remote_debug.laptop.core.errors import JobNotRunningError, UserError, reason
from remote_debug.laptop.core.jobinfo import TERMINAL, JobInfo, JobStatus
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide import Editor, IdeSide, PyCharmOptions, RankForward, ide_side, vscode_launch
from remote_debug.laptop.ide.attach_lock import AttachLock
from remote_debug.laptop.ide.headless_session import HeadlessPlan, RankReport, missed_breakpoints
from remote_debug.laptop.wire import events
from remote_debug.oskit import peer_uid

# Said once per attach where the owner of a loopback connection cannot be told (not Linux).
UID_CHECK_UNAVAILABLE = (
    "this system cannot tell which local user opens a connection: any user of this machine who finds the "
    "forwarded ports can reach the ranks' debuggers while this attach runs"
)

__all__ = ["AttachOptions", "AttachResult", "Attacher", "RankForward"]

# how often a running attach reads the manifests again (crashed, late, restarted ranks); on SageMaker
# each read is a CloudWatch Logs query, on this machine a few small files (a re-run is seen sooner)
MANIFEST_POLL_SECONDS = 1.0
LOCAL_MANIFEST_POLL_SECONDS = 0.25
_CRASHED = (spec.RankState.FAILED, spec.RankState.HELD)


@dataclass
class AttachOptions:
    ranks: spec.RankSelection = None
    workspace: Path = field(default_factory=Path.cwd)
    write_launch_json: bool = True
    edit_user_ssh_config: bool = True
    headless: HeadlessPlan | None = None
    ready_timeout: float = 120.0  # how long to wait for nodes and ranks to publish their endpoints
    # return once the IDE side is done while the job runs on (headless: every rank had its stops),
    # instead of watching the job to its end
    detach_when_done: bool = False
    ide: Editor = Editor.VSCODE  # PyCharm: ranks connect out through reverse forwards (ide/pycharm.py)
    pycharm: PyCharmOptions = field(default_factory=PyCharmOptions)
    # any rank's stop pauses every other rank, and any Continue continues them all (rank_group.py); the
    # group actions (remote-debug ranks ACTION JOB) work either way
    all_stop: bool = False

    def __post_init__(self) -> None:
        self.ide = Editor(self.ide)  # a str from a caller ("pycharm") becomes the editor it names


@dataclass
class AttachResult:
    job: JobInfo
    forwards: list[RankForward]
    reports: list[RankReport]
    launch_json: Path | None
    aliases: list[str]
    detached: bool = False  # the attach left a job that runs on (``job`` is its status then)
    # headless: the breakpoints (FILE:LINE) when no rank stopped at any of them - a failure, whatever the job did
    breakpoints_missed: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.breakpoints_missed:
            return 1
        if self.detached:  # whether every rank's debugger did what it was asked
            return 1 if any(r.error for r in self.reports) else 0
        return 0 if self.job.status == JobStatus.COMPLETED else 1


def check_ranks(job: str, selected: spec.RankSelection, world: int) -> None:
    """Selected ranks must exist (when the world size is known)."""
    unknown = sorted(set(selected or ()) - set(range(world))) if world else []
    if unknown:
        raise UserError(f"unknown ranks {unknown} for job {job}: it has ranks 0-{world - 1}")


_ENDED = (spec.RankState.FINISHED, spec.RankState.FAILED)
_NOT_RUNNING = (*_ENDED, spec.RankState.SKIPPED)
# The processes of one run on a node start within a moment of each other (torchrun spawns its workers at once);
# an ended run's started longer before than this (its run, then a launcher's start-up).  Clock ticks: Linux's
# USER_HZ, 100 a second, of /proc/<pid>/stat's start time.
_SAME_RUN_TICKS = 100


def _of_an_ended_run(m: spec.NodeManifest, r: spec.RankEndpoint) -> bool:
    """Whether rank document ``r`` is left by a run that ended on a kept-alive node (``launch --keep-alive``):
    it stays until the rank's process in the next run (``remote-debug run``) replaces it, and that process is
    the one an attach is for.  A job without keep-alive, or on its training command, has no ended run."""
    if r.state not in _ENDED:
        return False
    if m.kept_alive_until is not None:  # the node holds: nothing runs there now
        return True
    if m.run == 0:
        return False
    # a run is on: its ranks replace the ended run's documents one by one as they start
    running = [x.start_ticks for x in m.ranks if x.state not in _NOT_RUNNING]
    if not running:
        return True
    if r.start_ticks is None or any(t is None for t in running):  # an older hook: a rank that ended is this run's
        return False
    return r.start_ticks < min(t for t in running if t is not None) - _SAME_RUN_TICKS


@dataclass
class _AwaitedRun:
    """The ranks discovery waits for in the run to come (``run``), and their nodes."""

    ranks: list[int] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    run: int = 0
    holding: bool = False  # a node of theirs runs nothing yet: the run is still to be started (`remote-debug run`)

    def add(self, node: str, m: spec.NodeManifest, rank: int) -> None:
        self.ranks.append(rank)
        self.nodes.add(node)
        holds = m.kept_alive_until is not None
        self.run = max(self.run, m.run + (1 if holds else 0))
        self.holding = self.holding or holds


# The parts an attach is built from, each given the attach's own emit (muted after a Ctrl-C): injectable,
# so that a caller (or a test) can put in its own way to the nodes, or its own IDE side.
ConnectionFactory = Callable[[Backend, str, StatePaths, events.Emit], JobConnection]
IdeSideFactory = Callable[[Backend, str, AttachOptions, events.Emit], IdeSide]


def default_ide_side(backend: Backend, job: str, options: AttachOptions, emit: events.Emit) -> IdeSide:
    """The side for the options' editor (and ``--headless``)."""
    return ide_side(
        options.ide,
        job,
        options.workspace,
        emit,
        headless=options.headless,
        write_launch_json=options.write_launch_json,
        pycharm=options.pycharm,
        runs_here=backend.capabilities.runs_here,
    )


class Attacher:
    def __init__(
        self,
        backend: Backend,
        job: str,
        options: AttachOptions,
        emit: events.Emit,
        paths: StatePaths | None = None,
        *,
        connection: ConnectionFactory = JobConnection,
        ide: IdeSideFactory = default_ide_side,
    ) -> None:
        self.backend, self.job, self.options = backend, job, options
        self._muted = False
        # every event goes through here: after a Ctrl-C the threads still winding down (headless
        # sessions, forwards) say nothing, so that "detached" is the one line the user sees
        self.emit: events.Emit = lambda event: None if self._muted else emit(event)
        self.paths = paths or StatePaths.default()
        self.connection = connection(backend, job, self.paths, self.emit)
        self.forwards: dict[int, RankForward] = {}
        self.ide: IdeSide = ide(backend, job, options, self.emit)
        self.pause_safe = PauseSafe(self.connection.control, self.emit)
        # the ranks' debug sessions as one program: all-stop, and the group actions
        self.group = RankGroup(self.emit, all_stop=options.all_stop)
        self.ide.taps = self.group.hooks
        self.ide.pydevd_taps = self.group.pydevd_hooks
        self.group_server = GroupServer(self.group, self.paths, job)
        # ranks in their --wait window that this attach did not select: told to run on, not left waiting
        self.wait_release = WaitRelease(self.connection.control)
        self._manifests: dict[str, spec.NodeManifest] = {}
        self._faults_reported: set[tuple[int, int]] = set()  # (rank, pid) whose crash was reported
        self._manifests_next = 0.0
        self._world: int | None = None  # the job's number of ranks, once known
        # a kept-alive job's ranks that discovery waits for in the run to come (their documents are an ended run's)
        self._awaited_run: _AwaitedRun | None = None

    @property
    def launch_json(self) -> Path | None:
        return self.ide.launch_json

    # --- main loop ------------------------------------------------------------------------------

    def run(self) -> AttachResult:
        info = self.connection.require_running()
        # checked before anything is written (when the backend knows the world size)
        check_ranks(self.job, self.options.ranks, len(info.nodes) * info.nproc_per_node)
        self.ide.set_job(info)
        # launch.json goes there, and headless breakpoints and path mappings are relative to it
        uses_workspace = self.options.write_launch_json or self.options.headless is not None
        if uses_workspace and not self.options.workspace.is_dir():
            raise UserError(f"workspace {self.options.workspace} is not a directory: pass --workspace DIR")
        # one IDE attach per job: a second one would move the first one's ports in the IDE's config
        lock = (
            AttachLock.acquire(self.paths, self.job, ide=self.ide.editor, workspace=self.options.workspace)
            if self.ide.writes_config
            else None
        )
        given_back = False
        try:
            if lock is not None:
                self._reclaim(lock)
            self.ide.prepare()  # e.g. PyCharm's version check and run configuration, before any tunnel
            if not peer_uid.supported():  # once per attach: the forwards cannot tell who connects
                self.emit(events.WarningEvent(code="uid-check-unavailable", message=UID_CHECK_UNAVAILABLE))
            try:
                manifests = self.connection.wait_for_manifests(self.options.ready_timeout)
            except JobNotRunningError:  # it ran when we started: it ended while its nodes were coming up
                ended = self.connection.ended()
                if ended is None:
                    raise
                return self._finish(ended)
            interrupts.check()  # a Ctrl-C swallowed so far (see interrupts.py): before we write anything
            self.connection.write_ssh_entries(manifests, edit_user_config=self.options.edit_user_ssh_config)
            try:
                self.connection.connect()
            except Exception:  # e.g. sshd already stopped: the job ending is the news, not the tunnel
                ended = self.connection.ended()
                if ended is None:
                    raise
                return self._finish(ended)
            watched = self._watch()
            return self._finish(watched) if watched.status in TERMINAL else self._detach(watched)
        except KeyboardInterrupt:
            self._muted = True  # Ctrl-C: the caller says "detached"; nothing else is worth a line now
            raise
        finally:
            try:
                # first, and not cut short by a second signal: the configuration naming our ports goes
                # while we still hold them, before closing anything that may wait on a dead tunnel
                with interrupts.deferred():
                    given_back = self.ide.give_back()
                self.group_server.close()
                self.group.close()
                self.ide.close()
                self.connection.close()
            finally:
                if lock is not None:
                    lock.release(keep=not given_back)

    def _reclaim(self, lock: AttachLock) -> None:
        """Give back what killed attaches left (their launch.json entries name ports nobody of ours holds):
        this job's previous holder's, then any other job's whose lock nobody holds."""
        try:
            if lock.previous is not None:
                vscode_launch.give_back_holder(self.job, lock.previous, self.paths)
            vscode_launch.give_back_dead_attaches(self.paths)
        except (UserError, OSError) as exc:  # not this attach's business to fail over
            self.emit(
                events.WarningEvent(message=f"cannot remove a killed attach's launch.json entries: {reason(exc)}")
            )

    def _watch(self) -> JobInfo:
        """Discover ranks until every selected one is exposed, then keep watching; the job's end, or
        (``detach_when_done``) the job still running once the IDE side is done with it."""
        deadline = time.monotonic() + self.options.ready_timeout
        all_ready = announced_ready = False
        while True:
            info = self.connection.describe()
            if info.status in TERMINAL:
                return info
            if self.options.detach_when_done and all_ready and announced_ready and self.ide.finished():
                return info
            if not all_ready:
                try:
                    all_ready = self._discover_ranks(info, ended_runs_final=time.monotonic() > deadline)
                except Exception:  # a node going away mid-discovery, because the job just ended
                    ended = self.connection.ended()
                    if ended is None:
                        raise
                    return ended
                if self._awaited_run is not None and self._awaited_run.holding:
                    # nothing runs yet: the wait is the user's (`remote-debug run` to come), not the ranks'
                    deadline = time.monotonic() + self.options.ready_timeout
                if (all_ready or time.monotonic() > deadline) and not announced_ready:
                    if not all_ready:
                        self.emit(events.WarningEvent(message="not every selected rank published a listener in time"))
                    self.ide.all_ready(list(self.forwards.values()), self._world)
                    announced_ready = True
                    self.emit(events.Ready(ranks=sorted(f.rank for f in self.forwards.values() if f.local_port)))
            else:  # discovery done: it no longer reads the manifests
                self._refresh_manifests()
                self._follow_restarts()
                self._announce_pause_safe()
            self.wait_release.release(self._manifests, self.options.ranks)
            if all_ready or announced_ready:
                self.ide.keep(self._ask_connect)  # PyCharm: ranks whose IDE went away and came back
            self._report_rank_faults()
            self.connection.keep_up()
            interrupts.check()  # a Ctrl-C whose KeyboardInterrupt was swallowed (see interrupts.py)
            time.sleep(POLL_SECONDS)

    # --- ranks ----------------------------------------------------------------------------------

    def _expected_ranks(self, manifests: dict[str, spec.NodeManifest], info: JobInfo) -> set[int]:
        world = next((r.world_size for m in manifests.values() for r in m.ranks), len(info.nodes) * info.nproc_per_node)
        if not world:  # not known before the first rank reports (SageMaker); rank 0 always exists
            return set(self.options.ranks) if self.options.ranks is not None else {0}
        self._world = world
        check_ranks(self.job, self.options.ranks, world)
        return set(range(world)) if self.options.ranks is None else set(self.options.ranks)

    def _discover_ranks(self, info: JobInfo, *, ended_runs_final: bool = False) -> bool:
        """Expose every selected rank that can be; True once all expected ranks are.  A kept-alive job's rank
        whose document is an ended run's is waited for (its process in the run that comes is the target) until
        ``ended_runs_final``: then it counts as it is (no debugger), as any rank that ended."""
        manifests = self.connection.manifests()
        expected = self._expected_ranks(manifests, info)  # the round's describe (a SageMaker API call)
        found: list[tuple[str, spec.NodeManifest, spec.RankEndpoint]] = []
        awaited = _AwaitedRun()
        for node, m in manifests.items():
            for r in m.ranks:
                if r.rank not in expected or r.rank in self.forwards:
                    continue
                if _of_an_ended_run(m, r):
                    awaited.add(node, m, r.rank)
                    if not ended_runs_final:
                        continue
                if r.ide != self.ide.debugger:
                    editor = Editor.for_debugger(r.ide)
                    raise UserError(f"job {self.job} was launched for {editor}: attach with --ide {editor}")
                if not self.ide.usable(r):
                    expected.discard(r.rank)  # it will never be debuggable; say so once
                    self.emit(events.RankUnavailable(rank=r.rank, node=node, state=r.state, error=r.error))
                    self.forwards[r.rank] = RankForward(r.rank, node, 0, 0, m.code_dir_of(r), r.pid)
                    continue
                found.append((node, m, r))
        if self.ide.ranks_listen:  # every rank's listener at once: 64 ranks in about the time of a few
            listening = fan_out(found, lambda f: self._start_listener(f[0], f[2]) if f[2].control_port > 0 else f[2])
            found = [(node, m, r) for (node, m, _), r in zip(found, listening, strict=True) if r is not None]
        new = [self._expose(node, m, r) for node, m, r in found]  # (None: retried on the next round)
        if self.ide.connects_out:  # their way to the IDE is up: ask them all to connect now
            asks = [(node, r) for node, _, r in found if r.control_port > 0]
            for (_, r), ok in zip(asks, fan_out(asks, lambda a: self._ask_connect(*a)), strict=True):
                self.ide.asked(r.rank, ok)
        self._manifests = manifests
        self._await_run(awaited, gave_up=ended_runs_final)
        # before any debugger can stop a rank: its peers must not time out in their collectives
        self._announce_pause_safe(force=bool(new))
        self.ide.ranks_ready(new)
        return expected <= set(self.forwards)

    def _await_run(self, awaited: _AwaitedRun, *, gave_up: bool) -> None:
        """Say what discovery waits for when it begins to (the ranks of the run to come), and if it gave up."""
        previous, self._awaited_run = self._awaited_run, (awaited if awaited.ranks and not gave_up else None)
        if not awaited.ranks:
            return
        if gave_up:  # once: those ranks count as ended now, and discovery does not look at them again
            self.emit(
                events.WarningEvent(
                    message=f"{events.format_rank_list(awaited.ranks)} of run {awaited.run} did not start within "
                    f"{self.options.ready_timeout:g} s: job {self.job} still shows run {awaited.run - 1}'s, which ended"
                )
            )
        elif previous is None or previous.run != awaited.run:
            self.emit(events.Waiting(what=f"the ranks of run {awaited.run}", nodes=sorted(awaited.nodes)))

    def _expose(self, node: str, m: spec.NodeManifest, r: spec.RankEndpoint) -> RankForward:
        # `remote-debug ranks` can reach the group from the first rank on (not before: an attach that fails
        # on bad input leaves nothing behind)
        self.group_server.start()
        return self._forwarded(node, m, r, self.ide.expose(self.connection.tunnel(node), node, r))

    def _forwarded(self, node: str, m: spec.NodeManifest, r: spec.RankEndpoint, local_port: int) -> RankForward:
        """Record the rank's forward and say ``rank-ready`` (a first exposure, or a restarted process)."""
        fwd = self.forwards[r.rank] = RankForward(r.rank, node, r.port, local_port, m.code_dir_of(r), r.pid)
        self.emit(
            events.RankReady(
                rank=r.rank,
                node=node,
                local_port=local_port,
                remote_port=r.port,
                state=r.state,
                ide=self.ide.debugger,
                code_dir=m.code_dir_of(r),
            )
        )
        return fwd

    def _follow_restarts(self) -> None:
        """``remote-debug run`` replaced ranks' processes (a kept-alive job): expose each new process - on
        the rank's old local port where the IDE side can, so launch.json stays valid - and tell the IDE
        side (``rank-restarted``, then ``rank-ready``): its sessions for the old processes have ended."""
        new: list[RankForward] = []
        moved = False  # a rank got another local port (or its first): the IDE's configuration changes
        for node, m in self._manifests.items():
            for r in m.ranks:
                old = self.forwards.get(r.rank)
                if old is None or r.pid == old.pid or r.ide != self.ide.debugger or not self.ide.usable(r):
                    continue  # not ours, the same process, or one that will never listen (a finished run)
                if self.ide.ranks_listen and r.control_port > 0:
                    started = self._start_listener(node, r)
                    if started is None:
                        continue  # retried on the next look
                    r = started
                self.emit(events.RankRestarted(rank=r.rank, node=node, pid=r.pid, old_pid=old.pid, run=m.run))
                local_port = self.ide.re_expose(self.connection.tunnel(node), node, r, old)
                moved = moved or local_port != old.local_port
                new.append(self._forwarded(node, m, r, local_port))
        if not new:
            return
        self._announce_pause_safe(force=True)
        self.ide.ranks_ready(new)
        if moved:
            self.ide.all_ready(list(self.forwards.values()), self._world)

    def _start_listener(self, node: str, r: spec.RankEndpoint) -> spec.RankEndpoint | None:
        """Ask a rank's control channel to start its debug listener (lazy listeners) if it has none,
        or to put tracing back after a detach."""
        try:
            listening = self.connection.control(node).listen(r)
        except (OSError, UserError) as exc:
            self.emit(events.WarningEvent(message=f"rank {r.rank}: cannot start its listener: {reason(exc)}"))
            return None
        self.pause_safe.done(r)  # "listen" made this rank's collectives pause-safe too
        self.emit(events.RankListening(rank=r.rank, node=node, remote_port=listening.port, detail=listening.detail))
        return replace(r, port=listening.port, state=spec.RankState.LISTENING)

    def _ask_connect(self, node: str, r: spec.RankEndpoint) -> bool:
        """Ask a rank that connects out (PyCharm) to connect to the IDE now; whether it answered."""
        try:
            asked = self.connection.control(node).connect(r)
        except (OSError, UserError) as exc:
            self.emit(events.WarningEvent(message=f"rank {r.rank}: cannot ask it to connect to PyCharm: {reason(exc)}"))
            return False
        # ("connect" made the rank pause-safe too, but its own pause-safe round is what reports it)
        self.emit(events.RankListening(rank=r.rank, node=node, remote_port=r.port, detail=asked.detail))
        return True

    def _announce_pause_safe(self, *, force: bool = False) -> None:
        if any(f.local_port for f in self.forwards.values()):  # only once a debugger may attach
            self.pause_safe.announce(self._manifests, force=force)

    def _refresh_manifests(self, *, force: bool = False) -> None:
        """Read the job's manifests again, at most every MANIFEST_POLL_SECONDS unless ``force``:
        discovery stops reading them once every debuggee is found, yet ranks still crash, report late
        or are restarted."""
        now = time.monotonic()
        if now < self._manifests_next and not force:
            return
        every = LOCAL_MANIFEST_POLL_SECONDS if self.backend.capabilities.runs_here else MANIFEST_POLL_SECONDS
        self._manifests_next = now + every
        try:
            self._manifests.update(self.connection.manifests())
        except (UserError, spec.ContractError, OSError):
            pass  # a transient read error: the known manifests serve until the next look

    def _report_rank_faults(self, *, final: bool = False) -> None:
        """Report each rank that died of an uncaught exception, once, with its traceback (from its rank
        document), the root cause first and marked so (``spec.failure_order``: the failure that came first);
        a rank held for a post-mortem (hold on failure) is said to be, and the IDE side is told (headless
        starts a debugger on it).  A rank held with a failed one (the whole gang: ``held_for``) is a
        ``rank-held``, after that rank's ``rank-failed``.  From the manifests read last."""
        node_of = {(r.rank, r.pid): node for node, m in self._manifests.items() for r in m.ranks}
        ranks = [r for m in self._manifests.values() for r in m.ranks]
        cause = spec.root_cause(ranks)
        for r in spec.failure_order(ranks):
            if r.state not in _CRASHED or (r.rank, r.pid) in self._faults_reported:
                continue
            node = node_of[(r.rank, r.pid)]
            if r.held_for is not None:
                told = any(rank == r.held_for for rank, _pid in self._faults_reported)
                if r.state != spec.RankState.HELD or not (told or final):
                    continue  # released already (it ended with the job), or after the failed rank's own line
                self._faults_reported.add((r.rank, r.pid))
                self.emit(
                    events.RankHeld(rank=r.rank, node=node, pid=r.pid, held_for=r.held_for, error=r.held_for_error)
                )
                continue
            if r.state == spec.RankState.FAILED and r.error is None:
                continue  # not an uncaught exception (e.g. a listener that failed to start)
            self._faults_reported.add((r.rank, r.pid))
            self.emit(
                events.RankFailed(
                    rank=r.rank,
                    node=node,
                    pid=r.pid,
                    error=r.error,
                    traceback=r.traceback,
                    held=r.state == spec.RankState.HELD,
                    # (one rank alone is nobody's root cause)
                    root_cause=r.world_size > 1 and cause is not None and (cause.rank, cause.pid) == (r.rank, r.pid),
                )
            )
            forward = self.forwards.get(r.rank)
            if r.state == spec.RankState.HELD and not final and forward is not None:
                self.ide.rank_held(forward)

    def _detach(self, info: JobInfo) -> AttachResult:
        """The IDE side is done and the job runs on: leave it (every debugger has detached already;
        closing the tunnels is all that is left)."""
        self._report_rank_faults(final=True)
        reports = self.ide.finish()
        missed = self._missed_breakpoints(reports)
        self.emit(events.Detached(job=self.job, reason=events.DetachReason.STOPS_DONE, status=info.status))
        return self._result(info, reports, detached=True, missed=missed)

    def _finish(self, info: JobInfo) -> AttachResult:
        """The job ended: report what is left to say (crashes, the end itself) and the result."""
        self._refresh_manifests(force=True)  # a crash that ended the job between two looks
        self._report_rank_faults(final=True)
        reports = self.ide.finish()
        missed = self._missed_breakpoints(reports)
        self.emit(events.JobEnded(status=info.status, exit_code=info.exit_code, failure_reason=info.failure_reason))
        return self._result(info, reports, missed=missed)

    def _missed_breakpoints(self, reports: list[RankReport]) -> list[str]:
        """Headless with breakpoints: say so when no rank stopped at one (the job ran past them: a wrong line or
        file), rather than end as if the stops had been made."""
        plan = self.options.headless
        missed = [] if plan is None else missed_breakpoints(plan, reports, self.options.workspace)
        if missed:
            self.emit(events.BreakpointsMissed(breakpoints=missed, ranks=sorted(r.rank for r in reports)))
        return missed

    def _result(
        self, info: JobInfo, reports: list[RankReport], *, detached: bool = False, missed: list[str] | None = None
    ) -> AttachResult:
        return AttachResult(
            info,
            sorted(self.forwards.values(), key=lambda f: f.rank),
            sorted(reports, key=lambda r: r.rank),
            self.launch_json,
            [e.alias for e in self.connection.entries],
            detached=detached,
            breakpoints_missed=missed or [],
        )
