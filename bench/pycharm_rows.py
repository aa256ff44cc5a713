"""P2 and P3 for a rank debugged from PyCharm: ``python -m bench --pycharm [--short]``.

A PyCharm rank (``ide=pycharm``) starts idle: pydevd-pycharm is not even imported, there is no tracer.
``attach --ide pycharm`` asks it through its control channel (``connect``) to connect out to PyCharm's
debug server on its node port; when the server goes away (PyCharm's Stop) the rank removes pydevd's
tracer from every thread (``remote_debug/container/rank/pycharm_rank.py``).  Here a
:class:`~remote_debug.laptop.ide.pydevd_server.PydevdServer` with no breakpoints plays PyCharm, on this machine
(no ssh tunnel: the rank's node port is the server's port).

P2-PyCharm the call-heavy loop's CPU time in an idle PyCharm rank vs no hook (goal <= 1.02x); the bench
   fails if the rank loaded pydevd or had a tracer.
P3-PyCharm the median DDP step (bench's P3 script), plain vs the rank connected to the server (no
   breakpoints, goal <= 1.10x), then after the server closed (goal <= 1.02x); the bench fails unless the
   rank was traced in the attached phase and untraced after.  ``*_vs_idle_in_rank``: the same two
   ratios within each rank process, against its own steps before it connected (median over the runs):
   free of the few per cent by which two processes differ on a loaded machine.  ``connect_s``: the
   control request -> the rank document says "attached"; ``untrace_s``: the server closed -> "idle".
Best of 3 (``--short``) / 5 runs, the runs with and without the hook interleaved; P3-PyCharm ``--short``: 1 run.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.rank_workloads import CALL_HEAVY, DDP_STEPS, hook_env, run_json
from remote_debug.container.node.sshd import free_port
from remote_debug.contract import job_secret as secrets
from remote_debug.contract import spec
from remote_debug.laptop.core.keys import ensure_job_key, job_secret
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.ide.pydevd_server import PydevdServer

Row = dict[str, float]
IDLE_GOAL = 1.02
ATTACHED_GOAL = 1.10
DETACHED_GOAL = 1.02

_CPU_LINE = 'print(json.dumps({"cpu": time.process_time() - start}))'
# the loop also says whether the hook loaded pydevd or left a tracer: an idle PyCharm rank does neither
IDLE_LOOP = CALL_HEAVY.replace(
    _CPU_LINE,
    'print(json.dumps({"cpu": time.process_time() - start, "pydevd": "pydevd" in sys.modules,'
    ' "traced": sys.gettrace() is not None}))',
)

_DURING = "during = median_step()\n"
# P3's script, but a PyCharm rank connects while it runs (a debugpy rank with --wait is attached before its
# script starts): its steps idle first ("pre_s": the same process before any debugger, a baseline free of
# the differences between processes), then it tells the bench and waits until the bench connected it
DDP_STEPS_PYCHARM = DDP_STEPS.replace(
    _DURING,
    "pre = median_step()\n"
    "if len(sys.argv) > 3:\n"
    "    import pathlib\n"
    "    (pathlib.Path(sys.argv[3]) / 'idle').write_text('')\n"
    "    deadline = time.monotonic() + 60\n"
    "    while not ((pathlib.Path(sys.argv[3]) / 'attached').exists() and sys.gettrace() is not None) \\\n"
    "            and time.monotonic() < deadline:\n"
    "        time.sleep(0.05)\n"
    "    for _ in range(5):  # warm up under the tracer too\n"
    "        step()\n"
    "traced = sys.gettrace() is not None\n" + _DURING,
).replace('"untraced": sys.gettrace() is None}', '"untraced": sys.gettrace() is None, "traced": traced, "pre_s": pre}')
assert IDLE_LOOP != CALL_HEAVY and DDP_STEPS_PYCHARM.count('"pre_s": pre') == 1, "bench scripts changed"


def p2_pycharm_idle(work: Path, paths: StatePaths, iterations: int, repeats: int) -> Row:
    loop = work / "pycharm_idle_loop.py"
    loop.write_text(IDLE_LOOP)
    env_plain = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1")
    plain_cmd = [sys.executable, str(loop), str(iterations)]
    none: list[float] = []
    hooked: list[float] = []
    for i in range(repeats):  # interleaved: a change of load on the machine hits both alike
        none.append(float(run_json(plain_cmd, env_plain)["cpu"]))
        manifest_dir = work / f"p2-pycharm-manifest-{i}"
        env = hook_env(paths, "bench-p2-pycharm", manifest_dir, ide=spec.RankDebugger.PYDEVD)
        result = run_json([sys.executable, "-m", "remote_debug.container", "--", *plain_cmd], env)
        ranks = spec.read_rank_documents(manifest_dir)
        if not ranks or ranks[0].ide != spec.RankDebugger.PYDEVD or ranks[0].error:
            raise RuntimeError(f"P2-PyCharm: the rank was not an idle PyCharm rank: {ranks}")
        if result["pydevd"] or result["traced"]:
            raise RuntimeError(f"P2-PyCharm: the idle rank loaded pydevd or traced: {result}")
        hooked.append(float(result["cpu"]))
    return {
        "none_cpu_s": min(none),
        "pycharm_idle_cpu_s": min(hooked),
        "idle_vs_none": min(hooked) / min(none),
        "goal": IDLE_GOAL,
    }


def _rank(
    manifest_dir: Path,
    until: Callable[[spec.RankEndpoint], bool],
    timeout: float,
    what: str,
    proc: subprocess.Popen[bytes],
) -> spec.RankEndpoint:
    """The rank document once ``until`` holds; raises if the rank exits first or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            ranks = spec.read_rank_documents(manifest_dir)
        except (OSError, ValueError):  # not written yet
            ranks = []
        if ranks and until(ranks[0]):
            return ranks[0]
        if ranks and ranks[0].error:  # e.g. it could not connect: it says why
            raise RuntimeError(f"P3-PyCharm: the rank reports an error before {what}: {ranks[0].error}")
        if proc.poll() is not None:
            raise RuntimeError(f"P3-PyCharm: the rank exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"P3-PyCharm: not {what} within {timeout:g} s: {ranks}")
        time.sleep(0.05)


def _ask_connect(control_port: int, secret: str) -> dict[str, Any]:
    request = {"op": spec.ControlOp.CONNECT.value, "auth": secrets.control_token(secret)}
    with socket.create_connection((spec.LOOPBACK, control_port), timeout=10) as conn:
        conn.sendall(json.dumps(request).encode() + b"\n")
        reply: dict[str, Any] = json.loads(conn.makefile().readline())
    if not reply.get("ok"):
        raise RuntimeError(f"P3-PyCharm: the rank refused connect: {reply}")
    return reply


def _stderr_tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-1500:]
    except OSError:
        return ""


def p3_pycharm_ddp(work: Path, paths: StatePaths, steps: int, repeats: int) -> Row:
    script = work / "ddp_steps_pycharm.py"
    script.write_text(DDP_STEPS_PYCHARM)
    env_plain = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1")
    job = "bench-p3-pycharm"
    secret = job_secret(ensure_job_key(paths, job)[0])

    def plain() -> dict[str, Any]:
        return run_json([sys.executable, str(script), str(steps), str(free_port())], env_plain)

    def attached() -> dict[str, Any]:
        stamp = time.monotonic_ns()
        manifest_dir, marks, log = (
            work / f"p3-pycharm-manifest-{stamp}",
            work / f"p3-pycharm-marks-{stamp}",
            work / f"p3-pycharm-{stamp}.log",
        )
        marks.mkdir()
        server = PydevdServer(HeadlessPlan())  # bound now, listening from start(): its port is the rank's
        proc: subprocess.Popen[bytes] | None = None
        try:
            env = hook_env(paths, job, manifest_dir, ide=spec.RankDebugger.PYDEVD, port_base=server.port)
            with log.open("wb") as err:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "remote_debug.container",
                        "--",
                        sys.executable,
                        str(script),
                        str(steps),
                        str(free_port()),
                        str(marks),
                    ],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=err,
                )
            rank = _rank(manifest_dir, lambda r: bool(r.control_port), 120, "idle with a control channel", proc)
            deadline = time.monotonic() + 600
            while not (marks / "idle").exists():  # its idle steps measured
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("P3-PyCharm: the idle phase did not finish")
                time.sleep(0.05)
            if rank.state != spec.RankState.IDLE or rank.port != server.port:
                raise RuntimeError(f"P3-PyCharm: expected an idle rank on port {server.port}: {rank}")
            server.start()
            asked = time.perf_counter()
            _ask_connect(rank.control_port, secret)
            _rank(manifest_dir, lambda r: r.state == spec.RankState.ATTACHED, 60, "attached", proc)
            connect_s = time.perf_counter() - asked
            (marks / "attached").write_text("")
            while not (marks / "phase1").exists():  # the steps measured with the server connected
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("P3-PyCharm: the attached phase did not finish")
                time.sleep(0.05)
            closed = time.perf_counter()
            server.close()  # PyCharm's Stop: the rank must remove pydevd's tracer from every thread
            _rank(
                manifest_dir, lambda r: r.state == spec.RankState.IDLE, 60, "idle again after the server closed", proc
            )
            untrace_s = time.perf_counter() - closed
            (marks / "detached").write_text("")
            out, _ = proc.communicate(timeout=600)
            if proc.returncode:
                raise RuntimeError(f"P3-PyCharm: the rank failed ({proc.returncode})")
        except Exception as exc:
            raise RuntimeError(f"{exc}\n--- the rank's stderr:\n{_stderr_tail(log)}") from exc
        finally:
            server.close()
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        if not result["traced"]:
            raise RuntimeError("P3-PyCharm: the rank had no tracer in the attached phase")
        if not result["untraced"]:
            raise RuntimeError("P3-PyCharm: the rank kept its tracer after the server closed")
        return {**result, "connect_s": connect_s, "untrace_s": untrace_s}

    base: list[dict[str, Any]] = []
    hooked: list[dict[str, Any]] = []
    for _ in range(repeats):  # interleaved, as in P2-PyCharm
        base.append(plain())
        hooked.append(attached())
    plain_during, plain_after = (min(float(r[key]) for r in base) for key in ("step_s", "after_s"))
    during, after = (min(float(r[key]) for r in hooked) for key in ("step_s", "after_s"))
    in_rank = {
        key: statistics.median(float(r[key]) / float(r["pre_s"]) for r in hooked) for key in ("step_s", "after_s")
    }
    return {
        "plain_step_ms": plain_during * 1000,
        "attached_step_ms": during * 1000,
        "attached_vs_plain": during / plain_during,
        "attached_goal": ATTACHED_GOAL,
        "after_detach_step_ms": after * 1000,
        "after_detach_vs_plain": after / plain_after,
        "after_detach_goal": DETACHED_GOAL,
        # the same ratios within each rank process, vs its own idle steps before it connected (median over runs)
        "attached_vs_idle_in_rank": in_rank["step_s"],
        "after_detach_vs_idle_in_rank": in_rank["after_s"],
        "connect_s": max(float(r["connect_s"]) for r in hooked),
        "untrace_s": max(float(r["untrace_s"]) for r in hooked),
    }


def pycharm_rows(work: Path, paths: StatePaths, short: bool) -> dict[str, Row]:
    return {
        "P2-PyCharm idle rank (call-heavy loop)": p2_pycharm_idle(
            work, paths, 3_000_000 if short else 10_000_000, 3 if short else 5
        ),
        "P3-PyCharm torch CPU DDP step (connected, no breakpoints; then server closed)": p3_pycharm_ddp(
            work, paths, 30 if short else 50, 1 if short else 5
        ),
    }
