"""VS Code (and any DAP client): a local forward per rank to its debugpy listener, and launch.json."""

from __future__ import annotations

import functools
from pathlib import Path

from remote_debug.contract import spec
from remote_debug.contract.spec import LOOPBACK
from remote_debug.laptop.connection.tunnels import NodeTunnel
from remote_debug.laptop.core import interrupts
from remote_debug.laptop.core.errors import UserError, reason
from remote_debug.laptop.core.jobinfo import JobInfo
from remote_debug.laptop.ide import vscode_launch
from remote_debug.laptop.ide.base import GONE_STATES, IdeSide, RankForward, local_code_root
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.wire import events


class VsCodeIde(IdeSide):
    editor = Editor.VSCODE
    ranks_listen = True

    def __init__(self, job: str, workspace: Path, emit: events.Emit, *, write_launch_json: bool) -> None:
        self.job, self.workspace, self.emit = job, workspace, emit
        self.write_launch_json = write_launch_json
        # the folder here whose contents are at the job's code dir (pathMappings' localRoot): the
        # workspace, unless the attach knows the job's source dir is a folder of its own (set_job)
        self.local_root = workspace

    def set_job(self, info: JobInfo) -> None:
        self.local_root = local_code_root(info, self.workspace)

    @property
    def writes_config(self) -> bool:
        return self.write_launch_json

    def usable(self, rank: spec.RankEndpoint) -> bool:
        # a rank with a control channel gets its listener on request (lazy ranks), or has tracing
        # put back after a detach
        return (rank.port != 0 or rank.control_port > 0) and rank.state not in GONE_STATES

    def expose(self, tunnel: NodeTunnel, node: str, rank: spec.RankEndpoint) -> int:
        # one debugger per rank: a second one is refused in DAP, with a message naming the rank
        return tunnel.forward(
            rank.port,
            exclusive=f"rank {rank.rank} of job {self.job}",
            on_refuse=functools.partial(self._debugger_refused, rank.rank, node),
            tap=self.taps(rank.rank) if self.taps is not None else None,
        )

    def re_expose(self, tunnel: NodeTunnel, node: str, rank: spec.RankEndpoint, old: RankForward) -> int:
        # the forward follows the new process: launch.json and the extension's sessions keep their port
        if old.local_port and old.node == node:
            tunnel.retarget(old.remote_port, rank.port)
        return self.expose(tunnel, node, rank)

    def give_back(self) -> bool:
        # our entries name this attach's forwarded ports: once it ends nobody of ours holds them, and
        # any local user could bind one and be the next F5's debugger
        if not self.write_launch_json:
            return True
        try:
            vscode_launch.remove_job_configs(self.workspace, self.job)
        except (UserError, OSError) as exc:
            self.emit(
                events.WarningEvent(
                    message=f"cannot remove job {self.job}'s entries from launch.json: "
                    f"{reason(exc)}; the next attach or 'remote-debug prune' removes them"
                )
            )
            return False
        return True

    def _debugger_refused(self, rank: int, node: str, message: str) -> None:
        # a warning: the CLI and the extension already show those to the user
        self.emit(events.WarningEvent(code="debugger-refused", rank=rank, node=node, message=message))

    def all_ready(self, forwards: list[RankForward], world_size: int | None) -> None:
        if not self.write_launch_json:
            return
        targets = [
            vscode_launch.RankTarget(
                job=self.job,
                rank=f.rank,
                node=f.node,
                host=LOOPBACK,
                port=f.local_port,
                local_root=str(self.local_root),
                remote_root=f.code_dir,
            )
            for f in sorted(forwards, key=lambda f: f.rank)
            if f.local_port
        ]
        if not targets:
            return
        interrupts.check()  # a Ctrl-C swallowed so far (see interrupts.py): before we write
        self.launch_json = vscode_launch.update_launch_json(self.workspace, self.job, targets, world_size=world_size)
        self.emit(
            events.LaunchJson(
                path=str(self.launch_json),
                compound=vscode_launch.compound_name(self.job, [t.rank for t in targets], world_size),
                configurations=[vscode_launch.config_name(self.job, t.rank, t.node) for t in targets],
            )
        )
