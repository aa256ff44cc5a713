"""``sync``'s rows: ``python -m bench --sync [--short]`` (or ``python -m bench.sync_bench``).

P9 sync of a 200 MB workspace (2000 files of 100 kB in 20 folders; ``--short``: 500 files) into a
   1-node local job, for each method (rsync, sftp):
   - first: the whole tree (the node's code dir emptied of it before each method);
   - one_changed: after one file was rewritten, in the Syncer kept open as ``--watch`` keeps it (goal <= 1 s);
   - unchanged: the same tree again (no file data may move);
   - cli_one_changed: a fresh Syncer after another rewrite, as one ``remote-debug sync`` run pays it
     (job lookup, ssh entries, the node's rsync check / the SFTP session), without Python's start-up;
   with the file data each sent (``*_bytes``) and ``one_changed_vs_first``, the share of the first
   sync's time a one-file change costs.  Everything under a throwaway state dir.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from remote_debug.contract import spec
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.iterate.sync import Syncer, SyncMethod
from remote_debug.laptop.machine.backend import LaunchRequest
from remote_debug.laptop.platforms import MachineBackend

GOAL_S = 1.0
FILE_BYTES = 100_000
FOLDERS = 20
SLEEPER = "import time\nfor i in range(36000):\n    time.sleep(0.1)\n"
Row = dict[str, float]


def make_workspace(root: Path, files: int) -> None:
    """``files`` files of FILE_BYTES random bytes (nothing compresses or dedupes) in FOLDERS folders."""
    (root / "train.py").write_text(SLEEPER)
    for i in range(files):
        folder = root / f"d{i % FOLDERS:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i:04d}.bin").write_bytes(os.urandom(FILE_BYTES))


def rewrite_one(root: Path) -> None:
    path = root / "d00" / "f0000.bin"
    before = path.stat().st_mtime
    path.write_bytes(os.urandom(FILE_BYTES))
    # a whole second after the last version, as an edit a moment later is: a one-shot sync's quick check
    # (rsync's too) cannot tell two versions of the same size within one second apart
    later = max(time.time(), before + 1)
    os.utime(path, (later, later))


def measure(paths: StatePaths, job: str, workspace: Path, method: SyncMethod) -> Row:
    with Syncer.open(job, source=workspace, method=method, paths=paths) as syncer:
        assert [t.method for t in syncer.targets] == [method], syncer.targets
        first = syncer.sync()
        rewrite_one(workspace)
        one = syncer.sync()
        same = syncer.sync()
    rewrite_one(workspace)
    started = time.perf_counter()
    with Syncer.open(job, source=workspace, method=method, paths=paths) as syncer:
        cli = syncer.sync()
    cli_s = time.perf_counter() - started
    if (one.files, same.files, same.bytes, cli.files) != (1, 0, 0, 1):
        raise RuntimeError(f"P9 {method}: unexpected files sent: {one}, {same}, {cli}")
    return {
        "first_s": first.seconds,
        "first_bytes": float(first.bytes),
        "one_changed_s": one.seconds,
        "one_changed_bytes": float(one.bytes),
        "unchanged_s": same.seconds,
        "unchanged_bytes": float(same.bytes),
        "cli_one_changed_s": cli_s,
        "one_changed_vs_first": one.seconds / first.seconds,
        "goal_s": GOAL_S,
    }


def sync_rows(work: Path, short: bool) -> dict[str, Row]:
    files = 500 if short else 2000
    methods = [SyncMethod.SFTP] if shutil.which("rsync") is None else [SyncMethod.RSYNC, SyncMethod.SFTP]
    if len(methods) == 1:
        print("bench: rsync is not installed: the rsync row is skipped", file=sys.stderr)
    paths = StatePaths(work / "state")
    workspace = work / "workspace"
    workspace.mkdir()
    make_workspace(workspace, files)
    job = "sync-bench"
    backend = MachineBackend(paths)
    backend.launch(
        LaunchRequest(command=["python", "train.py"], name=job, source_dir=workspace, options=spec.DebugOptions())
    )
    code = paths.job_dir(job) / "nodes" / "algo-1" / "code"
    rows: dict[str, Row] = {}
    try:
        for method in methods:
            for folder in code.glob("d[0-9][0-9]"):  # the launch's copy, or the previous method's sync
                shutil.rmtree(folder)
            size = f"{files * FILE_BYTES // 1_000_000} MB ({files} x {FILE_BYTES // 1000} kB)"
            rows[f"P9 sync {size}, {method}"] = measure(paths, job, workspace, method)
    finally:
        backend.stop(job, wait_seconds=30)
    return rows


def main() -> int:
    short = "--short" in sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="rd-bench-sync-") as tmp:
        rows = sync_rows(Path(tmp), short)
    width = max(len(k) for k in rows)
    for name, row in rows.items():
        print(f"{name:<{width}}  " + ", ".join(f"{k}={v:.3f}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
