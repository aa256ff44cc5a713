"""``remote-debug demo``: the main job on the embedded default backend.

Launches the shipped DDP example as a SageMaker-shaped local job (ranks wait for a debugger) and
attaches to every rank: headless, the built-in DAP client stops each rank at the marked line,
reads its locals, steps once and continues; otherwise VS Code gets a launch.json to attach with.
"""

from __future__ import annotations

import secrets
import shutil
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from remote_debug.contract.spec import DebugOptions
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions, AttachResult
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.ide.pycharm import PyCharmOptions
from remote_debug.laptop.ide.pycharm_setup import check_local_pydevd, choose_build
from remote_debug.laptop.machine.backend import LaunchRequest
from remote_debug.laptop.platforms import MachineBackend
from remote_debug.laptop.wire import events as ev

EXAMPLE = "train_ddp.py"
MARKER = "# REMOTE-DEBUG-BREAKPOINT"  # the comment, not the docstring that mentions it
WATCH = ("rank", "world_size", "step", "loss_value", "shard_marker")


def marker_line(path: Path) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if MARKER in line:
            return number
    raise ValueError(f"{path} has no {MARKER} line")


def prepare_workspace(paths: StatePaths) -> Path:
    """A fresh copy of the example: the demo's 'project', opened in VS Code and mapped to the job's code."""
    workspace = paths.root / "demo" / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    source = resources.files("remote_debug.examples").joinpath(EXAMPLE)
    with resources.as_file(source) as src:
        shutil.copyfile(src, workspace / EXAMPLE)
    return workspace


@dataclass
class DemoResult:
    job: str
    workspace: Path
    seconds: float
    attach: AttachResult

    @property
    def exit_code(self) -> int:
        return int(self.attach.job.exit_code if self.attach.job.exit_code is not None else 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "exit_code": self.exit_code,
            "status": self.attach.job.status,
            "seconds": round(self.seconds, 2),
            "workspace": str(self.workspace),
            "launch_json": str(self.attach.launch_json) if self.attach.launch_json else None,
            "ranks": [r.to_json() for r in self.attach.reports],
        }


def run_demo(
    *,
    nodes: int,
    nproc_per_node: int,
    headless: bool,
    wait_seconds: float,
    emit: ev.Emit,
    paths: StatePaths | None = None,
    ide: Editor = Editor.VSCODE,
    pycharm: PyCharmOptions | None = None,
) -> DemoResult:
    paths = paths or StatePaths.default()
    if ide == Editor.PYCHARM and not headless:  # refuse a mismatched pydevd-pycharm before a job exists
        check_local_pydevd(choose_build((pycharm or PyCharmOptions()).build))
    started = time.monotonic()
    workspace = prepare_workspace(paths)
    script = workspace / EXAMPLE
    job = time.strftime("demo-%Y%m%d-%H%M%S-") + secrets.token_hex(2)
    backend = MachineBackend(paths)
    backend.launch(
        LaunchRequest(
            command=["python", EXAMPLE],
            name=job,
            source_dir=workspace,
            nodes=nodes,
            nproc_per_node=nproc_per_node,
            options=DebugOptions(ide=Editor(ide).debugger, wait_seconds=wait_seconds),
            hyperparameters={"steps": "3"},
        )
    )
    emit(ev.Launched(job=job, workspace=str(workspace), nodes=nodes, nproc_per_node=nproc_per_node))
    plan = (
        HeadlessPlan(breakpoints={str(script): [marker_line(script)]}, steps=1, max_stops=1, watch=WATCH)
        if headless
        else None
    )
    options = AttachOptions(
        workspace=workspace,
        headless=plan,
        ready_timeout=max(60.0, wait_seconds),
        ide=ide,
        pycharm=pycharm or PyCharmOptions(),
    )
    result = Attacher(backend, job, options, emit, paths).run()
    return DemoResult(job, workspace, time.monotonic() - started, result)
