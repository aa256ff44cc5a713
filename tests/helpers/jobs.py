"""Launch a local job and attach to it headless: the steps every end-to-end test repeats."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from remote_debug.contract.spec import DebugOptions
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions, AttachResult
from remote_debug.laptop.core.jobinfo import JobInfo
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.machine.backend import LaunchRequest
from remote_debug.laptop.platforms import MachineBackend
from remote_debug.laptop.wire import events


@dataclass
class LocalJob:
    """A job launched on the local backend under the test's HOME (the ``home`` fixture stops it)."""

    name: str
    project: Path
    paths: StatePaths = field(default_factory=StatePaths.default)
    info: JobInfo | None = None  # what launch returned

    @property
    def backend(self) -> MachineBackend:
        return MachineBackend(self.paths)

    def attach(self, options: AttachOptions, emit: events.Emit | None = None) -> AttachResult:
        return Attacher(self.backend, self.name, options, emit or events.ignore, self.paths).run()

    def status(self) -> str:
        return self.backend.describe(self.name).status

    def wait_status(self, statuses: tuple[str, ...], timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status in statuses:
                return status
            time.sleep(0.2)
        raise AssertionError(f"job {self.name} stayed {self.status()}")

    def logs(self) -> str:
        return "".join(p.read_text() for p in sorted((self.paths.job_dir(self.name) / "logs").glob("*.log")))


def launch_job(name: str, project: Path, command: list[str] | None = None, **request: Any) -> LocalJob:
    """``remote-debug launch --local`` in-process: ``request`` takes LaunchRequest's fields and
    DebugOptions' (``wait_seconds=``, ``ide=``...), which go into the request's ``options``."""
    chosen = {f.name: request.pop(f.name) for f in fields(DebugOptions) if f.name in request}
    job = LocalJob(name, project)
    job.info = job.backend.launch(
        LaunchRequest(
            command=command or ["python", "train.py"],
            name=name,
            source_dir=request.pop("source_dir", project),
            options=DebugOptions(**chosen),
            **request,
        )
    )
    return job
