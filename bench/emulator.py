"""The SageMaker path's rows, against ``remote-debug emulator``: ``python -m bench --emulator [--short]``.

Needs root (the emulated nodes are namespaces), OpenSSH and AWS's session-manager-plugin (the
``REMOTE_DEBUG_SSM_PLUGIN`` binary, else ``../shared/tools/session-manager-plugin/``); without them the rows
are skipped with the reason.  The emulator runs as a subprocess, as a user runs it; jobs are created
through ``AWS_ENDPOINT_URL`` and the product reaches them only that way, each connection through the
real plugin and the emulator's SSM data channel.  Everything runs under a throwaway ``HOME``.

P7 ssh login: ``ssh -F <ssh-config's file> algo-1.JOB true`` (ProxyCommand ``remote-debug proxy`` ->
   StartSession -> the plugin -> the SSM data channel -> the node's sshd), median of N after a first
   one, vs plain ``ssh`` to the same sshd from inside the node's network namespace (``ip netns exec``,
   no proxy); goal <= 1.5 s
P8 attach to all 4 ranks of a 2-node x 2-process job (``templates/launchers/boto3_request.py``, torchrun):
   ``attach --json --headless`` started the moment the job's SecondaryStatus is Training; time to the
   last ``rank-ready`` from the Training transition and from attach's start; goal <= 5 s.  Full mode
   also attaches to a second such job only once every rank waits for its debugger (attach alone)
P5-SSM DAP ``next`` latency through attach's forward over SSM vs a direct connection to the rank's
   debugpy from inside the node's network namespace (P5 does the same over the local relay)
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from bench import emulator_job
from bench.dap_timing import dap_next_ms
from remote_debug.contract import spec
from remote_debug.laptop.ide.dap_client import DapClient, attach_and_configure
from remote_debug.oskit import netns

REPO = Path(__file__).resolve().parents[1]
LAUNCHERS = REPO / "templates" / "launchers"
REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
BUCKET = "rd-bench"
IMAGE = f"763104351884.dkr.ecr.{REGION}.amazonaws.com/pytorch-training:2.5-cpu-py311"
LOGIN_GOAL_S = 1.5
ATTACH_GOAL_S = 5.0
LOG_DELAY_S = 0.5  # the emulator's default: seconds before a node's output reaches CloudWatch Logs
T = TypeVar("T")

Row = dict[str, float]


class BenchError(RuntimeError):
    pass


def plugin_path() -> Path | None:
    candidates = [os.environ.get("REMOTE_DEBUG_SSM_PLUGIN", "")]
    candidates += [str(p / "shared/tools/session-manager-plugin/session-manager-plugin") for p in REPO.parents[:2]]
    candidates.append(shutil.which("session-manager-plugin") or "")
    return next((Path(c) for c in candidates if c and os.access(c, os.X_OK)), None)


def unavailable() -> str | None:
    """Why the emulator rows cannot run here (one line), or None."""
    if plugin_path() is None:
        return "AWS's session-manager-plugin is not here (set REMOTE_DEBUG_SSM_PLUGIN)"
    if shutil.which("ssh") is None:
        return "no OpenSSH client (ssh)"
    from remote_debug.emulator.nodes import available

    return available()


class EmulatorRun:
    """``remote-debug emulator`` in a subprocess, a throwaway HOME, and the environment to reach it."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.home = work / "home"
        self.state = work / "emulator-state"
        self.env: dict[str, str] = {}
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None

    def __enter__(self) -> EmulatorRun:
        plugin = plugin_path()
        assert plugin is not None
        self.home.mkdir(parents=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_DEBUG_", "SM_"))}
        base.update(
            HOME=str(self.home),
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION=REGION,
            AWS_REGION=REGION,
            PATH=os.pathsep.join([str(plugin.parent), str(Path(sys.executable).parent), base.get("PATH", "")]),
        )
        self._log = (self.work / "emulator.log").open("w")
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "remote_debug",
                "emulator",
                "--json",
                "--state",
                str(self.state),
                "--log-delay",
                str(LOG_DELAY_S),
            ],
            env=base,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=REPO,
        )
        try:
            assert self._proc.stdout is not None
            line = self._proc.stdout.readline()
            if not line:
                raise BenchError(f"the emulator did not start: {(self.work / 'emulator.log').read_text()[-2000:]}")
            self.url = json.loads(line)["endpoint_url"]
            self.env = {**base, "AWS_ENDPOINT_URL": self.url}
            self.client("s3").create_bucket(Bucket=BUCKET)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGTERM)  # an orderly end: it stops its jobs and removes its nodes
            try:
                self._proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def run(self, argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO
        )
        if proc.returncode != 0:
            raise BenchError(f"{' '.join(argv[:5])}... failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
        return proc

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run([sys.executable, "-m", "remote_debug", *args], timeout)

    def popen_cli(self, *args: str, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "remote_debug", *args], env=self.env, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr
        )

    def training_since(self, job: str, timeout: float = 180) -> float:
        """Wait for SecondaryStatus Training; returns the epoch time of that transition."""
        sm = self.client("sagemaker")
        deadline = time.monotonic() + timeout
        while True:
            d = sm.describe_training_job(TrainingJobName=job)
            if d["SecondaryStatus"] == "Training":
                start = next(t["StartTime"] for t in d["SecondaryStatusTransitions"] if t["Status"] == "Training")
                return float(start.timestamp())
            if d["TrainingJobStatus"] != "InProgress" or time.monotonic() > deadline:
                raise BenchError(f"{job} never reached Training: {d['SecondaryStatus']} {d.get('FailureReason', '')}")
            time.sleep(0.05)

    def namespace(self, job: str, node: str) -> str:
        """The network namespace of ``node`` (the emulator names them after its job directory)."""
        from remote_debug.emulator.nodes import Cluster

        hosts = [f"algo-{i}" for i in range(1, int(node.rsplit("-", 1)[1]) + 1)]
        name = Cluster(job, self.state / "jobs" / job, hosts).node(node).namespace
        if not netns.exists(name):
            raise BenchError(f"no network namespace {name} for {node} of {job}")
        return name

    def stop_job(self, job: str) -> None:
        with contextlib.suppress(Exception):  # it may have ended already
            self.client("sagemaker").stop_training_job(TrainingJobName=job)


class EventStream:
    """``remote-debug ... --json`` in the background: each event with the epoch time it arrived."""

    def __init__(self, run: EmulatorRun, *args: str) -> None:
        self._stderr = (run.work / f"attach-{time.monotonic_ns()}.err").open("wb")
        self.started = time.time()
        self.proc = run.popen_cli(*args, stderr=self._stderr)
        self._events: queue.Queue[tuple[float, dict[str, Any]] | None] = queue.Queue()
        self._code: int | None = None
        self._finished = False
        self._reader = threading.Thread(target=self._read, name="bench-events", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self._events.put((time.time(), json.loads(line)))
        self._events.put(None)

    def next(self, deadline: float) -> tuple[float, dict[str, Any]]:
        try:
            item = self._events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise BenchError(f"no event in time; {self.stderr_tail()}") from None
        if item is None:
            self._events.put(None)
            raise BenchError(f"attach ended ({self.proc.wait()}); {self.stderr_tail()}")
        return item

    def stderr_tail(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return Path(self._stderr.name).read_text(errors="replace").strip()[-1500:]

    def finish(self, timeout: float) -> int | None:
        """Wait for the command to end by itself; else end it.  Returns its exit code if it ended by itself.
        Idempotent: a second call returns the first one's answer."""
        if self._finished:
            return self._code
        self._finished = True
        try:
            self._code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        return self._code


def in_namespace(namespace: str, fn: Callable[[], T], timeout: float = 120) -> T:
    """``fn()`` on a thread that entered ``namespace``: the sockets it makes stay there, this process does not move."""
    try:
        return netns.run_in(namespace, fn, "the bench's call", timeout)
    except TimeoutError as exc:
        raise BenchError(f"nothing came back from {namespace} within {timeout} s") from exc


def _launch_single(run: EmulatorRun, job: str) -> None:
    run.run(
        [sys.executable, "-m", "bench.emulator_job", "--job", job, "--role", ROLE, "--bucket", BUCKET, "--image", IMAGE]
    )


def _launch_two_by_two(run: EmulatorRun, job: str) -> None:
    run.run(
        [
            sys.executable,
            str(LAUNCHERS / "boto3_request.py"),
            "--role",
            ROLE,
            "--bucket",
            BUCKET,
            "--image",
            IMAGE,
            "--nodes",
            "2",
            "--procs-per-node",
            "2",
            "--instance-type",
            "ml.c5.xlarge",
            "--job",
            job,
        ]
    )


def _timed(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(argv[:6])}... failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
    return elapsed


def p7_ssh_login(run: EmulatorRun, job: str, repeats: int) -> Row:
    written = json.loads(run.cli("ssh-config", job, "--json", "--timeout", "120").stdout)
    alias = f"algo-1.{job}"
    ssh = shutil.which("ssh") or "ssh"
    base = [ssh, "-F", written["config"], "-o", "BatchMode=yes", "-o", "ConnectTimeout=30"]
    proxied = [*base, alias, "true"]
    # the same sshd, key and pinned host key, from inside the node: no proxy, no plugin, no SSM
    plain = [
        *netns.exec_prefix(run.namespace(job, "algo-1")),
        *base,
        "-o",
        "ProxyCommand=none",
        "-o",
        "HostName=127.0.0.1",
        alias,
        "true",
    ]
    first = _timed(proxied, run.env)
    proxy_s = statistics.median(_timed(proxied, run.env) for _ in range(repeats))
    _timed(plain, run.env)  # the same warm-up
    plain_s = statistics.median(_timed(plain, run.env) for _ in range(repeats))
    return {
        "first_proxy_login_s": first,
        "proxy_login_s": proxy_s,
        "plain_login_s": plain_s,
        "added_s": proxy_s - plain_s,
        "goal_s": LOGIN_GOAL_S,
    }


def p5_ssm_next(run: EmulatorRun, job: str, steps: int) -> Row:
    workspace = run.work / f"ws-{job}"
    workspace.mkdir()
    script = workspace / emulator_job.SCRIPT_NAME
    script.write_text(emulator_job.SCRIPT)
    # attach as the user runs it (VS Code's side: tunnels + forwards, no IDE); we play the IDE
    attach = EventStream(
        run,
        "attach",
        job,
        "--json",
        "--no-launch-json",
        "--no-ssh-include",
        "--workspace",
        str(workspace),
        "--timeout",
        "180",
    )
    try:
        deadline = time.monotonic() + 240
        while True:
            _, event = attach.next(deadline)
            if event["event"] == "rank-ready":
                break
        mapping = [(str(workspace), str(event["code_dir"]))]
        breakpoints = {str(script): [emulator_job.break_line()]}

        def connect(port: int) -> Callable[[], DapClient]:
            return lambda: attach_and_configure(
                "127.0.0.1", port, path_mappings=mapping, breakpoints=breakpoints, timeout=60
            )

        ssm_ms = dap_next_ms(connect(int(event["local_port"])), str(script), steps)
        namespace = run.namespace(job, str(event["node"]))
        direct_ms = dap_next_ms(lambda: in_namespace(namespace, connect(int(event["remote_port"]))), str(script), steps)
    finally:
        run.stop_job(job)
        attach.finish(60)
    return {"ssm_next_ms": ssm_ms, "direct_next_ms": direct_ms, "ssm_vs_direct": ssm_ms / direct_ms}


def _wait_ranks_waiting(run: EmulatorRun, job: str, ranks: int, timeout: float = 180) -> None:
    """Until every rank's document says it waits for a debugger, read as attach reads it (CloudWatch Logs)."""
    from remote_debug.laptop.core.paths import StatePaths
    from remote_debug.laptop.platforms import SageMakerBackend

    clients = {name: run.client(name) for name in ("sagemaker", "logs")}
    backend = SageMakerBackend(StatePaths(run.work / "probe-state"), clients=clients.__getitem__)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [r for m in backend.manifests(job).values() if m for r in m.ranks]
        if len([r for r in found if r.state == spec.RankState.WAITING]) == ranks:
            return
        time.sleep(0.2)
    raise BenchError(f"the {ranks} ranks of {job} did not all wait for a debugger within {timeout} s")


def _attach_until_ready(run: EmulatorRun, job: str, ranks: int) -> tuple[float, float]:
    """``attach --headless`` (no breakpoints: every rank runs on once attached); returns (its start, the epoch
    time of the last rank-ready), after the job ran to its end."""
    workspace = run.work / f"ws-{job}"
    shutil.copytree(LAUNCHERS / "code", workspace)
    attach = EventStream(
        run,
        "attach",
        job,
        "--json",
        "--headless",
        "--no-ssh-include",
        "--workspace",
        str(workspace),
        "--timeout",
        "180",
    )
    ready: dict[int, float] = {}
    try:
        deadline = time.monotonic() + 240
        while len(ready) < ranks:
            at, event = attach.next(deadline)
            if event["event"] == "rank-ready":
                ready.setdefault(int(event["rank"]), at)
        code = attach.finish(240)
        if code != 0:
            raise BenchError(f"attach to {job} ended with {code}: {attach.stderr_tail()}")
    finally:
        attach.finish(0)
        run.stop_job(job)
    return attach.started, max(ready.values())


def p8_attach_from_training(run: EmulatorRun, full: bool) -> Row:
    job = f"bench-p8-{os.getpid()}"
    _launch_two_by_two(run, job)
    training = run.training_since(job)
    started, last_ready = _attach_until_ready(run, job, 4)
    row = {
        "from_training_s": last_ready - training,
        "from_attach_start_s": last_ready - started,
        "goal_s": ATTACH_GOAL_S,
        "log_delay_s": LOG_DELAY_S,
    }
    if full:  # attach alone: started once every rank of a second job waits for its debugger
        job = f"bench-p8w-{os.getpid()}"
        _launch_two_by_two(run, job)
        run.training_since(job)
        _wait_ranks_waiting(run, job, 4)
        started, last_ready = _attach_until_ready(run, job, 4)
        row["attach_when_waiting_s"] = last_ready - started
    return row


ROW_LOGIN = "P7 ssh login through proxy + real plugin + emulator"
ROW_ATTACH = "P8 attach to all 4 ranks of a 2-node emulator job, from Training"
ROW_NEXT = "P5-SSM DAP next latency through SSM + real plugin (emulator)"


def emulator_rows(work: Path, short: bool) -> Iterator[tuple[str, Row]]:
    """The rows, one at a time; nothing when the machine cannot run them (the reason goes to stderr)."""
    reason = unavailable()
    if reason is not None:
        print(f"bench: the emulator rows are skipped: {reason}", file=sys.stderr)
        return
    with EmulatorRun(work / "emulator") as run:
        job = f"bench-p7-{os.getpid()}"
        _launch_single(run, job)
        try:
            run.training_since(job)
            yield ROW_LOGIN, p7_ssh_login(run, job, 3 if short else 10)
            yield ROW_NEXT, p5_ssm_next(run, job, 5 if short else 20)
        finally:
            run.stop_job(job)
        yield ROW_ATTACH, p8_attach_from_training(run, full=not short)
