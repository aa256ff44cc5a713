"""A live debug session for the security scans: a local job (1 node x 2 ranks, no torch in the ranks)
attached headless in a thread under a throwaway HOME, and what the scans need to know about it.

Every process of the session inherits ``RD_TEST_TOKEN=<session dir>`` from the test process (sshd,
which starts from an empty environment, is found as a descendant), which is how scans find "ours".
"""

from __future__ import annotations

import contextlib
import os
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from remote_debug.contract.spec import NodeManifest
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions, AttachResult
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.ide.pycharm import PyCharmOptions
from remote_debug.laptop.machine.job_dir import NodeLayout
from tests.conftest import cleanup_jobs
from tests.helpers.ddp_job import break_line
from tests.helpers.event_log import EventLog
from tests.helpers.hook_runs import (
    TOKEN_ENV,
    Listener,
    argv_of,
    free_port,
    kill_all,
    listeners_of,
    pids_with_env,
    wait_for,
    with_descendants,
)
from tests.helpers.jobs import LocalJob, launch_job

# Recognisable stand-ins for the AWS credentials a user's shell carries: inherited by every process
# of the session (that is what an environment is), they must never reach a command line.
AWS_SECRET = "rdSecretAccessKey0123456789abcdefSECURITY"
AWS_SESSION_TOKEN = "rdSessionToken-FwoGZXIvYXdzEBAaDSECURITYTEST"

# A rank that idles until the test writes its ``done`` file (or 240 s pass): for attacks on a job's ports.
IDLE_UNTIL_DONE = textwrap.dedent(
    """
    import pathlib, time
    done = pathlib.Path({done!r})
    deadline = time.monotonic() + 240
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    """
)

# No torch in the ranks (torchrun itself still launches them): what is scanned is ours, not gloo's.
SCRIPT = textwrap.dedent(
    """
    import os, pathlib, time
    rank = int(os.environ["RANK"])
    done = pathlib.Path({done!r})
    deadline = time.monotonic() + 240
    step = 0
    while not done.exists() and time.monotonic() < deadline:
        if rank == 0:
            step += 1  # BREAK-HERE
        time.sleep(0.05)
    """
)


@dataclass
class Session:
    name: str
    root: Path
    home: Path
    project: Path
    job: LocalJob
    token: str  # "RD_TEST_TOKEN=<root>\0", as it appears in /proc/<pid>/environ
    events: EventLog = field(default_factory=EventLog)
    results: list[AttachResult] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    @property
    def paths(self) -> StatePaths:
        return self.job.paths

    def manifest(self) -> NodeManifest:
        m = self.job.backend.manifests(self.name)["algo-1"]
        assert m is not None
        return m

    def pids(self) -> list[int]:
        """The session's processes: job (supervisor, hook, sshd, torchrun, ranks, debugpy adapters),
        ProxyCommand relays, and this process, which runs the attach (tunnels, local forwards)."""
        return [*with_descendants(pids_with_env(self.token)), os.getpid()]

    def sshd_pid(self) -> int:
        config = self.sshd_config()
        return int((config.parent / "sshd.pid").read_text())

    def sshd_config(self) -> Path:
        """The node's sshd_config, in the hook's private dir."""
        return NodeLayout(self.paths.job_dir(self.name), "algo-1").hook_dir / "sshd_config"

    def private_key_material(self) -> list[str]:
        """The base64 lines of the job's private key and of the node's sshd host key."""
        lines = []
        for key in (self.paths.job_key(self.name), self.sshd_config().parent / "ssh_host_ed25519_key"):
            text = key.read_text()
            assert "PRIVATE KEY" in text, key
            lines += [line for line in text.splitlines() if len(line) >= 20 and "PRIVATE KEY" not in line]
        return lines

    def secrets(self) -> list[str]:
        return [*self.private_key_material(), AWS_SECRET, AWS_SESSION_TOKEN]


def role(pid: int) -> str:
    """What a process of the session is, from its command line."""
    if pid == os.getpid():
        return "attach (this process)"
    argv = argv_of(pid)
    text = " ".join(argv)
    if argv and (argv[0].endswith("sshd") or argv[0].startswith("sshd:")):
        return "sshd"
    if "remote_debug.container.node.sshd_gate" in text:  # a local job's sshd listens through its uid gate
        return "sshd"
    if "debugpy/adapter" in text or "debugpy.adapter" in text:
        return "debugpy adapter"
    if "remote_debug.container" in text:
        return "hook"
    if "torch.distributed.run" in text:
        return "torchrun"
    if "train.py" in text:
        return "rank"
    if "remote_debug proxy" in text or "remote_debug', 'proxy" in text:
        return "proxy"
    if "supervisor" in text:
        return "supervisor"
    return "other: " + text[:80]


def throwaway_home(root: Path, script: str, mp: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """Under ``root``: a HOME, a project whose ``train.py`` is ``script`` (formatted with its done file), and
    that done file (the ranks run until it exists); ``mp`` points HOME there, drops every REMOTE_DEBUG_*
    variable and marks every process the test starts with ``TOKEN_ENV=root`` (how the scans find ours)."""
    home, project, done = root / "home", root / "project", root / "done"
    home.mkdir()
    project.mkdir()
    (project / "train.py").write_text(script.format(done=str(done)))
    mp.setenv("HOME", str(home))
    for var in list(os.environ):
        if var.startswith("REMOTE_DEBUG_"):
            mp.delenv(var)
    mp.setenv(TOKEN_ENV, str(root))
    return home, project, done


@contextlib.contextmanager
def live_session(
    root: Path, name: str, ide: str, ready: Callable[[set[tuple[str, Any]]], bool], **launch: Any
) -> Iterator[Session]:
    """Launch ``name`` (1 node x 2 ranks) under a throwaway HOME, attach headless in a thread, yield
    once ``ready(events seen as (event, rank) pairs)``; stop and clean up everything afterwards."""
    mp = pytest.MonkeyPatch()
    home, project, done = throwaway_home(root, SCRIPT, mp)
    mp.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    mp.setenv("AWS_SESSION_TOKEN", AWS_SESSION_TOKEN)
    job = launch_job(name, project, nproc_per_node=2, ide=ide, **launch)
    s = Session(name, root, home, project, job, f"{TOKEN_ENV}={root}\0")
    plan = HeadlessPlan(
        breakpoints={str(project / "train.py"): [break_line(project / "train.py")]}, pause_seconds=600
    )  # (debugpy) rank 0 stays stopped until the job ends
    options = AttachOptions(
        workspace=project,
        headless=plan,
        edit_user_ssh_config=True,
        ide=Editor(ide),
        pycharm=PyCharmOptions(port=free_port(), build="any"),
    )

    def attach() -> None:
        try:
            s.results.append(Attacher(job.backend, name, options, s.events.append, job.paths).run())
        except BaseException as exc:
            s.errors.append(exc)

    thread = threading.Thread(target=attach, name=f"security-attach-{name}", daemon=True)
    try:
        thread.start()
        wait_for(
            lambda: s.errors or ready({(e["event"], e.get("rank")) for e in s.events}),
            120,
            f"the {ide} session to be ready (events: {[e['event'] for e in s.events]})",
        )
        assert not s.errors, s.errors
        yield s
    finally:
        done.write_text("")
        with contextlib.suppress(Exception):
            job.backend.stop(name, wait_seconds=20)  # a rank paused at a breakpoint: the job ends by SIGTERM
        thread.join(30)
        cleanup_jobs(job.paths)
        kill_all(s.token)
        mp.undo()


def scan_listeners(session: Session) -> dict[int, str]:
    """Every LISTEN socket of the session's processes, asserted loopback; returns port -> role."""
    pids = session.pids()
    listeners = listeners_of(pids)
    census: dict[str, int] = {}
    for pid in pids:
        census[role(pid)] = census.get(role(pid), 0) + 1
    by_role: dict[str, list[Listener]] = {}
    for listener in listeners:
        by_role.setdefault(role(listener.pid), []).append(listener)
    print(
        f"\n[security] {session.name} listeners: {len(listeners)} sockets in {len(pids)} processes {census}: "
        + "; ".join(f"{r}: {sorted(f'{x.address}:{x.port}' for x in ls)}" for r, ls in sorted(by_role.items()))
    )
    # torchrun's rendezvous store belongs to the user's launcher (SageMaker runs the same torchrun,
    # which must listen on the node's address for multi-node jobs); every other listener is ours.
    ours = [x for x in listeners if role(x.pid) != "torchrun"]
    exposed = [(role(x.pid), x) for x in ours if not x.loopback]
    assert exposed == []
    return {x.port: role(x.pid) for x in ours}
