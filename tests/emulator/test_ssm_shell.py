"""SSM shell sessions (StartSession without DocumentName) in the emulator, driven by AWS's real plugin on a pty.

The emulator runs in-process (:class:`remote_debug.emulator.service.Emulator`) with real training jobs on
emulated nodes; the plugin runs as a user's terminal runs it: its stdin/stdout a pseudo-terminal of ours,
the StartSession response in ``AWS_SSM_START_SESSION_RESPONSE``. Skipped where nodes cannot run (not root,
no namespaces) or the plugin binary is missing. :func:`running_emulator` is shared with
``tests/local/test_ssm_shell.py``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import tty
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest

from remote_debug.emulator.images import ImageMap
from remote_debug.emulator.nodes import Cluster, available
from remote_debug.emulator.service import Emulator
from tests.helpers.ssm_plugin import needs_plugin, real_plugin

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/byoc:latest"
BUCKET = "rd-shell-tests"
SLEEPER = "import time; time.sleep(900)"
WHY_NO_NODES = available()
needs_nodes = pytest.mark.skipif(WHY_NO_NODES is not None, reason=f"emulated nodes unavailable: {WHY_NO_NODES}")
pytestmark = [needs_nodes, needs_plugin, pytest.mark.timeout(180)]


# --- the emulator with jobs (shared with tests/local/test_ssm_shell.py) ------------------------------


@dataclass
class Running:
    emulator: Emulator
    url: str

    def client(self, service: str) -> Any:
        keys = self.emulator.keys  # the emulator's own: it refuses any other signature
        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id=keys.access_key_id,
            aws_secret_access_key=keys.secret_access_key,
        )

    def create_job(
        self, name: str, nodes: int = 1, code: str = SLEEPER, *, remote_debug: bool = True, image: str = IMAGE
    ) -> None:
        request: dict[str, Any] = {
            "TrainingJobName": name,
            "RoleArn": ROLE,
            "AlgorithmSpecification": {
                "TrainingImage": image,
                "TrainingInputMode": "File",
                "ContainerEntrypoint": [sys.executable, "-c", code],
            },
            "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/output"},
            "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": nodes, "VolumeSizeInGB": 1},
            "StoppingCondition": {"MaxRuntimeInSeconds": 900},
        }
        if remote_debug:
            request["RemoteDebugConfig"] = {"EnableRemoteDebug": True}
        self.client("sagemaker").create_training_job(**request)

    def wait_job(self, name: str, done: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict[str, Any]:
        sagemaker = self.client("sagemaker")
        deadline = time.monotonic() + timeout
        while True:
            answer: dict[str, Any] = sagemaker.describe_training_job(TrainingJobName=name)
            if done(answer):
                return answer
            assert time.monotonic() < deadline, f"{name}: {answer['TrainingJobStatus']} {answer['SecondaryStatus']}"
            time.sleep(0.1)

    def start_job(self, name: str, nodes: int = 1, **options: Any) -> None:
        """A job that runs until stopped, in Training (the state remote debug connects in) when this returns."""
        self.create_job(name, nodes, **options)
        self.wait_job(name, lambda d: d["SecondaryStatus"] == "Training")

    def node_root(self, job: str, node: str) -> Path:
        """What the node sees as /opt/ml, from the host (a Cluster object only computes paths)."""
        return Cluster(job, self.emulator.state_dir / "jobs" / job, [node]).root(node)


@contextlib.contextmanager
def running_emulator(state_dir: Path, images: ImageMap | None = None) -> Iterator[Running]:
    """The emulator on loopback with a bucket for job outputs; closed (jobs stopped, sessions ended) on exit."""
    with pytest.MonkeyPatch.context() as patch:
        emulator = Emulator(state_dir / "state", region=REGION, log_delay=0.2, agent_delay=0.0, images=images)
        # The plugin inherits our environment (its ResumeSession/TerminateSession calls): the emulator's keys only.
        for name in [n for n in os.environ if n.startswith("AWS_")]:
            patch.delenv(name)
        for name, value in emulator.keys.env().items():
            patch.setenv(name, value)
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        patch.setenv("AWS_CONFIG_FILE", str(state_dir / "no-aws-config"))
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(state_dir / "no-aws-credentials"))
        try:
            running = Running(emulator, emulator.start())
            running.client("s3").create_bucket(Bucket=BUCKET)
            yield running
        finally:
            emulator.close()


def target(job: str, node: str) -> str:
    return f"sagemaker-training-job:{job}_{node}"


def gone(pid: int, timeout: float = 10) -> bool:
    """Whether process ``pid`` exits (or is reaped) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True  # dead; its parent (the emulator's cluster) reaps it
        except (OSError, IndexError):
            return True
        time.sleep(0.05)
    return False


# --- AWS's plugin on a terminal of ours ----------------------------------------------------------------


@dataclass
class PluginTerminal:
    """session-manager-plugin with a pty as its stdin/stdout (raw, ``cols`` x ``rows``), as a terminal runs it."""

    url: str
    response: dict[str, Any]
    target: str
    cols: int = 101
    rows: int = 33
    out: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self.master, slave = os.openpty()
        tty.setraw(slave)
        self.resize(self.cols, self.rows)
        env = dict(os.environ)
        env["AWS_SSM_START_SESSION_RESPONSE"] = json.dumps(
            {k: self.response[k] for k in ("SessionId", "TokenValue", "StreamUrl")}
        )
        argv = [
            str(real_plugin()),
            "AWS_SSM_START_SESSION_RESPONSE",
            REGION,
            "StartSession",
            "",
            json.dumps({"Target": self.target}),
            self.url,
        ]
        try:
            self.proc = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
        finally:
            os.close(slave)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(self.master, 65536):
                self.out += chunk

    def resize(self, cols: int, rows: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def wait_for(self, pattern: bytes, timeout: float = 20) -> re.Match[bytes]:
        deadline = time.monotonic() + timeout
        while (found := re.search(pattern, bytes(self.out))) is None:
            assert time.monotonic() < deadline, f"{pattern!r} not in the plugin's output: {bytes(self.out[-500:])!r}"
            time.sleep(0.02)
        return found

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(10)
        os.close(self.master)


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with running_emulator(tmp_path_factory.mktemp("ssm-shell")) as running:
        running.start_job("shells", nodes=2)
        yield running


@pytest.fixture
def terminals(emu: Running) -> Iterator[Callable[..., PluginTerminal]]:
    """Starts sessions (StartSession + the plugin); every plugin is killed and every session terminated after."""
    started: list[PluginTerminal] = []
    ssm = emu.client("ssm")

    def open_terminal(job: str, node: str, **options: Any) -> PluginTerminal:
        response = ssm.start_session(Target=target(job, node), **options)
        terminal = PluginTerminal(emu.url, response, target(job, node))
        started.append(terminal)
        return terminal

    try:
        yield open_terminal
    finally:
        for terminal in started:
            with contextlib.suppress(Exception):
                ssm.terminate_session(SessionId=terminal.response["SessionId"])
            terminal.close()


# --- tests ---------------------------------------------------------------------------------------------


def test_a_shell_per_node_as_root_on_a_terminal(emu: Running, terminals: Callable[..., PluginTerminal]) -> None:
    first = terminals("shells", "algo-1")  # no DocumentName: the default shell document
    second = terminals("shells", "algo-2", DocumentName="SSM-SessionManagerRunShell")
    for terminal, node in ((first, "algo-1"), (second, "algo-2")):
        terminal.wait_for(rb"Starting session with SessionId: " + terminal.response["SessionId"].encode())
        # The echo of the typed line has `$(whoami)`; only the shell's output has the values.
        terminal.type('echo "who=$(whoami) host=$(hostname) term=$TERM tty=$(tty) ml=$(ls /opt/ml | tr "\\n" ,)"')
        found = terminal.wait_for(rb"who=([^$\s]+) host=([^$\s]+) term=([^$\s]+) tty=([^$\s]+) ml=([^$\s]+)")
        assert found.group(1, 2, 3) == (b"root", node.encode(), b"xterm-256color")
        assert found.group(4).startswith(b"/dev/pts/")  # stdin is the pty
        assert b"input" in found.group(5).split(b",")  # /opt/ml is the node's root
        # the pty is the controlling terminal of the shell's session: /dev/tty opens
        terminal.type("echo ctty=$(: </dev/tty && echo yes)")
        terminal.wait_for(rb"ctty=yes")
    assert first.response["SessionId"] != second.response["SessionId"]


def _shell_sees_size(terminal: PluginTerminal, size: bytes, timeout: float = 20) -> None:
    """Ask the node's shell for its size until it is ``size``: the plugin sends its terminal's size as a Size
    message on its own schedule (it looks every 500 ms, shellsession.go), so under load the first command
    can run before the first Size message arrived (a clean-clone run saw "24 80", the pty's default)."""
    deadline = time.monotonic() + timeout
    while True:
        terminal.type("echo size=$(stty size)")
        try:
            terminal.wait_for(rb"size=" + size, timeout=2)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def test_size_follows_the_plugins_terminal(terminals: Callable[..., PluginTerminal]) -> None:
    terminal = terminals("shells", "algo-1")
    _shell_sees_size(terminal, b"33 101")  # our terminal's size, sent by the plugin as a Size message
    terminal.resize(120, 40)
    _shell_sees_size(terminal, b"40 120")


def test_exit_ends_the_session(emu: Running, terminals: Callable[..., PluginTerminal]) -> None:
    terminal = terminals("shells", "algo-2")
    session_id = terminal.response["SessionId"]
    terminal.type("echo bye; exit 0")
    terminal.wait_for(rb"bye")
    assert terminal.proc.wait(20) == 0  # channel_closed: the plugin restores its terminal and exits 0
    assert f"Exiting session with sessionId: {session_id}.".encode() in terminal.out
    assert session_id not in [s.session_id for s in emu.emulator.channel.sessions()]


def test_terminate_kills_the_shell_and_its_foreground_command(
    emu: Running, terminals: Callable[..., PluginTerminal]
) -> None:
    terminal = terminals("shells", "algo-1")
    terminal.type('echo "shell=$$"; sh -c \'echo "child=$$"; exec sleep 600\'')
    shell = int(terminal.wait_for(rb"shell=(\d+)").group(1))
    child = int(terminal.wait_for(rb"child=(\d+)").group(1))
    emu.client("ssm").terminate_session(SessionId=terminal.response["SessionId"])
    assert terminal.proc.wait(20) == 0
    assert gone(shell), f"the shell {shell} outlived TerminateSession"
    assert gone(child), f"the shell's foreground command {child} outlived TerminateSession (no hangup?)"
    assert terminal.response["SessionId"] not in [s.session_id for s in emu.emulator.channel.sessions()]


def test_only_running_remote_debug_nodes_are_connectable(emu: Running) -> None:
    emu.create_job("shell-done", code="pass")
    emu.start_job("shell-nodebug", remote_debug=False)
    emu.wait_job("shell-done", lambda d: d["TrainingJobStatus"] == "Completed")
    ssm = emu.client("ssm")
    for refused in (
        target("shell-done", "algo-1"),
        target("shell-nodebug", "algo-1"),
        target("shells", "algo-3"),
        target("nope", "algo-1"),
    ):
        with pytest.raises(botocore.exceptions.ClientError) as error:
            ssm.start_session(Target=refused)
        assert error.value.response["Error"]["Code"] == "TargetNotConnected", refused
    with pytest.raises(botocore.exceptions.ClientError) as error:
        ssm.start_session(Target=target("shells", "algo-1"), Parameters={"portNumber": ["22"]})
    assert error.value.response["Error"]["Code"] == "ValidationException"
    assert not emu.emulator.channel.sessions()


def test_stopping_the_job_ends_its_shell_sessions(emu: Running, terminals: Callable[..., PluginTerminal]) -> None:
    emu.start_job("shell-stopped")
    terminal = terminals("shell-stopped", "algo-1")
    terminal.type('echo "shell=$$"')
    shell = int(terminal.wait_for(rb"shell=(\d+)").group(1))
    emu.client("sagemaker").stop_training_job(TrainingJobName="shell-stopped")
    assert terminal.proc.wait(60) == 0  # the node's processes die, the pty hangs up, channel_closed
    assert b"Exiting session with sessionId" in terminal.out
    assert gone(shell)
    emu.wait_job("shell-stopped", lambda d: d["TrainingJobStatus"] == "Stopped")
