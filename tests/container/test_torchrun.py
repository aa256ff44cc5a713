"""torchrun with two CPU ranks under the hook: one listener per rank, none for the launcher."""

from __future__ import annotations

import importlib.util
import socket

import pytest

from remote_debug.contract import spec
from tests.helpers.hook_runs import HookRun, free_port_pair, listen_addresses

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

DDP_SCRIPT = """\
import pathlib, sys, time
import torch
import torch.distributed as dist
marks = pathlib.Path(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
(marks / f"ready-{rank}").write_text(str(total.item()))
deadline = time.monotonic() + 120
while not (marks / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
dist.barrier()
dist.destroy_process_group()
"""


def test_two_ranks_get_two_listeners(run: HookRun) -> None:
    base = free_port_pair()
    run.env[spec.ENV_PORT_BASE] = str(base)
    script = run.root / "ddp.py"
    script.write_text(DDP_SCRIPT)
    run.start_torchrun(script)
    run.wait_ranks_ready("both ranks to all_reduce")
    assert [(run.marks / f"ready-{r}").read_text() for r in (0, 1)] == ["3.0", "3.0"]

    manifest = spec.read_node_manifest(run.manifest_dir)
    assert manifest is not None and manifest.state == "running"
    # Exactly two documents: the torchrun launcher (and debugpy adapters) did not claim one.
    assert run.rank_files() == ["rank-0.json", "rank-1.json"]
    ranks = {r.rank: r for r in manifest.ranks}
    for r in (0, 1):
        assert ranks[r].local_rank == r and ranks[r].world_size == 2
        assert ranks[r].port == base + r  # port_base + local_rank
        assert ranks[r].state == "listening"
        assert listen_addresses(ranks[r].port) == ["0100007F"]
        with socket.create_connection(("127.0.0.1", ranks[r].port), timeout=5):
            pass
    assert ranks[0].pid != ranks[1].pid

    run.release()
    assert run.wait(60) == 0, run.stderr
    assert [run.rank(r)["state"] for r in (0, 1)] == ["finished", "finished"]
    assert run.node()["state"] == "completed"


def test_two_ranks_ephemeral_ports_and_rank_selection(run: HookRun) -> None:
    run.env[spec.ENV_RANKS] = "1"
    script = run.root / "ddp.py"
    script.write_text(DDP_SCRIPT)
    run.start_torchrun(script)
    run.wait_ranks_ready("both ranks past their all_reduce")
    running = run.rank(0)
    assert running["state"] == "skipped" and running["port"] == 0
    assert running["control_port"] > 0  # not debugged, but pause-safe and "stacks" still reach it
    run.release()
    assert run.wait(90) == 0, run.stderr
    assert run.rank_files() == ["rank-0.json", "rank-1.json"]
    zero, one = run.rank(0), run.rank(1)
    # once the rank is gone its document promises no port anyone could bind afterwards (issue 29 item 2)
    assert zero["state"] == "skipped" and zero["port"] == 0 and zero["control_port"] == 0
    assert one["state"] == "finished" and one["port"] > 0
