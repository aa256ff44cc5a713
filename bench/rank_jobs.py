"""The small local jobs the attach rows time: a script of light ranks, launched on this machine's backend,
ready (every rank in one state) before any clock starts; its breakpoint is the line marked BENCH-BREAK."""

from __future__ import annotations

import time
from pathlib import Path

from remote_debug.contract import spec
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.machine.backend import LaunchRequest
from remote_debug.laptop.platforms import MachineBackend

BREAK_MARK = "BENCH-BREAK"


def launch_rank_job(
    paths: StatePaths, work: Path, name: str, nodes: int, nproc: int, *, script: str, wait_seconds: float
) -> tuple[MachineBackend, Path]:
    """``python ranks.py`` (``script``) on ``nodes`` x ``nproc`` ranks; its backend and source dir."""
    src = work / name
    src.mkdir(exist_ok=True)
    (src / "ranks.py").write_text(script)
    backend = MachineBackend(paths)
    backend.launch(
        LaunchRequest(
            command=["python", "ranks.py"],
            name=name,
            source_dir=src,
            nodes=nodes,
            nproc_per_node=nproc,
            options=spec.DebugOptions(wait_seconds=wait_seconds),
        )
    )
    return backend, src


def break_line(script: Path) -> int:
    """The line marked BENCH-BREAK (1-based)."""
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if BREAK_MARK in line)


def wait_for_ranks(backend: MachineBackend, name: str, ranks: int, state: spec.RankState, timeout: float = 300) -> None:
    """Until all ``ranks`` of the job are in ``state`` (waiting for a debugger, or idle); RuntimeError after
    ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = [r for m in backend.manifests(name).values() if m for r in m.ranks]
        if len(now) == ranks and all(r.state == state for r in now):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the {ranks} ranks of {name} did not all become {state} within {timeout:g} s")
