"""What differs between IDEs in one attach, behind one small interface.

The attach core (:mod:`remote_debug.laptop.attach.attacher`) finds ranks, keeps the tunnels up and makes ranks
pause-safe; an :class:`IdeSide` decides which ranks it can debug, how a rank is exposed to the IDE
and what the IDE needs written.  Three sides: VS Code (a local forward per rank + launch.json),
headless (the same forwards, driven by the built-in DAP client) and PyCharm (the ranks connect out
to PyCharm's debug server through reverse forwards).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from remote_debug.contract import spec
from remote_debug.laptop.connection.dap_tap import TapHooks
from remote_debug.laptop.connection.pydevd_tap import PydevdHooks
from remote_debug.laptop.connection.tunnels import NodeTunnel
from remote_debug.laptop.core.jobinfo import JobInfo
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.headless_session import RankReport


@dataclass
class RankForward:
    """A rank made reachable for the IDE (``local_port`` 0: it never will be)."""

    rank: int
    node: str
    remote_port: int  # the rank's debug port on its node
    local_port: int  # where the IDE meets it on this machine
    code_dir: str  # the job's code dir on that node (path mappings)
    pid: int = 0  # the rank's process (a new one: `remote-debug run` restarted the rank)


# states in which a rank will never be debuggable again (the same for every IDE)
GONE_STATES = (spec.RankState.SKIPPED, spec.RankState.FAILED, spec.RankState.FINISHED)

# ask a rank (on its node) to connect out to the IDE now; False if it could not be asked
RankAsk = Callable[[str, spec.RankEndpoint], bool]


def local_code_root(info: JobInfo, workspace: Path) -> Path:
    """The folder on this machine whose contents are at the job's code dir: the job's source dir when it
    is a folder here (``launch --local --source-dir training/`` copies that folder's contents, not the
    workspace's), else the workspace.  A SageMaker job's source dir is an S3 upload: the workspace
    (``--workspace``) then says which folder it was."""
    source = Path(info.source_dir) if info.source_dir and "://" not in info.source_dir else None
    return source if source is not None and source.is_dir() else workspace


class IdeSide:
    """Subclasses must say ``usable`` and ``expose``; the other steps do nothing unless overridden."""

    # the editor this side serves (whose configuration it writes; the attach lock names it)
    editor: Editor
    # whether ranks listen for the IDE (debugpy: the attach asks a lazy rank to start its listener
    # first) or connect out to it (PyCharm)
    ranks_listen: bool
    # whether ranks are asked to connect out after they are exposed (PyCharm: ``connect``)
    connects_out: bool = False
    # the launch.json this side wrote, if any (VS Code)
    launch_json: Path | None = None
    # who reads the DAP of each rank's sessions (the attach's rank group: all-stop, group actions), for a
    # side whose IDE speaks DAP through our forwards; set by the attach
    taps: Callable[[int], TapHooks] | None = None
    # the same for a side whose ranks connect out to the IDE with pydevd's own protocol (PyCharm)
    pydevd_taps: Callable[[int], PydevdHooks] | None = None

    @property
    def debugger(self) -> spec.RankDebugger:
        """What a rank must run for this side (its manifest's ``ide``): the job was launched for it."""
        return self.editor.debugger

    @property
    def writes_config(self) -> bool:
        """Whether this side writes the job's IDE configuration (launch.json, a run configuration) with
        its own ports: then it is the job's one IDE attach (``attach_lock``)."""
        return False

    def set_job(self, info: JobInfo) -> None:
        """The job as the attach first sees it (running), before ``prepare``."""

    def prepare(self) -> None:
        """Before any tunnel exists: everything that can refuse (version checks, IDE files)."""

    def usable(self, rank: spec.RankEndpoint) -> bool:
        """Whether this IDE can debug the rank as it is now (if not, it never will in this attach)."""
        raise NotImplementedError

    def expose(self, tunnel: NodeTunnel, node: str, rank: spec.RankEndpoint) -> int:
        """Make the rank reachable; returns the port the IDE uses on this machine."""
        raise NotImplementedError

    def re_expose(self, tunnel: NodeTunnel, node: str, rank: spec.RankEndpoint, old: RankForward) -> int:
        """A rank's process was replaced (``remote-debug run``): make the new one reachable, on the old
        local port where the IDE side can (its configuration stays valid)."""
        del old
        return self.expose(tunnel, node, rank)

    def ranks_ready(self, forwards: list[RankForward]) -> None:
        """New ranks are exposed and every rank of the job was asked to be pause-safe: a built-in
        debugger starts here."""

    def all_ready(self, forwards: list[RankForward], world_size: int | None) -> None:
        """Discovery is over (every selected rank exposed, or the wait ran out); ``world_size``: the
        job's number of ranks, if known."""

    def asked(self, rank: int, ok: bool) -> None:
        """The attach asked ``rank`` to connect out (``ok``: it answered)."""

    def keep(self, ask: RankAsk) -> None:
        """Every poll while the job runs: a side whose ranks connect out asks them again (``ask``) when
        the IDE is back after it went away."""

    def finished(self) -> bool:
        """Whether this side is done with the job while it runs on (headless: every rank had its
        stops); an attach told to (``detach_when_done``) then detaches."""
        return False

    def rank_held(self, forward: RankForward) -> None:
        """A rank died of an uncaught exception and waits for a post-mortem debugger."""

    def finish(self) -> list[RankReport]:
        """The job has ended: what a built-in debugger saw."""
        return []

    def give_back(self) -> bool:
        """The attach is ending, however (its job ended, Ctrl-C, SIGHUP, SIGTERM): take back the IDE
        configuration that names this attach's ports, before anything that may wait on a tunnel.  Always
        called, first; must be quick and raise nothing.  False: it could not (the job's attach lock file
        stays, so that the next attach or ``prune`` tries again)."""
        return True

    def close(self) -> None:
        """Stop what this side started (always called)."""
