"""The supervisor of an adopted job: what ``supervisor.py`` is for a launched one, minus starting the command.

``remote-debug adopt --pid`` starts ``python -m remote_debug.laptop.machine.adopted_supervisor JOB_DIR`` detached.  It
starts each node's daemon (``python -m remote_debug.container --node-daemon --parent-pid ROOT``: sshd +
node manifest, exactly as a hook-less SageMaker node runs them), keeps job.json current, and records the
end when every adopted root process has exited.  It did not start those processes, so it cannot know
their exit codes: the job ends "Completed" with no exit code, and says so.

``stop`` (SIGTERM) does what StopTrainingJob does: SIGTERM to each node's root process (torchrun passes it
to its ranks), SIGKILL after the grace; recorded "Stopped".  SIGUSR1 is adopt's own undo ("forget"): the
daemons end, the adopted processes are left alone.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import remote_debug.oskit.netns as netns
from remote_debug.laptop.core.jobinfo import JobStatus
from remote_debug.laptop.machine.job_dir import NodeLayout, read_job_file, write_job_file
from remote_debug.laptop.machine.supervisor import environment_without_spec
from remote_debug.oskit import osutil

POLL_SECONDS = 0.2
ENDED_NOTE = "the adopted process ended; its exit code is known only to its own parent"


class AdoptedSupervisor:
    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self.state: dict[str, Any] = read_job_file(job_dir)
        adopted = self.state["adopted"]
        starts = adopted.get("root_starts") or {}  # (absent: a job adopted by an older version, pid alone)
        self.roots: dict[str, osutil.ProcessRecord] = {
            n: osutil.ProcessRecord(int(p), starts.get(n)) for n, p in adopted["roots"].items()
        }
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.stop_deadline: float | None = None
        self.forget = False
        self.grace = float(self.state.get("stop_grace_seconds", 30))

    def _save(self, **changes: Any) -> None:
        self.state.update(changes)
        write_job_file(self.job_dir, self.state)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        if self.stop_deadline is not None:
            return
        self.stop_deadline = time.monotonic() + self.grace
        self._save(status=JobStatus.STOPPING, secondary_status="Stopping")
        self._signal_roots(signal.SIGTERM)

    def _on_forget(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        self.forget = True

    def _signal_roots(self, sig: int) -> None:
        for root in self.roots.values():
            root.signal(sig)  # only while the pid is still the adopted process (a pidfd: no race)

    def start_daemons(self) -> None:
        inherited = environment_without_spec()
        namespaces = self.state.get("node_netns") or {}
        for node, plan in self.state["node_plans"].items():
            layout = NodeLayout(self.job_dir, node)
            # a node in its own network namespace gets its sshd in there, where its ranks' listeners are
            enter = _netns_prefix(namespaces[node]) if node in namespaces else []
            with open(layout.log_file, "ab", buffering=0) as log:
                self.daemons[node] = subprocess.Popen(
                    [
                        *enter,
                        sys.executable,
                        "-m",
                        "remote_debug.container",
                        "--node-daemon",
                        "--parent-pid",
                        str(self.roots[node].pid),
                    ],
                    env={**inherited, **plan["env"]},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        self._save(
            node_pids={n: r.pid for n, r in self.roots.items()}, daemon_pids={n: p.pid for n, p in self.daemons.items()}
        )

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGUSR1, self._on_forget)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            self.start_daemons()
            while not self.forget and any(root.alive() for root in self.roots.values()):
                if self.stop_deadline is not None and time.monotonic() > self.stop_deadline:
                    self._signal_roots(signal.SIGKILL)
                    self.stop_deadline = float("inf")
                time.sleep(POLL_SECONDS)
        finally:
            self._end_daemons()
        if not self.forget:
            stopped = self.stop_deadline is not None
            self._save(
                status=JobStatus.STOPPED if stopped else JobStatus.COMPLETED,
                secondary_status="Stopped" if stopped else "Completed",
                ended=time.time(),
                end_note=ENDED_NOTE,
            )
        return 0

    def _end_daemons(self) -> None:
        for proc in self.daemons.values():
            if proc.poll() is None:
                proc.terminate()  # the daemon stops its sshd and marks its manifest ended
        deadline = time.monotonic() + 10
        for proc in self.daemons.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _netns_prefix(namespace: str) -> list[str]:
    """nsenter into a namespace named by ``ip netns`` or given as a path (nsenter execs: the pid stays the daemon's)."""
    path = namespace if namespace.startswith("/") else str(netns.NETNS_DIR / namespace)
    return ["nsenter", f"--net={path}"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m remote_debug.laptop.machine.adopted_supervisor JOB_DIR", file=sys.stderr)
        return 2
    return AdoptedSupervisor(Path(args[0])).run()


if __name__ == "__main__":
    sys.exit(main())
