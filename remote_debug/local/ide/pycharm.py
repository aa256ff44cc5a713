"""``attach --ide pycharm``: the PyCharm side of an attach (an :class:`IdeSide`).

Per attach: settle the PyCharm build (and, for local jobs, check this interpreter's
pydevd-pycharm against it), write the run configuration, and for every waiting rank ask its
node's sshd to reverse-forward the rank's node port to the IDE port here (``reverse.IdeBridge``).
Headless, the built-in pydevd server (``pydevd_server``) stands in for PyCharm on an ephemeral port.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from remote_debug import spec
from remote_debug.local import events, pycharm
from remote_debug.local.errors import UserError
from remote_debug.local.headless import HeadlessPlan, RankReport
from remote_debug.local.ide.base import IdeSide
from remote_debug.local.pydevd_server import PydevdServer
from remote_debug.local.reverse import IdeBridge
from remote_debug.local.tunnels import NodeTunnel


@dataclass
class PyCharmOptions:
    port: int = 0  # where PyCharm's debug server listens here; 0 = the run config's earlier port, or 12345
    build: str | None = None  # --pycharm-build: a build number, "any", or None to detect
    write_run_config: bool = True


class PyCharmIde(IdeSide):
    ide = spec.IDE.PYCHARM
    ranks_listen = False  # a PyCharm rank connects out to the IDE's debug server

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
        """A PyCharm rank can be reached only while it waits: afterwards it never connects out again."""
        return rank.port != 0 and rank.state == spec.RankState.WAITING

    def expose(self, tunnel: NodeTunnel, node: str, rank: spec.RankEndpoint) -> int:
        return self.forward(tunnel, node, rank)

    def forward(self, tunnel: NodeTunnel, node: str, endpoint: spec.RankEndpoint) -> int:
        """Reverse-forward the rank's node port to the IDE port; returns the IDE port."""
        assert self.bridge is not None, "prepare() first"
        try:
            tunnel.reverse_forward(endpoint.port, self.bridge.handler_for(endpoint.rank, node, endpoint.port))
        except Exception as exc:  # sshd refused (port taken on the node): one line for this rank
            raise UserError(f"cannot reverse-forward port {endpoint.port} on {node}: {exc}") from None
        return self.ide_port

    def finish(self, timeout: float = 10.0) -> list[RankReport]:
        """Let the stand-in IDE finish its sessions (the job has ended) and return its reports."""
        if self.server is None:
            return []
        self.server.join(timeout)
        return list(self.server.reports)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
