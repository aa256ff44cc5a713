"""``attach --ide pycharm``: the PyCharm side of an attach (an :class:`IdeSide`).

Per attach: settle the PyCharm build (and, for local jobs, check this interpreter's
pydevd-pycharm against it), write the run configuration, and for every rank ask its node's sshd to
reverse-forward the rank's node port to the IDE port here (``reverse.IdeBridge``); then the rank is
asked (control channel ``connect``) to connect out through it.  A rank in its ``--wait`` window
tries by itself.

PyCharm may come and go while the attach runs (the user presses Stop, then Debug again; PyCharm
restarts): a rank whose connection ended removes its tracer and is idle, and :meth:`PyCharmIde.keep`
asks it again once something listens on the IDE port (found out without connecting to it).
Headless, the built-in pydevd server (``pydevd_server``) stands in for PyCharm on an ephemeral port.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from remote_debug.contract import spec
from remote_debug.laptop.connection.reverse import IdeBridge, RankOrigin, ide_listening
from remote_debug.laptop.connection.tunnels import NodeTunnel
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.ide import pycharm_setup as pycharm
from remote_debug.laptop.ide.base import GONE_STATES, IdeSide, RankAsk, RankForward
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.headless_session import HeadlessPlan, RankReport
from remote_debug.laptop.ide.pydevd_server import PydevdServer
from remote_debug.laptop.wire import events

ASK_FIRST_SECONDS = 2.0  # a rank not connected while the IDE listens is asked again after this...
ASK_MAX_SECONDS = 30.0  # ...doubling each time it still does not connect, up to this


@dataclass
class _Asked:
    node: str
    endpoint: spec.RankEndpoint
    next_at: float = 0.0  # monotonic: when it may be asked again
    interval: float = ASK_FIRST_SECONDS

    def reset(self, after: float = 0.0) -> None:
        """Ask again ``after`` seconds from now, and start the backoff over."""
        self.next_at = time.monotonic() + after if after else 0.0
        self.interval = ASK_FIRST_SECONDS


@dataclass
class PyCharmOptions:
    port: int = 0  # where PyCharm's debug server listens here; 0 = the run config's earlier port, or 12345
    build: str | None = None  # --pycharm-build: a build number, "any", or None to detect
    write_run_config: bool = True


class PyCharmIde(IdeSide):
    editor = Editor.PYCHARM
    ranks_listen = False  # a PyCharm rank connects out to the IDE's debug server...
    connects_out = True  # ...when asked, once its reverse forward is up

    def __init__(
        self,
        job: str,
        workspace: Path,
        options: PyCharmOptions,
        headless: HeadlessPlan | None,
        emit: events.Emit,
        *,
        local_job: bool,
    ) -> None:
        self.job, self.workspace, self.options, self.headless, self.emit = job, workspace, options, headless, emit
        self.local_job = local_job
        self.server: PydevdServer | None = None
        self.bridge: IdeBridge | None = None
        self.ide_port = 0
        self.run_config: Path | None = None
        self._lock = threading.Lock()
        self._asked: dict[int, _Asked] = {}  # exposed ranks that can be asked (they have a control channel)
        self._ide_was_listening = False

    @property
    def writes_config(self) -> bool:
        return self.headless is None and self.options.write_run_config

    def prepare(self) -> None:
        """Everything that can refuse happens here, before any tunnel exists."""
        build = ""
        if self.headless is None:  # a real PyCharm: its pydevd-pycharm must match
            choice = pycharm.choose_build(self.options.build)
            installed = pycharm.check_local_pydevd(choice) if self.local_job else None
            build = choice.build if choice.checked else ""
            self.emit(
                events.PycharmBuild(
                    build=choice.build, source=choice.source, others=list(choice.others), installed=installed
                )
            )
        if self.headless is not None:
            self.server = PydevdServer(self.headless, emit=self.emit, identify=self._identify)
            self.ide_port = self.server.start()
        else:
            port = self.options.port or pycharm.existing_port(self.workspace, self.job) or pycharm.DEFAULT_IDE_PORT
            self.ide_port = spec.check_port(port, "PyCharm port", allow_zero=False)
        self.bridge = IdeBridge(self.ide_port, ide_root=str(self.workspace), build=build, emit=self.emit)
        self.bridge.on_end = self._connection_ended
        if self.headless is None and self.options.write_run_config:
            self.run_config = pycharm.write_run_config(self.workspace, self.job, self.ide_port)
            self.emit(
                events.PycharmConfig(
                    path=str(self.run_config),
                    config_name=pycharm.config_name(self.job),
                    port=self.ide_port,
                    steps=pycharm.user_steps(self.job, self.ide_port, self.workspace),
                )
            )

    def _identify(self, peer_port: int) -> tuple[int, str] | None:
        origin = self.bridge.origin_of(peer_port) if self.bridge is not None else None
        return None if origin is None else (origin.rank, origin.node)

    def usable(self, rank: spec.RankEndpoint) -> bool:
        """A rank with a control channel connects whenever asked; one of an older hook only while it waits."""
        if rank.port == 0 or rank.state in GONE_STATES:
            return False
        return rank.control_port > 0 or rank.state == spec.RankState.WAITING

    def expose(self, tunnel: NodeTunnel, node: str, rank: spec.RankEndpoint) -> int:
        port = self.forward(tunnel, node, rank)
        if rank.control_port > 0:
            with self._lock:
                self._asked[rank.rank] = _Asked(node, rank)
        return port

    def asked(self, rank: int, ok: bool) -> None:
        """The attach asked ``rank`` to connect (``ok``: it answered): the next ask waits, longer each time."""
        with self._lock:
            entry = self._asked.get(rank)
            if entry is None:
                return
            entry.next_at = time.monotonic() + entry.interval
            if ok:
                entry.interval = min(ASK_MAX_SECONDS, entry.interval * 2)

    def keep(self, ask: RankAsk) -> None:
        """Ask the exposed ranks that have no connection to the IDE while it listens (it came back)."""
        if self.bridge is None:
            return
        listening = self.server is not None or ide_listening(self.ide_port)
        now = time.monotonic()
        with self._lock:
            if listening and not self._ide_was_listening:  # back (or up for the first time): ask soon
                for entry in self._asked.values():
                    entry.reset()
            self._ide_was_listening = listening
            due = [
                (rank, entry)
                for rank, entry in self._asked.items()
                if listening and now >= entry.next_at and not self.bridge.connected(rank)
            ]
        for rank, entry in due:
            self.asked(rank, ask(entry.node, entry.endpoint))

    def _connection_ended(self, origin: RankOrigin) -> None:
        """A rank's session with the IDE ended: it is idle again; ask it soon if the IDE still listens."""
        with self._lock:
            entry = self._asked.get(origin.rank)
            if entry is not None:
                entry.reset(after=ASK_FIRST_SECONDS)
        if self.server is None:  # headless: the stand-in says it itself
            self.emit(events.RankDetached(rank=origin.rank, node=origin.node, error=None))

    def rank_held(self, forward: RankForward) -> None:
        """A crashed rank waits for PyCharm (it tries by itself too): ask it now."""
        with self._lock:
            entry = self._asked.get(forward.rank)
            if entry is not None:
                entry.reset()

    def finished(self) -> bool:
        """Headless: every exposed rank had its stops (then the attach detaches, and the ranks untrace)."""
        if self.server is None:
            return False
        with self._lock:
            ranks = set(self._asked)
        return bool(ranks) and ranks <= self.server.done_ranks()

    def forward(self, tunnel: NodeTunnel, node: str, endpoint: spec.RankEndpoint) -> int:
        """Reverse-forward the rank's node port to the IDE port; returns the IDE port."""
        assert self.bridge is not None, "prepare() first"
        try:
            tap = self.pydevd_taps(endpoint.rank) if self.pydevd_taps is not None else None
            tunnel.reverse_forward(endpoint.port, self.bridge.handler_for(endpoint.rank, node, endpoint.port, tap))
        except Exception as exc:  # sshd refused (port taken on the node): one line for this rank
            raise UserError(f"cannot reverse-forward port {endpoint.port} on {node}: {exc}") from None
        return self.ide_port

    def finish(self, timeout: float = 10.0) -> list[RankReport]:
        """Let the stand-in IDE finish its sessions (the job has ended) and return its reports."""
        if self.server is None:
            return []
        if self.finished():  # every rank had its stops: end the sessions (ranks still running untrace)
            self.server.close()
        self.server.join(timeout)
        return list(self.server.reports)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
