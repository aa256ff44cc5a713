"""``python -m bench [--short]``: the debugging overheads, measured side by side in one run.

Each row is a ratio (or a time) of two things measured in this run on this machine, so the numbers
mean something even on a loaded 2-core box.  See docs/PERFORMANCE.md for the latest table.

P1 hook ready: sshd + every rank listening, vs the same job without the hook (job wall time)
P2 idle overhead: call-heavy loop CPU time with the hook (nobody attached) and with plain
   ``debugpy.listen()``, vs no hook
P3 torch CPU DDP step (1-rank gloo group, small MLP): plain vs attached without breakpoints, and vs the
   same rank after the debugger detached
P4 attach time: attach -> every rank stopped at a breakpoint, 1 vs N ranks (8 = 2 nodes x 4 in full mode),
   counted from when every rank of the running job waits for its debugger
P5 DAP ``next`` latency through the SSH tunnel vs a direct connection to the rank
P6 attach discovery on SageMaker: the first ``manifests()`` that returns the node, when 100,000 log events
   came before the manifest line (moto's server for SageMaker and CloudWatch Logs); goal <= 5 s

``python -m bench --emulator [--short]`` runs, instead, the SageMaker path's rows against ``remote-debug
emulator`` (root and AWS's session-manager-plugin; skipped with the reason without them), see bench/emulator.py:
P7 ssh login through the proxy + plugin + SSM channel vs plain ssh (goal <= 1.5 s), P8 attach to all 4 ranks of
a 2-node job from Training (goal <= 5 s), P5-SSM DAP ``next`` latency over SSM vs direct.

``python -m bench --sync [--short]`` runs sync's rows instead (bench/sync_bench.py): P9 a 200 MB workspace into a
local job, rsync and sftp: the first sync, a re-sync after one file changed (goal <= 1 s), an unchanged re-sync.

``python -m bench --pycharm [--short]`` runs P2 and P3 for a rank debugged from PyCharm instead (bench/pycharm_rows.py):
P2-PyCharm the call-heavy loop in an idle PyCharm rank (pydevd-pycharm not even imported) vs no hook (goal <= 1.02x);
P3-PyCharm the DDP step with a pydevd server (no breakpoints) connected through the rank's control channel
(goal <= 1.10x), and after the server closed, as PyCharm's Stop does (goal <= 1.02x, the rank untraced).

``python -m bench --scale [--short]`` runs issue 17's rows (bench/scale.py): P4-scale attach -> every rank stopped
at 1, 8 and 64 ranks (8 nodes x 8), for a job whose ranks wait and for one attached mid-run; P11 the attach CLI's
wall time and peak RSS at 64 ranks; P12 ``stacks`` of 64 ranks (``--stacks [--short]``: P12 alone).

``python -m bench --adopt [--short]`` runs issue 19's row (bench/adopt_bench.py): P13 ``adopt`` of a plain torchrun job
(2 or 4 ranks, each with a thread contending for the GIL): seconds per rank, and the stall of a collective peer.

``python -m bench --all-stop [--short]`` runs issue 31's rows (bench/all_stop.py): P14 first stop -> every rank
paused at 8 and 64 ranks (goal <= 3 s at 64 on 2 cores), P15 Continue All -> every rank running, P16 the cost of
all-stop on a loop that hits no breakpoint (goal <= 1.02x).

``python -m bench --tensors [--short]`` runs issue 32's tensor row (bench/tensor_variables.py): P17 the Variables pane
on a frame holding a 1 GiB float32 tensor, stock debugpy vs our tensor view (goal <= 100 ms; no host copy), on CPU and,
with a GPU, on cuda:0.

``python -m bench --logpoints [--short]`` runs issue 32's logpoint row (bench/logpoints.py): P18 the cost of a logpoint
hit in a rank attached headless (a logpoint in every rank, each hit tagged and said), vs the same loop without one.

``python -m bench --iterate`` runs issue 15's row (bench/iterate.py): P10 edit one line -> ``sync`` -> ``run`` ->
every rank of a 2-node x 2 kept-alive job stopped with the new value, vs ``launch`` + ``attach`` of a new job
(goals <= 5 s and <= 0.3x).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.dap_timing import dap_next_ms
from bench.rank_jobs import break_line, launch_rank_job, wait_for_ranks
from bench.rank_workloads import CALL_HEAVY, DDP_STEPS, hook_env, run_json
from remote_debug.contract import spec
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions
from remote_debug.laptop.core.keys import ensure_job_key, job_secret
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.dap_client import attach_and_configure
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.platforms import MachineBackend
from remote_debug.laptop.wire import events

LISTEN_THEN_WORK = "import debugpy\ndebugpy.listen(('127.0.0.1', 0))\n"

RANK_SCRIPT = textwrap.dedent(
    """
    import os, time
    rank = int(os.environ.get("RANK", "0"))
    for step in range(200):
        value = rank * 1000 + step  # BENCH-BREAK
        time.sleep(0.01)
    """
)

TRIVIAL = "print('ok')\n"


def best_of(n: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(n))


def p1_hook_ready(work: Path, paths: StatePaths, repeats: int) -> dict[str, float]:
    script = work / "trivial.py"
    script.write_text(TRIVIAL)
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        "0",
        str(script),
    ]

    def plain() -> float:
        t = time.perf_counter()
        subprocess.run(torchrun, check=True, capture_output=True, timeout=300)
        return time.perf_counter() - t

    def hooked() -> float:
        env = hook_env(paths, "bench-p1", work / "p1-manifest")
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "remote_debug.container", "--", *torchrun],
            check=True,
            capture_output=True,
            env=env,
            timeout=300,
        )
        return time.perf_counter() - t

    base, with_hook = best_of(repeats, plain), best_of(repeats, hooked)
    return {"plain_s": base, "hook_s": with_hook, "added_s": with_hook - base, "ratio": with_hook / base}


def p2_idle_overhead(work: Path, paths: StatePaths, iterations: int, repeats: int) -> dict[str, float]:
    loop = work / "loop.py"
    loop.write_text(CALL_HEAVY)
    listen = work / "listen_loop.py"
    listen.write_text(LISTEN_THEN_WORK + CALL_HEAVY)
    env_plain = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1")
    hooked_env = hook_env(paths, "bench-p2", work / "p2-manifest")
    none = best_of(repeats, lambda: run_json([sys.executable, str(loop), str(iterations)], env_plain)["cpu"])
    hook = best_of(
        repeats,
        lambda: run_json(
            [sys.executable, "-m", "remote_debug.container", "--", sys.executable, str(loop), str(iterations)],
            hooked_env,
        )["cpu"],
    )
    listen_only = best_of(repeats, lambda: run_json([sys.executable, str(listen), str(iterations)], env_plain)["cpu"])
    return {
        "none_cpu_s": none,
        "hook_cpu_s": hook,
        "listen_cpu_s": listen_only,
        "hook_vs_none": hook / none,
        "listen_vs_none": listen_only / none,
    }


def p3_ddp_step(work: Path, paths: StatePaths, steps: int, repeats: int) -> dict[str, float]:
    """Median DDP step time: plain, and under the hook with a DAP client attached (no breakpoints)."""
    from remote_debug.container.node.sshd import free_port

    script = work / "ddp_steps.py"
    script.write_text(DDP_STEPS)
    env_plain = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1")

    def plain() -> dict[str, Any]:
        return run_json([sys.executable, str(script), str(steps), str(free_port())], env_plain)

    def attached() -> dict[str, Any]:
        manifest_dir = work / f"p3-manifest-{time.monotonic_ns()}"
        marks = work / f"p3-marks-{time.monotonic_ns()}"
        marks.mkdir()
        env = hook_env(paths, "bench-p3", manifest_dir, wait=120)
        cmd = [sys.executable, "-m", "remote_debug.container", "--", sys.executable, str(script), str(steps)]
        proc = subprocess.Popen(
            [*cmd, str(free_port()), str(marks)], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 120
            port = 0
            while not port:
                if time.monotonic() > deadline:
                    raise RuntimeError("P3: the rank did not start listening")
                time.sleep(0.2)
                manifest = spec.read_node_manifest(manifest_dir)
                port = next((r.port for r in manifest.ranks if r.port), 0) if manifest else 0
            client = attach_and_configure("127.0.0.1", port, timeout=60)  # no breakpoints: tracing only
            try:
                while not (marks / "phase1").exists():  # steps measured with the client attached
                    if proc.poll() is not None or time.monotonic() > deadline + 300:
                        raise RuntimeError("P3: the attached phase did not finish")
                    time.sleep(0.05)
                client.disconnect()
            finally:
                client.close()
            (marks / "detached").write_text("")
            out, _ = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        if not result["untraced"]:
            raise RuntimeError("P3: the rank kept its tracer after the debugger detached")
        return result

    base = [plain() for _ in range(repeats)]
    hooked = [attached() for _ in range(repeats)]
    plain_during, plain_after = (min(float(r[key]) for r in base) for key in ("step_s", "after_s"))
    during, after = (min(float(r[key]) for r in hooked) for key in ("step_s", "after_s"))
    return {
        "plain_step_ms": plain_during * 1000,
        "attached_step_ms": during * 1000,
        "attached_vs_plain": during / plain_during,
        "after_detach_step_ms": after * 1000,
        "after_detach_vs_plain": after / plain_after,
    }


def _launch_rank_job(paths: StatePaths, work: Path, name: str, nodes: int, nproc: int) -> tuple[MachineBackend, Path]:
    return launch_rank_job(paths, work, name, nodes, nproc, script=RANK_SCRIPT, wait_seconds=120)


def p4_attach_time(paths: StatePaths, work: Path, shapes: list[tuple[int, int]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for nodes, nproc in shapes:
        name = f"bench-p4-{nodes}x{nproc}"
        backend, src = _launch_rank_job(paths, work, name, nodes, nproc)
        stopped: list[float] = []

        def emit(event: events.Event, stopped: list[float] = stopped) -> None:
            if isinstance(event, events.Stopped):
                stopped.append(time.perf_counter())

        plan = HeadlessPlan(breakpoints={str(src / "ranks.py"): [break_line(src / "ranks.py")]}, max_stops=1)
        # the clock starts once every rank runs and waits for its debugger: attach time, not job start
        wait_for_ranks(backend, name, nodes * nproc, spec.RankState.WAITING)
        start = time.perf_counter()
        try:
            Attacher(
                backend,
                name,
                AttachOptions(workspace=src, headless=plan, write_launch_json=False, edit_user_ssh_config=False),
                emit,
                paths,
            ).run()
        finally:
            backend.stop(name, wait_seconds=30)
        ranks = nodes * nproc
        if len(stopped) == ranks:
            out[f"{ranks}_ranks_s"] = max(stopped) - start
    return out


def p5_step_latency(paths: StatePaths, work: Path, steps: int) -> dict[str, float]:
    name = "bench-p5"
    backend, src = _launch_rank_job(paths, work, name, 1, 1)
    result: dict[str, float] = {}
    ready = threading.Event()
    attacher = Attacher(
        backend,
        name,
        AttachOptions(workspace=src, write_launch_json=False, edit_user_ssh_config=False, ready_timeout=60),
        lambda e: ready.set() if isinstance(e, events.Ready) else None,
        paths,
    )
    # attach as the user runs it (tunnels + forwards, no IDE); we play the IDE through its forward
    attaching = threading.Thread(target=attacher.run, name="bench-attach", daemon=True)
    attaching.start()
    try:
        if not ready.wait(90) or not attacher.forwards:
            raise RuntimeError("P5: attach did not forward the rank")
        fwd = attacher.forwards[0]
        line = break_line(src / "ranks.py")
        mapping = [(str(src), fwd.code_dir)]
        script = str(src / "ranks.py")
        for label, port in (("tunnel", fwd.local_port), ("direct", fwd.remote_port)):
            result[f"{label}_next_ms"] = dap_next_ms(
                functools.partial(
                    attach_and_configure,
                    "127.0.0.1",
                    port,
                    path_mappings=mapping,
                    breakpoints={script: [line]},
                    timeout=60,
                ),
                script,
                steps,
                stop_timeout=30,
            )
        result["tunnel_vs_direct"] = result["tunnel_next_ms"] / result["direct_next_ms"]
    finally:
        backend.stop(name, wait_seconds=30)
        attaching.join(60)  # attach ends with the job
    return result


LOG_DISCOVERY_GOAL_S = 5.0


def p6_log_discovery(paths: StatePaths, events_before: int) -> dict[str, float]:
    """Time from the first ``SageMakerBackend.manifests()`` to the one that returns the node's manifest,
    against moto's server (real HTTP, botocore's own parsing) holding ``events_before`` training log
    events in the node's stream before its manifest line."""
    import boto3
    from moto.server import ThreadedMotoServer

    from remote_debug.contract import manifest_lines
    from remote_debug.laptop.aws.sagemaker_logs import LOG_GROUP
    from remote_debug.laptop.platforms import SageMakerBackend

    job, region = "bench-p6", "us-west-2"
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region)
        clients = {name: session.client(name, endpoint_url=f"http://{host}:{port}") for name in ("sagemaker", "logs")}
        key_path, public_key = ensure_job_key(paths, job)
        debug_env = spec.DebugSpec(
            job_name=job, client_public_key=public_key, job_secret=job_secret(key_path), transport=spec.Transport.SSM
        ).to_env()
        clients["sagemaker"].create_training_job(
            TrainingJobName=job,
            AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"},
            RoleArn="arn:aws:iam::123456789012:role/r",
            OutputDataConfig={"S3OutputPath": "s3://b/o"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
            StoppingCondition={"MaxRuntimeInSeconds": 3600},
            Environment=debug_env,
        )
        logs, stream = clients["logs"], f"{job}/algo-1-1700000000"
        logs.create_log_group(logGroupName=LOG_GROUP)
        logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        start_ms = int(time.time() * 1000) - events_before  # one event per millisecond, up to now
        batch = 10_000  # PutLogEvents' limit
        for first in range(0, events_before, batch):
            logs.put_log_events(
                logGroupName=LOG_GROUP,
                logStreamName=stream,
                logEvents=[
                    {"timestamp": start_ms + i, "message": f"step {i} loss {1 / (i + 1):.6f} lr 0.001 tokens/s 51234"}
                    for i in range(first, min(first + batch, events_before))
                ],
            )
        manifest = spec.NodeManifest(
            job_name=job,
            node="algo-1",
            hosts=["algo-1"],
            sshd_host="127.0.0.1",
            sshd_port=40022,
            ssh_user="root",
            host_public_key=public_key,
            code_dir="/opt/ml/code",
            state=spec.NodeState.RUNNING,
        )
        logs.put_log_events(
            logGroupName=LOG_GROUP,
            logStreamName=stream,
            logEvents=[
                {
                    "timestamp": start_ms + events_before,
                    "message": manifest_lines.format_manifest_line(
                        "algo-1",
                        manifest,
                        boot="b1",
                        started=int(time.time() * 1000),
                        seq=1,
                        secret=job_secret(key_path),
                    ),
                }
            ],
        )
        backend = SageMakerBackend(paths, clients=clients.__getitem__)  # as attach polls it
        started = time.perf_counter()
        deadline = started + 120
        while backend.manifests(job).get("algo-1") is None:
            if time.perf_counter() > deadline:
                raise RuntimeError("P6: the manifest was not discovered within 120 s")
            time.sleep(0.3)
        return {"discovery_s": time.perf_counter() - started, "goal_s": LOG_DISCOVERY_GOAL_S}
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--short", action="store_true", help="fewer repeats and ranks (CI)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--emulator", action="store_true", help="only the SageMaker path's rows, against `remote-debug emulator`"
    )
    parser.add_argument("--sync", action="store_true", help="only sync's rows (P9, see bench/sync_bench.py)")
    parser.add_argument("--scale", action="store_true", help="only the 64-rank rows (see bench/scale.py)")
    parser.add_argument("--stacks", action="store_true", help="only P12, stacks of 64 ranks (see bench/scale.py)")
    parser.add_argument("--iterate", action="store_true", help="only the iterate row (P10, see bench/iterate.py)")
    parser.add_argument("--adopt", action="store_true", help="only the adopt row (P13, see bench/adopt_bench.py)")
    parser.add_argument(
        "--all-stop", action="store_true", help="only the all-stop rows (P14-P16, see bench/all_stop.py)"
    )
    parser.add_argument(
        "--pycharm", action="store_true", help="only P2 and P3 for a PyCharm rank (see bench/pycharm_rows.py)"
    )
    parser.add_argument(
        "--tensors", action="store_true", help="only the tensor view row (P17, see bench/tensor_variables.py)"
    )
    parser.add_argument("--logpoints", action="store_true", help="only the logpoint row (P18, see bench/logpoints.py)")
    args = parser.parse_args(argv)
    repeats = 1 if args.short else 3
    with tempfile.TemporaryDirectory(prefix="rd-bench-") as tmp:
        work = Path(tmp)
        paths = StatePaths(work / "state")
        results: dict[str, dict[str, float]] = {}
        if args.emulator:
            from bench.emulator import emulator_rows

            results.update(emulator_rows(work, args.short))
        elif args.scale:
            from bench.scale import scale_rows

            results.update(scale_rows(work, args.short))
        elif args.stacks:
            from bench.scale import stacks_rows

            results.update(stacks_rows(work, args.short))
        elif args.all_stop:
            from bench.all_stop import all_stop_rows

            results.update(all_stop_rows(work, args.short))
        elif args.logpoints:
            from bench.logpoints import logpoint_rows

            results.update(logpoint_rows(work, args.short))
        elif args.adopt:
            from bench.adopt_bench import adopt_rows

            results.update(adopt_rows(work, args.short))
        elif args.iterate:
            from bench.iterate import iterate_rows

            results.update(iterate_rows(work, args.short))
        elif args.pycharm:
            from bench.pycharm_rows import pycharm_rows

            results.update(pycharm_rows(work, paths, args.short))
        elif args.tensors:
            from bench.tensor_variables import tensor_rows

            results.update(tensor_rows(work, paths, args.short))
        elif args.sync:
            from bench.sync_bench import sync_rows

            results.update(sync_rows(work, args.short))
        else:
            standard_rows(results, work, paths, args.short, repeats)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    width = max((len(k) for k in results), default=0)
    for name, row in results.items():
        cells = ", ".join(f"{k}={v:.3f}" for k, v in row.items())
        print(f"{name:<{width}}  {cells}")
    return 0


def standard_rows(
    results: dict[str, dict[str, float]], work: Path, paths: StatePaths, short: bool, repeats: int
) -> None:
    """P1..P6 (see the module docstring), into ``results``."""
    results["P1 hook ready (2-rank torchrun, trivial script)"] = p1_hook_ready(work, paths, repeats)
    results["P2 idle overhead (call-heavy loop)"] = p2_idle_overhead(
        work, paths, 300_000 if short else 2_000_000, repeats
    )
    results["P3 torch CPU DDP step (attached, no breakpoints; then detached)"] = p3_ddp_step(
        work, paths, 30 if short else 50, repeats
    )
    shapes = [(1, 1), (1, 2)] if short else [(1, 1), (1, 2), (1, 4), (2, 4)]
    results["P4 attach -> all ranks stopped"] = p4_attach_time(paths, work, shapes)
    results["P5 DAP next latency"] = p5_step_latency(paths, work, 5 if short else 20)
    results["P6 attach discovery, 100,000 log events before the manifest"] = p6_log_discovery(paths, 100_000)


if __name__ == "__main__":
    sys.exit(main())
