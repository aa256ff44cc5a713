"""The background process that runs one local job, the way SageMaker runs a training job.

``remote-debug launch --local`` starts ``python -m remote_debug.laptop.machine.supervisor JOB_DIR``
detached from the terminal.  It starts every node (each the hook-wrapped command), keeps
``job.json`` current (status + secondary status), stops all nodes when one fails, honours SIGTERM
like SageMaker's StopTrainingJob (SIGTERM to every node, SIGKILL after a grace period), and records
the outcome.  It is the only writer of ``job.json`` after launch.  A node in a network namespace also
gets its own hostname (``algo-N``), and whatever is still running in the namespaces when the nodes
have ended is killed with them (``netns.delete``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import remote_debug.oskit.netns as netns
from remote_debug.contract import spec
from remote_debug.laptop.core.jobinfo import JobStatus, keep_alive_state, read_manifests
from remote_debug.laptop.machine.job_dir import NodeLayout, read_job_file, write_job_file

POLL_SECONDS = 0.2
KEEP_ALIVE_POLL_SECONDS = 1.0  # how often a running job's secondary status follows its nodes' keep-alive


def environment_without_spec() -> dict[str, str]:
    """This process's environment for a node's processes: never a debug spec inherited from the launching shell
    (the node gets its own, from job.json)."""
    inherited = dict(os.environ)
    for name in (*spec.SPEC_ENV_NAMES, *spec.SPEC_OPTIONAL_ENV_NAMES, spec.ENV_CLAIMED_BY):
        inherited.pop(name, None)
    return inherited


class Supervisor:
    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self.state: dict[str, Any] = read_job_file(job_dir)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stop_requested = False
        self.stop_deadline: float | None = None
        self.grace = float(self.state.get("stop_grace_seconds", 120))
        self._next_keep_alive_look = 0.0

    def _save(self, **changes: Any) -> None:
        self.state.update(changes)
        write_job_file(self.job_dir, self.state)

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.stop_requested:
            return
        self.stop_requested = True
        self.stop_deadline = time.monotonic() + self.grace
        self._save(status=JobStatus.STOPPING, secondary_status="Stopping")
        self._signal_nodes(signal.SIGTERM)

    def _signal_nodes(self, sig: int) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    if sig == signal.SIGKILL:  # the end of the grace: the node's whole session, as a
                        os.killpg(proc.pid, sig)  # container's processes die with it (nodes are session leaders)
                    else:
                        os.kill(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    def start_nodes(self) -> None:
        inherited = environment_without_spec()
        # "python" found on PATH by the job's own launchers (mpirun, shell scripts) is the interpreter
        # remote-debug runs in, as a container image puts its Python first on PATH
        bin_dir = os.path.dirname(sys.executable)
        inherited["PATH"] = os.pathsep.join([bin_dir, *(p for p in inherited.get("PATH", "").split(os.pathsep) if p)])
        isolated = self.state.get("node_netns") or {}
        for node, plan in self.state["node_plans"].items():
            layout = NodeLayout(self.job_dir, node)
            log = open(layout.log_file, "ab", buffering=0)  # noqa: SIM115 - handed to the child, closed below
            try:
                self.procs[node] = subprocess.Popen(
                    plan["command"],
                    cwd=plan["cwd"],
                    env={**inherited, **plan["env"]},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_named(node) if node in isolated else None,  # this process has no threads
                )
            except OSError as exc:
                log.write(f"[remote-debug] could not start node {node}: {exc}\n".encode())
                self._save(failure_reason=f"could not start node {node}: {exc}")
                self.stop_requested = True
            finally:
                log.close()
        pids = {n: p.pid for n, p in self.procs.items()}
        self._save(status=JobStatus.IN_PROGRESS, secondary_status="Starting", node_pids=pids)

    def _secondary_from_manifests(self) -> str:
        """Starting until every node's hook runs the command, then Training (as SageMaker reports it)."""
        for node in self.procs:
            try:
                manifest = spec.read_node_manifest(NodeLayout(self.job_dir, node).manifest_dir)
            except spec.ContractError:
                return "Training"  # a broken manifest is attach's problem; the job itself runs
            if manifest is None or manifest.state == spec.NodeState.STARTING:
                return "Starting"
        return "Training"

    def _follow_keep_alive(self) -> None:
        """Training, or - every node holding after its command (``--keep-alive``) - "kept alive, N s left",
        as the job's secondary status (SageMaker shows its own words there; the nodes' manifests say ours)."""
        now = time.monotonic()
        if now < self._next_keep_alive_look:
            return
        self._next_keep_alive_look = now + KEEP_ALIVE_POLL_SECONDS
        dirs = {node: NodeLayout(self.job_dir, node).manifest_dir for node in self.procs}
        left, _run = keep_alive_state(read_manifests(dirs))
        secondary = "Training" if left is None else spec.kept_alive_phrase(left)
        if secondary != self.state.get("secondary_status"):
            self._save(secondary_status=secondary)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the user's terminal closing must not stop the job
        try:
            return self._run()
        finally:
            # the nodes' network namespaces (if any) were made for this job: they go with it
            netns.delete(list(self.state.get("netns") or []))

    def _run(self) -> int:
        self.start_nodes()
        failed_node: str | None = None
        while True:
            codes = {n: p.poll() for n, p in self.procs.items()}
            if failed_node is None:
                failed_node = next((n for n, c in codes.items() if c not in (None, 0)), None)
                if failed_node is not None and not self.stop_requested:
                    # SageMaker fails the whole job when one host fails: stop the others.
                    self._signal_nodes(signal.SIGTERM)
                    self.stop_deadline = time.monotonic() + self.grace
            if all(c is not None for c in codes.values()):
                break
            if self.stop_deadline is not None and time.monotonic() > self.stop_deadline:
                self._signal_nodes(signal.SIGKILL)
                self.stop_deadline = None
            if not self.stop_requested and self.state.get("secondary_status") == "Starting":
                secondary = self._secondary_from_manifests()
                if secondary != "Starting":
                    self._save(secondary_status=secondary)
            elif not self.stop_requested and failed_node is None:
                self._follow_keep_alive()
            time.sleep(POLL_SECONDS)
        return self._finish(codes, failed_node)

    def _finish(self, codes: dict[str, int | None], failed_node: str | None) -> int:
        exit_codes = {n: int(c if c is not None else -1) for n, c in codes.items()}
        ended = time.time()
        if self.stop_requested and not self.state.get("failure_reason"):
            self._save(
                status=JobStatus.STOPPED,
                secondary_status="Stopped",
                exit_codes=exit_codes,
                ended=ended,
                exit_code=max(exit_codes.values(), default=0),
            )
            return 0
        if failed_node is None and all(c == 0 for c in exit_codes.values()):
            done = JobStatus.COMPLETED
            self._save(status=done, secondary_status="Completed", exit_codes=exit_codes, ended=ended, exit_code=0)
            return 0
        node = failed_node or next(iter(exit_codes))
        layout = NodeLayout(self.job_dir, node)
        # the failing rank's exception line (the hook's failure file, as SageMaker's FailureReason), else
        # the log's last error line
        last_line = spec.read_failure_file(layout.output_dir) or last_error_line(layout.log_file)
        reason = self.state.get("failure_reason") or f"node {node} exited with code {exit_codes.get(node)}: {last_line}"
        self._save(
            status=JobStatus.FAILED,
            secondary_status="Failed",
            exit_codes=exit_codes,
            ended=ended,
            exit_code=exit_codes.get(node, 1) or 1,
            failure_reason=reason,
        )
        return 0


def _named(node: str) -> Callable[[], None]:
    """Runs in a node's first process before exec: its hostname is ``node`` (``algo-N``), as on an
    instance.  A failure is one line in the node's log, never a node that does not start."""

    def setup() -> None:
        try:
            netns.set_hostname(node)
        except OSError as exc:
            os.write(2, f"[remote-debug] hostname {node} not set: {exc}\n".encode(errors="replace"))

    return setup


_RANK_TAG = re.compile("^" + re.escape(spec.RANK_OUTPUT_PREFIX).replace(re.escape("{rank}"), r"\d+"))


def last_error_line(log_file: Path) -> str:
    """The last meaningful line of a node log (the exception line of a traceback, usually)."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    for line in reversed(lines):
        text = _RANK_TAG.sub("", line).strip()  # a rank's line of a multi-rank job is tagged [rank N]
        if text and not text.startswith(("[remote-debug]", "File ", "^", "~")):
            return text[:300]
    return "no output"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m remote_debug.laptop.machine.supervisor JOB_DIR", file=sys.stderr)
        return 2
    return Supervisor(Path(args[0])).run()


if __name__ == "__main__":
    sys.exit(main())
