"""The workloads a benchmark rank runs, and how a bench process starts one under the hook: shared by the
standard rows (``bench/__main__.py``) and the PyCharm rows (``bench/pycharm_rows.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from remote_debug.contract import spec
from remote_debug.laptop.core.keys import ensure_job_key, job_secret
from remote_debug.laptop.core.paths import StatePaths

CALL_HEAVY = textwrap.dedent(
    """
    import json, sys, time
    def f(x):
        return x + 1
    def work(n):
        total = 0
        for i in range(n):
            total = f(total)
        return total
    start = time.process_time()
    work(int(sys.argv[1]))
    print(json.dumps({"cpu": time.process_time() - start}))
    """
)

DDP_STEPS = textwrap.dedent(
    """
    import json, os, sys, time
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", sys.argv[2])
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # steadier on a shared machine; the ratio is what counts
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 1024), torch.randint(0, 10, (128,))
    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    for _ in range(5):
        step()
    def median_step():
        times = []
        for _ in range(int(sys.argv[1])):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        times.sort()
        return times[len(times) // 2]
    during = median_step()
    if len(sys.argv) > 3:  # under a debugger: tell the bench, which detaches it, then wait for the tracer to go
        import pathlib
        marks = pathlib.Path(sys.argv[3])
        (marks / "phase1").write_text("")
        deadline = time.monotonic() + 30
        while not ((marks / "detached").exists() and sys.gettrace() is None) and time.monotonic() < deadline:
            time.sleep(0.05)
    print(json.dumps({"step_s": during, "after_s": median_step(), "untraced": sys.gettrace() is None}))
    dist.destroy_process_group()
    """
)


def run_json(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> dict[str, Any]:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, check=True, timeout=600).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def hook_env(
    paths: StatePaths,
    job: str,
    manifest_dir: Path,
    wait: float = 0.0,
    *,
    ide: spec.RankDebugger = spec.RankDebugger.DEBUGPY,
    port_base: int = 0,
) -> dict[str, str]:
    key_path, public_key = ensure_job_key(paths, job)
    env = dict(os.environ)
    options = spec.DebugOptions(ide=ide, port_base=port_base, wait_seconds=wait)
    secret = job_secret(key_path)
    env.update(spec.DebugSpec(job_name=job, client_public_key=public_key, job_secret=secret, options=options).to_env())
    env[spec.ENV_MANIFEST_DIR] = str(manifest_dir)
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return env
