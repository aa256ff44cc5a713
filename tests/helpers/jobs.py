"""Launch a local job and attach to it headless: the steps every end-to-end test repeats."""

from __future__ import annotations

import threading
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


class AttachInThread:
    """An attach of the job running in a thread of its own (as the CLI runs it), its events collected."""

    def __init__(self, job: LocalJob, options: AttachOptions) -> None:
        self.events: list[events.Event] = []
        self.result: AttachResult | None = None
        self.error: BaseException | None = None
        self.attacher = Attacher(job.backend, job.name, options, self.events.append, job.paths)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self.attacher.run()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def of(self, kind: type[events.Event]) -> list[events.Event]:
        return [e for e in list(self.events) if isinstance(e, kind)]

    def join(self, timeout: float) -> AttachResult:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"attach still runs: {self.events}"
        assert self.error is None, self.error
        assert self.result is not None
        return self.result
