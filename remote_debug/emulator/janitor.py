"""What the emulator made on this machine goes when the emulator goes, however it goes.

A job's nodes are network namespaces with processes in them (the holders, the training command, an MPI sshd):
``Emulator.close()`` (Ctrl-C, SIGTERM) removes them, but a SIGKILLed emulator (the OOM killer, ``kill -9``, a
closed terminal's process group) left every running job's processes training on and its namespaces in
``/run/netns``, until someone cleaned up by hand.

So the emulator starts this janitor first: a separate process (its own session: a signal for the emulator's
process group does not reach it) whose stdin is a pipe only the emulator holds.  When the pipe ends without the
word ``closed`` - the emulator died before cleaning up - the janitor destroys every cluster under the state dir
(``jobs/<job>`` and ``regions/<region>/jobs/<job>``): :meth:`Cluster.destroy` works from the names, kills what runs
in the namespaces and deletes them.  After a clean ``close()`` the emulator writes ``closed`` and the janitor
just exits.

    python -m remote_debug.emulator.janitor STATE_DIR
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path

from remote_debug.emulator.node_model import ClusterError
from remote_debug.emulator.nodes import Cluster

CLOSED = b"closed\n"


def job_dirs(state_dir: Path) -> list[Path]:
    """Every job dir the emulator may have made clusters in (any region)."""
    roots = [state_dir, *sorted(p for p in (state_dir / "regions").glob("*") if p.is_dir())]
    return [job for root in roots for job in sorted((root / "jobs").glob("*")) if job.is_dir()]


def sweep(state_dir: Path) -> list[str]:
    """Destroy every cluster under ``state_dir``; what could not be removed, one line each."""
    left: list[str] = []
    for job_dir in job_dirs(state_dir):
        hosts = sorted(p.name for p in (job_dir / "nodes").glob("algo-*")) or ["algo-1"]
        try:
            Cluster(job_dir.name, job_dir, hosts).destroy()
        except (ClusterError, OSError) as exc:
            left.append(str(exc))
    return left


def start(state_dir: Path) -> subprocess.Popen[bytes]:
    """The janitor of ``state_dir``; keep it, and :func:`dismiss` it after a clean close."""
    return subprocess.Popen(
        [sys.executable, "-m", "remote_debug.emulator.janitor", str(state_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


def dismiss(janitor: subprocess.Popen[bytes]) -> None:
    """Tell the janitor the emulator cleaned up itself; it exits without touching anything."""
    with contextlib.suppress(OSError, ValueError):
        assert janitor.stdin is not None
        janitor.stdin.write(CLOSED)
        janitor.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        janitor.wait(timeout=10)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m remote_debug.emulator.janitor STATE_DIR", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):  # a Ctrl-C for the emulator is not our end
        signal.signal(sig, signal.SIG_IGN)
    said = sys.stdin.buffer.read()  # until the emulator closes the pipe, or dies
    if said == CLOSED:
        return 0
    left = sweep(Path(argv[0]))
    for line in left:
        print(f"remote-debug emulator janitor: {line}", file=sys.stderr, flush=True)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
