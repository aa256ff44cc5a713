"""The SSM transport with AWS's real session-manager-plugin, against the emulator's SSM API.

``ssm.run_session`` runs the plugin as the AWS CLI does: StartSession (served by
``remote_debug.emulator``, reached through ``AWS_ENDPOINT_URL_SSM``), the response in the plugin's environment
only, ``<plugin> AWS_SSM_START_SESSION_RESPONSE <region> StartSession <profile> <request> <endpoint>``; the real
plugin then opens the emulator's data channel and relays to a port on this machine (an echo server, or a
private sshd for real OpenSSH). Errors SSM answers that the emulator does not produce (the hybrid tier, IAM)
come from botocore's Stubber.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import boto3
import pytest
from botocore.stub import Stubber

from remote_debug.emulator.sigv4 import Keys
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws import ssm
from remote_debug.laptop.core.errors import UserError
from tests.helpers.hook_runs import TOKEN_ENV, alive, kill_all, make_key, pids_with_env, scan_for_secrets, wait_for
from tests.helpers.sshd import private_sshd
from tests.helpers.ssm_plugin import (
    LocalSsm,
    banner,
    drive_in_process,
    echo_server,
    needs_plugin,
    plugin_bin,
    plugin_pids,
    plugin_version,
    proc_strings,
    read_all,
    relay_argv,
    relay_env,
)

REGION = "us-west-2"
TARGET = "sagemaker-training-job:my-job_algo-1"
PROFILE = "dev"
PROFILE_KEY = "AKIDREMOTEDEBUGDEV01"  # the dev profile's access key: the emulator names sessions after it
PROFILE_SECRET = "dev-secret"  # the emulator accepts the profile's keys only (LocalSsm's keys)
needs_ssh = pytest.mark.skipif(
    shutil.which("ssh") is None or not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH (ssh and sshd)"
)


@pytest.fixture
def local_ssm(tmp_path: Path) -> Iterator[LocalSsm]:
    with LocalSsm(tmp_path / "emulator", REGION, keys=Keys(PROFILE_KEY, PROFILE_SECRET)) as service:
        service.targets.add(TARGET)
        yield service


@pytest.fixture
def client(local_ssm: LocalSsm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The product's SSM client for an AWS profile ``dev`` (config files of this test only), with the emulator
    as the SSM endpoint the way a user points at one: ``AWS_ENDPOINT_URL_SSM``."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    (tmp_path / "aws-config").write_text(f"[profile {PROFILE}]\nregion = {REGION}\n")
    (tmp_path / "aws-credentials").write_text(
        f"[{PROFILE}]\naws_access_key_id = {PROFILE_KEY}\naws_secret_access_key = {PROFILE_SECRET}\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", local_ssm.url)
    aws.configure()
    try:
        yield aws.client("ssm", profile_name=PROFILE)
    finally:
        aws.configure()


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The real plugin first on PATH; its path as ``find_plugin`` sees it."""
    bin_dir = plugin_bin(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "session-manager-plugin"


@pytest.fixture
def echo() -> Iterator[int]:
    """What the node's sshd is to the session, for the tests that need no ssh: its port."""
    with echo_server() as server:
        yield server.port


# --- run_session in this process, with a driver thread on the other end of its stdin/stdout ----------------


@dataclass
class Live:
    """A running plugin, as the driver sees it."""

    pid: int
    stdin: int  # the write end of the plugin's stdin
    out: bytearray  # everything the plugin wrote to stdout so far

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.stdin, view) :]

    def wait_output(self, size: int, timeout: float = 30) -> None:
        wait_for(lambda: len(self.out) >= size or None, timeout, f"{size} bytes from the plugin (have {len(self.out)})")


def run_driven(client: Any, port: int, drive: Callable[[Live], None], **kwargs: Any) -> tuple[int, bytes]:
    """``ssm.run_session`` on pipes in this (the main) thread, where it installs its signal handlers, while
    ``drive`` talks to the plugin from a thread; then the driver closes the plugin's stdin (the user's side
    hangs up). Returns the exit code and everything the plugin wrote. The plugin is killed by its pid if it
    outlives the test."""
    finished = threading.Event()

    def driver(stdin: int, out: bytearray) -> None:
        deadline = time.monotonic() + 30
        while not (pids := plugin_pids(os.getpid())):
            if finished.is_set() or time.monotonic() > deadline:
                raise AssertionError("the plugin did not start")
            time.sleep(0.02)
        drive(Live(pids[0], stdin, out))

    def session(stdin: BinaryIO, stdout: BinaryIO) -> int:
        try:
            return ssm.run_session(client, TARGET, port, stdin, stdout, **kwargs)
        finally:
            finished.set()

    return drive_in_process(session, driver)


@needs_plugin
def test_session_runs_the_real_plugin_as_the_aws_cli_does(
    local_ssm: LocalSsm, client: Any, on_path: Path, echo: int
) -> None:
    payload = b"SSH-2.0-hello\r\n" + os.urandom(256 * 1024)
    seen: dict[str, Any] = {}
    handlers = {
        sig: signal.getsignal(sig)
        for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGHUP, signal.SIGTERM)
    }

    def drive(live: Live) -> None:
        [session] = local_ssm.channel.started
        seen["cmdline"] = proc_strings(live.pid, "cmdline")
        seen["environ"] = dict(entry.split("=", 1) for entry in proc_strings(live.pid, "environ"))
        seen["in argv"] = scan_for_secrets([session.token_value], "cmdline").offenders
        seen["in environ"] = [pid for pid, _ in scan_for_secrets([session.token_value], "environ").offenders]
        seen["handlers"] = {sig: signal.getsignal(sig) for sig in handlers}
        live.send(payload)
        live.wait_output(len(banner(session.session_id)) + len(payload))
        seen["pid"] = live.pid

    code, out = run_driven(client, echo, drive, profile=PROFILE)

    [session] = local_ssm.channel.started
    assert code == 0
    # relayed intact both ways, after the plugin's own line (ssh and paramiko skip lines before SSH-2.0-)
    assert out == banner(session.session_id) + payload
    assert session.session_id.startswith(f"{PROFILE_KEY}-")  # StartSession was signed with the profile's keys
    request = {"Target": TARGET, "DocumentName": "AWS-StartSSHSession", "Parameters": {"portNumber": [str(echo)]}}
    assert (session.target, session.document, session.port) == (TARGET, "AWS-StartSSHSession", echo)
    # the AWS CLI's argv: the NAME of the variable, region, operation, profile, request, endpoint
    assert seen["cmdline"] == [
        str(on_path),
        "AWS_SSM_START_SESSION_RESPONSE",
        REGION,
        "StartSession",
        PROFILE,
        json.dumps(request),
        local_ssm.url,
    ]
    # the response, token included, is in the plugin's environment: that process's and no other's
    response = json.loads(seen["environ"]["AWS_SSM_START_SESSION_RESPONSE"])
    assert response == {
        "SessionId": session.session_id,
        "TokenValue": session.token_value,
        "StreamUrl": session.stream_url,
    }
    assert seen["in environ"] == [seen["pid"]]
    assert seen["in argv"] == []  # in no process's command line, where any local user could read it
    assert "AWS_SSM_START_SESSION_RESPONSE" not in os.environ
    # the user's signals were ignored while the plugin ran, and every handler is back afterwards
    assert all(seen["handlers"][sig] == signal.SIG_IGN for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP))
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers


def test_missing_plugin_starts_no_session(
    local_ssm: LocalSsm, client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no plugin anywhere
    with (
        open(os.devnull, "rb") as stdin,
        open(os.devnull, "wb") as stdout,
        pytest.raises(ssm.PluginError, match="session-manager-plugin not found on PATH: install"),
    ):
        ssm.run_session(client, TARGET, 2222, stdin, stdout)
    assert local_ssm.channel.started == []  # looked for before StartSession: no session to clean up


def test_plugin_that_cannot_run_terminates_the_session(local_ssm: LocalSsm, client: Any, tmp_path: Path) -> None:
    broken = ssm.Plugin(str(tmp_path / "gone" / "session-manager-plugin"), "1.2.650.0")  # found, then removed
    with (
        open(os.devnull, "rb") as stdin,
        open(os.devnull, "wb") as stdout,
        pytest.raises(ssm.PluginError, match="cannot run"),
    ):
        ssm.run_session(client, TARGET, 2222, stdin, stdout, plugin=broken)
    [session] = local_ssm.channel.started
    assert local_ssm.channel.terminated == [session.session_id]  # not left for the agent to time out
    assert local_ssm.channel.open_ids() == []


@needs_plugin
def test_a_clean_exit_of_the_plugin_terminates_the_session_too(
    local_ssm: LocalSsm, client: Any, on_path: Path, echo: int
) -> None:
    """The real plugin exits 0 when its stdin closes and leaves the session open on the agent's side
    (upstream's standardstreamforwarding.go): a ProxyCommand whose ssh vanished without a signal would
    otherwise leave a session behind until the agent's idle timeout."""

    def drive(live: Live) -> None:
        [session] = local_ssm.channel.started
        live.send(b"ping")
        live.wait_output(len(banner(session.session_id)) + 4)  # live; then the driver closes stdin

    code, _ = run_driven(client, echo, drive)
    assert code == 0
    [session] = local_ssm.channel.started
    assert local_ssm.channel.terminated == [session.session_id]
    assert local_ssm.channel.open_ids() == []


@needs_plugin
def test_plugin_that_dies_terminates_the_session(local_ssm: LocalSsm, client: Any, on_path: Path, echo: int) -> None:
    """The real plugin killed mid-session (say, by the OOM killer): it cannot end its session, we do."""

    def drive(live: Live) -> None:
        [session] = local_ssm.channel.started
        live.send(b"ping")
        live.wait_output(len(banner(session.session_id)) + 4)  # the session is live
        os.kill(live.pid, signal.SIGKILL)

    code, _ = run_driven(client, echo, drive)
    assert code == -signal.SIGKILL
    [session] = local_ssm.channel.started
    assert local_ssm.channel.terminated == [session.session_id]
    assert local_ssm.channel.open_ids() == []


# --- run_session in a process of its own, as a ProxyCommand runs it ------------------------------------------


@dataclass
class Relay:
    """``ssm.run_session`` in its own process group (a terminal's foreground job: ssh and its ProxyCommand)."""

    proc: subprocess.Popen[bytes]
    out: bytearray = field(default_factory=bytearray)
    sent: bytearray = field(default_factory=bytearray)
    reader: threading.Thread | None = None

    def roundtrip(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()
        self.sent += data
        wait_for(lambda: self.out.endswith(self.sent) or None, 20, f"{data!r} back through the session")


@contextlib.contextmanager
def relay(local_ssm: LocalSsm, port: int, tmp_path: Path) -> Iterator[Relay]:
    env = relay_env(
        endpoint=local_ssm.url,
        region=REGION,
        bin_dir=plugin_bin(tmp_path / "bin"),
        token=str(tmp_path),
        scratch=tmp_path,
        keys=local_ssm.keys,
    )
    with open(tmp_path / "relay.stderr", "wb") as stderr:
        proc = subprocess.Popen(
            relay_argv(TARGET, port),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
    r = Relay(proc)
    assert proc.stdout is not None
    r.reader = threading.Thread(target=read_all, args=(proc.stdout.fileno(), r.out), daemon=True)
    r.reader.start()
    try:
        yield r
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the group we made: the relay and its plugin
        proc.wait(10)
        kill_all(f"{TOKEN_ENV}={tmp_path}\0")  # a plugin that outlived its relay (it carries our token)
        r.reader.join(10)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _started(local_ssm: LocalSsm, r: Relay) -> tuple[str, int]:
    """The session's id once it relays, and the plugin's pid."""
    session_id = wait_for(
        lambda: local_ssm.channel.started[0].session_id if local_ssm.channel.started else None, 20, "StartSession"
    )
    r.sent += banner(session_id)
    r.roundtrip(b"SSH-2.0-first\r\n")
    [plugin] = plugin_pids(r.proc.pid)
    return session_id, plugin


@needs_plugin
def test_user_signals_are_left_to_the_plugin_and_sighup_ends_the_session(
    local_ssm: LocalSsm, echo: int, tmp_path: Path
) -> None:
    """Ctrl-C / Ctrl-\\ / Ctrl-Z must not kill the relay (the plugin would be orphaned, its session a zombie);
    ssh sends its ProxyCommand SIGHUP on exit: that ends the plugin, and then the session."""
    with relay(local_ssm, echo, tmp_path) as r:
        session_id, plugin = _started(local_ssm, r)
        signals = [(os.kill, sig) for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP)]
        # the terminal's Ctrl-C and Ctrl-Z go to the whole foreground group: the plugin too, which ignores them
        signals += [(os.killpg, signal.SIGINT), (os.killpg, signal.SIGTSTP)]
        for send, sig in signals:
            send(r.proc.pid, sig)
            r.roundtrip(f"after {sig.name} to the {'group' if send is os.killpg else 'relay'}\n".encode())
            assert r.proc.poll() is None and alive(plugin)
        assert local_ssm.channel.terminated == []
        started = time.monotonic()
        os.kill(r.proc.pid, signal.SIGHUP)
        assert r.proc.wait(10) == -signal.SIGTERM & 0xFF  # run_session returned the plugin's -SIGTERM
        wait_for(lambda: not alive(plugin) or None, 10, "the plugin to end")
        wait_for(lambda: local_ssm.channel.open_ids() == [] or None, 10, "the session to end")
        assert local_ssm.channel.terminated == [session_id]
        assert time.monotonic() - started < local_ssm.channel.disconnect_timeout  # not the agent's timeout


@needs_plugin
def test_ctrl_backslash_kills_the_real_plugin_and_the_session_is_terminated(
    local_ssm: LocalSsm, echo: int, tmp_path: Path
) -> None:
    """Unlike SIGINT and SIGTSTP, Go's runtime does not keep an inherited "ignore" for SIGQUIT: the terminal's
    Ctrl-\\ kills the real plugin (exit 2, with a goroutine dump). The relay survives it, passes the plugin's
    exit code on, and terminates the session the plugin could not."""
    with relay(local_ssm, echo, tmp_path) as r:
        session_id, plugin = _started(local_ssm, r)
        os.killpg(r.proc.pid, signal.SIGQUIT)
        assert r.proc.wait(10) == 2
        assert not alive(plugin)
        assert local_ssm.channel.terminated == [session_id]
        assert local_ssm.channel.open_ids() == []
    assert b"SIGQUIT: quit" in (tmp_path / "relay.stderr").read_bytes()


@contextlib.contextmanager
def openssh_through_the_proxy(local_ssm: LocalSsm, tmp_path: Path) -> Iterator[tuple[list[str], dict[str, str], int]]:
    """A real sshd and the OpenSSH client argv that reaches it as ssh reaches a node: ProxyCommand = the product's
    relay (run_session) -> the real plugin -> the emulator's data channel.  Yields (argv without the remote
    command, its environment, the sshd's port); every relay and plugin is killed after, even on failure, and the
    sessions must have ended and the relays exited by then."""
    key = tmp_path / "id"
    token = f"{TOKEN_ENV}={tmp_path}\0"
    env = relay_env(
        endpoint=local_ssm.url,
        region=REGION,
        bin_dir=plugin_bin(tmp_path / "bin"),
        token=str(tmp_path),
        scratch=tmp_path,
        keys=local_ssm.keys,
    )
    proxy = shlex.join(relay_argv(TARGET, "%p"))
    try:
        with private_sshd(tmp_path, make_key(key)) as sshd:
            (tmp_path / "known_hosts").write_text(f"node-1 {sshd.host_key_line}\n")
            argv = [
                "ssh",
                "-F",
                "/dev/null",
                "-i",
                str(key),
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                f"UserKnownHostsFile={tmp_path / 'known_hosts'}",
                "-o",
                "HostKeyAlias=node-1",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                f"ProxyCommand={proxy}",
                "-p",
                str(sshd.port),
                f"{getpass.getuser()}@node-1",
            ]
            yield argv, env, sshd.port
            # ssh hangs up on its ProxyCommand when it exits: each session ends now, not at the agent's timeout
            # (20 minutes idle); 30 s leaves room for the plugin's teardown on a loaded machine (10 s was missed)
            wait_for(lambda: local_ssm.channel.open_ids() == [] or None, 30, "the sessions to end")
            wait_for(lambda: pids_with_env(token) == [] or None, 30, "the relays and plugins to exit")
    finally:
        kill_all(token)


@needs_plugin
@needs_ssh
def test_real_openssh_through_the_plugin_leaves_no_session_or_process(local_ssm: LocalSsm, tmp_path: Path) -> None:
    """ssh -> ProxyCommand (run_session) -> the real plugin -> the emulator's data channel -> a real sshd."""
    with openssh_through_the_proxy(local_ssm, tmp_path) as (argv, env, port):
        for command, expected in ((["echo", "in-job"], (0, "in-job\n")), (["exit", "3"], (3, ""))):
            result = subprocess.run(
                [*argv, *command], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
            )
            assert (result.returncode, result.stdout) == expected, result.stderr
        assert [(s.target, s.port) for s in local_ssm.channel.started] == [(TARGET, port)] * 2


@needs_plugin
@needs_ssh
def test_a_target_that_refuses_the_ssh_document_is_reached_by_port_forwarding(
    local_ssm: LocalSsm, tmp_path: Path
) -> None:
    """AWS documents shell sessions and port forwarding on SageMaker's native target, not AWS-StartSSHSession: when
    SSM refuses that document, the proxy says so in one line and forwards a port through the real plugin (smux on
    the agent's side) instead; ssh works as before and nothing is left behind."""
    local_ssm.emulator.ssh_document = False
    with openssh_through_the_proxy(local_ssm, tmp_path) as (argv, env, port):
        result = subprocess.run(
            [*argv, "echo", "forwarded"], env=env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL
        )
        assert (result.returncode, result.stdout) == (0, "forwarded\n"), result.stderr
        said = [line for line in result.stderr.splitlines() if "AWS-StartSSHSession refused" in line]
        assert len(said) == 1 and said[0].endswith("using AWS-StartPortForwardingSession instead"), result.stderr
        [session] = local_ssm.channel.started
        assert (session.target, session.document, session.port) == (TARGET, "AWS-StartPortForwardingSession", port)


def test_plugin_version_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ssm.parse_version(" 1.2.707.0\n") == (1, 2, 707, 0)
    assert ssm.parse_version("1.2") == (1, 2, 0, 0)
    assert ssm.parse_version("dev") is None
    # The real plugin cannot show being too old: a script that only prints the version of the last plugin
    # that wanted the token on its command line stands in for one.
    old = tmp_path / "old" / "session-manager-plugin"
    old.parent.mkdir()
    old.write_text("#!/bin/sh\necho 1.2.497.0\n")
    old.chmod(0o755)
    monkeypatch.setenv("PATH", f"{old.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ssm.PluginError, match=r"version '1\.2\.497\.0' is too old .* after 1\.2\.497\.0"):
        ssm.find_plugin()


@needs_plugin
def test_the_real_plugin_is_found_with_its_version(on_path: Path) -> None:
    plugin = ssm.find_plugin()
    assert plugin == ssm.Plugin(str(on_path), plugin_version())
    assert plugin.reads_env


# --- StartSession's refusals, as one actionable line ----------------------------------------------------------


def test_target_not_connected_is_one_actionable_line(
    local_ssm: LocalSsm, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ssm, "AGENT_WAIT_SECONDS", 0.0)  # no wait for an agent (test_agent_timing waits for one)
    target = "sagemaker-training-job:other-job_algo-1"  # no such running job: the emulator's TargetNotConnected
    with pytest.raises(UserError) as info:
        ssm.start_session(client, target, 2222)
    message = str(info.value)
    assert "\n" not in message and f"SSM target {target} is not connected" in message
    # the two causes a user can act on: the job's state, and a VPC without a way out to SSM
    assert "Training" in message and "remote debugging enabled" in message
    assert "VPC" in message and "NAT gateway" in message
    assert "VPC interface endpoints for ssm, ssmmessages and ec2messages" in message
    assert local_ssm.channel.started == []


def test_hybrid_target_not_connected_says_the_same_about_the_vpc(
    local_ssm: LocalSsm, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ssm, "AGENT_WAIT_SECONDS", 0.0)
    with pytest.raises(UserError) as info:
        ssm.start_session(client, "mi-0123456789abcdef0", 2222)
    message = str(info.value)
    assert "\n" not in message and "amazon-ssm-agent" in message and "NAT gateway" in message


@pytest.fixture
def stubbed() -> Iterator[tuple[Any, Stubber]]:
    """For the answers the emulator never gives (a standard-tier account, IAM): botocore-validated stubs."""
    ssm_client = boto3.client("ssm", region_name=REGION, aws_access_key_id="a", aws_secret_access_key="b")
    with Stubber(ssm_client) as stubber:
        yield ssm_client, stubber
        stubber.assert_no_pending_responses()


def test_standard_tier_refusal_names_the_setting_to_change(stubbed: tuple[Any, Stubber]) -> None:
    ssm_client, stubber = stubbed
    stubber.add_client_error(
        "start_session",
        "BadRequest",
        "Enable advanced-instances tier to use Session Manager with your on-premises instances",
    )
    with pytest.raises(UserError) as info:
        ssm.start_session(ssm_client, "mi-0123456789abcdef0", 2222)
    message = str(info.value)
    assert "\n" not in message
    assert (
        "aws ssm update-service-setting --setting-id /ssm/managed-instance/activation-tier "
        f"--setting-value advanced --region {REGION}" in message
    )


def test_access_denied_points_at_doctor(stubbed: tuple[Any, Stubber]) -> None:
    ssm_client, stubber = stubbed
    stubber.add_client_error("start_session", "AccessDeniedException", "not authorized to perform ssm:StartSession")
    with pytest.raises(UserError, match="remote-debug doctor"):
        ssm.start_session(ssm_client, TARGET, 2222)


def test_native_target_is_built_not_looked_up() -> None:
    assert ssm.native_target("my-job", "algo-2") == "sagemaker-training-job:my-job_algo-2"
