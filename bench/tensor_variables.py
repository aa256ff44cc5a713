"""``python -m bench --tensors [--short]``: issue 32's tensor row, the Variables pane on a frame holding a big tensor.

P17 a rank started by the hook (debugpy, pydevd serving DAP in the rank, as attach runs it) stops at a
    breakpoint in a frame holding one 1 GiB float32 tensor (``--short``: 256 MiB); the bench plays VS Code
    and times, at each of several stops, what the IDE asks when it shows that frame: ``stackTrace``,
    ``scopes``, ``variables`` of the locals (``frame_ms``: the three, the goal is <= 100 ms with our tensor
    view), then ``variables`` of the tensor itself (``expand_ms``: what clicking its row costs) and, with our
    view, of its ``statistics`` child (``stats_ms``: bounded by the view's sample).  Stock: the same rank with
    ``REMOTE_DEBUG_TENSOR_VIEW=0`` (pydevd's own presentation: the tensor's repr, then every attribute).
    ``*_rss_growth_mb``: the rank's peak RSS during those requests above its RSS before them (peak reset
    with ``/proc/PID/clear_refs``): a copy of the tensor to host memory would show as ~1 GiB.  Times: the best
    of the stops (5, ``--short`` 2); RSS growth: the largest.  With a GPU (``torch.cuda.is_available()``) the
    row is measured again with the tensor on ``cuda:0`` (P17-cuda).  One big tensor at a time: the stock rank
    ends before ours starts.
P17-storage the same frame request for a frame holding ``tensor.untyped_storage()`` of a 1 MiB tensor (``--short``:
    256 KiB), debugpy#1660's freeze: stock pydevd's repr of a storage lists every byte, one line each (seconds per
    MiB; a 1 GiB tensor's storage would take hours); ours is one line of metadata.  One stop each.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.rank_jobs import break_line
from bench.rank_workloads import hook_env
from remote_debug.contract import spec
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.dap_client import DapClient, attach_and_configure

GOAL_MS = 100.0
GIB = 1 << 30

RANK = textwrap.dedent(
    """
    import os, pathlib, sys, time
    import torch
    marks, device, nbytes = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    columns = 1024
    weights = torch.empty(nbytes // 4 // columns, columns, device=device).uniform_()  # filled in place
    if device != "cpu":
        torch.cuda.synchronize()
    step = 0
    while not (marks / "stop").exists():
        step += 1  # BENCH-BREAK
        time.sleep(0.01)
    """
)
STORAGE_RANK = RANK.replace(
    "weights = torch.empty(nbytes // 4 // columns, columns, device=device).uniform_()  # filled in place",
    "storage = torch.ones(nbytes, dtype=torch.uint8, device=device).untyped_storage()",
)
assert STORAGE_RANK != RANK, "the storage rank must differ from the tensor rank"


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def _reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return (time.perf_counter() - started) * 1000, result


def _children(client: DapClient, reference: int) -> list[dict[str, Any]]:
    body = client.request("variables", {"variablesReference": reference}, 300)
    return list(body.get("variables", []))


def _one_stop(client: DapClient, thread_id: int, pid: int, ours: bool, variable: str) -> dict[str, float]:
    """What VS Code asks for the stopped frame, timed; then ``variable``'s row expanded (and, for a tensor in
    our view, its statistics)."""
    rss_before = _status_kb(pid, "VmRSS")
    peak_reset = _reset_peak(pid)
    hwm_before = _status_kb(pid, "VmHWM")
    stack_ms, frames = _timed(lambda: client.stack_trace(thread_id, levels=20, timeout=300))
    scopes_ms, scopes = _timed(lambda: client.scopes(int(frames[0]["id"]), timeout=300))
    local_ref = int(next(s for s in scopes if s.get("name") == "Locals")["variablesReference"])
    locals_ms, local_vars = _timed(lambda: _children(client, local_ref))
    shown = next(v for v in local_vars if v["name"] == variable)
    expand_ms, children = _timed(lambda: _children(client, int(shown["variablesReference"])))
    row = {
        "stack_ms": stack_ms,
        "scopes_ms": scopes_ms,
        "variables_ms": locals_ms,
        "frame_ms": stack_ms + scopes_ms + locals_ms,
        "expand_ms": expand_ms,
    }
    if ours:
        if not str(shown["value"]).startswith(("Tensor[", "UntypedStorage[")):
            raise RuntimeError(f"P17: the tensor view is not active in the rank: {shown['value'][:200]!r}")
        stats = next((c for c in children if c["name"] == "statistics"), None)
        if stats is not None:
            row["stats_ms"], _ = _timed(lambda: _children(client, int(stats["variablesReference"])))
    growth_kb = _status_kb(pid, "VmHWM") - (rss_before if peak_reset else hwm_before)
    row["rss_growth_mb"] = max(growth_kb, 0) / 1024
    return row


def _measure(
    paths: StatePaths, work: Path, device: str, nbytes: int, stops: int, ours: bool, *, storage: bool = False
) -> dict[str, float]:
    label = f"{device}-{'storage-' if storage else ''}{'ours' if ours else 'stock'}"
    marks = work / f"tensors-{label}"
    marks.mkdir()
    script = marks / "rank.py"
    script.write_text(STORAGE_RANK if storage else RANK)
    manifest_dir = marks / "manifest"
    env = hook_env(paths, f"bench-tensors-{label}", manifest_dir, wait=300)
    env[spec.ENV_TENSOR_VIEW] = "1" if ours else "0"
    cmd = [sys.executable, "-m", "remote_debug.container", "--", sys.executable, str(script)]
    proc = subprocess.Popen(
        [*cmd, str(marks), device, str(nbytes)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    client: DapClient | None = None
    try:
        deadline = time.monotonic() + 120
        port = pid = 0
        while not port:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"P17: the {label} rank did not start listening")
            time.sleep(0.2)
            manifest = spec.read_node_manifest(manifest_dir)
            rank = next((r for r in manifest.ranks if r.port), None) if manifest else None
            port, pid = (rank.port, rank.pid) if rank else (0, 0)
        client = attach_and_configure("127.0.0.1", port, breakpoints={str(script): [break_line(script)]}, timeout=60)
        rows = []
        for _ in range(stops):
            thread_id = int(client.wait_stopped(300)["threadId"])
            rows.append(_one_stop(client, thread_id, pid, ours, "storage" if storage else "weights"))
            client.continue_(thread_id)
        client.set_breakpoints(str(script), [])
        client.disconnect()
        (marks / "stop").write_text("")
        proc.wait(120)
    finally:
        if client is not None:
            client.close()
        (marks / "stop").write_text("")
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(Exception):
            proc.stderr.close()  # type: ignore[union-attr]
    # times: the best stop (ms-scale figures on a shared machine are mostly its noise); memory: the worst one
    return {key: (max if key == "rss_growth_mb" else min)(r[key] for r in rows) for key in rows[0]}


def _row(paths: StatePaths, work: Path, device: str, nbytes: int, stops: int) -> dict[str, float]:
    stock = _measure(paths, work, device, nbytes, stops, ours=False)
    ours = _measure(paths, work, device, nbytes, stops, ours=True)
    return {
        "tensor_gib": nbytes / GIB,
        "stock_frame_ms": stock["frame_ms"],
        "ours_frame_ms": ours["frame_ms"],
        "stock_vs_ours": stock["frame_ms"] / ours["frame_ms"],
        "goal_ms": GOAL_MS,
        "ours_variables_ms": ours["variables_ms"],
        "stock_variables_ms": stock["variables_ms"],
        "stock_expand_ms": stock["expand_ms"],
        "ours_expand_ms": ours["expand_ms"],
        "ours_stats_ms": ours["stats_ms"],
        "stock_rss_growth_mb": stock["rss_growth_mb"],
        "ours_rss_growth_mb": ours["rss_growth_mb"],
    }


def _storage_row(paths: StatePaths, work: Path, nbytes: int) -> dict[str, float]:
    stock = _measure(paths, work, "cpu", nbytes, 1, ours=False, storage=True)
    ours = _measure(paths, work, "cpu", nbytes, 1, ours=True, storage=True)
    return {
        "storage_mib": nbytes / (1 << 20),
        "stock_frame_ms": stock["frame_ms"],
        "ours_frame_ms": ours["frame_ms"],
        "stock_vs_ours": stock["frame_ms"] / ours["frame_ms"],
        "goal_ms": GOAL_MS,
    }


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def tensor_rows(work: Path, paths: StatePaths, short: bool) -> dict[str, dict[str, float]]:
    nbytes, stops = (GIB // 4, 2) if short else (GIB, 5)
    size = f"{nbytes / GIB:g} GiB" if nbytes >= GIB else f"{nbytes >> 20} MiB"
    rows = {f"P17 variables of a frame holding a {size} float32 cpu tensor": _row(paths, work, "cpu", nbytes, stops)}
    storage_bytes = 1 << (18 if short else 20)
    rows[f"P17-storage a frame holding the untyped_storage() of a {storage_bytes >> 10} KiB tensor"] = _storage_row(
        paths, work, storage_bytes
    )
    if _cuda_available():
        rows[f"P17-cuda the same, the tensor on cuda:0 ({size})"] = _row(paths, work, "cuda", nbytes, stops)
    return rows
