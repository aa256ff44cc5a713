"""The SSM transport against botocore's model (Stubber) and a stand-in plugin that checks the CLI contract."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import boto3
import pytest
from botocore.stub import Stubber

from remote_debug.local import ssm
from remote_debug.local.errors import UserError
from tests.fake_aws import TOKEN_PREFIX, echo_server, install_fake_plugin, plugin_records

REGION = "us-west-2"
TARGET = "sagemaker-training-job:my-job_algo-1"
RESPONSE = {
    "SessionId": "rd-1",
    "TokenValue": TOKEN_PREFIX + "1",
    "StreamUrl": "wss://ssmmessages.us-west-2.amazonaws.com/v1/data-channel/rd-1?role=publish_subscribe",
}


@pytest.fixture
def client() -> Iterator[tuple[Any, Stubber]]:
    ssm_client = boto3.client("ssm", region_name=REGION, aws_access_key_id="a", aws_secret_access_key="b")
    with Stubber(ssm_client) as stubber:
        yield ssm_client, stubber
        stubber.assert_no_pending_responses()


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    install_fake_plugin(tmp_path / "bin", tmp_path / "plugin-log")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PLUGIN_LOG", str(tmp_path / "plugin-log"))
    return tmp_path / "plugin-log"


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A TCP echo server: what the node's sshd is to the plugin, for these tests."""
    with echo_server() as port:
        yield port


def _pipes(tmp_path: Path, data: bytes) -> tuple[BinaryIO, BinaryIO, Path]:
    source = tmp_path / "stdin.bin"
    source.write_bytes(data)
    out = tmp_path / "stdout.bin"
    return open(source, "rb"), open(out, "wb"), out


def _expect_start(stubber: Stubber, port: int) -> None:
    stubber.add_response(
        "start_session", RESPONSE,
        {"Target": TARGET, "DocumentName": "AWS-StartSSHSession", "Parameters": {"portNumber": [str(port)]}},
    )


def test_session_runs_the_plugin_as_the_aws_cli_does(
    client: tuple[Any, Stubber], plugin_dir: Path, echo_port: int, tmp_path: Path
) -> None:
    ssm_client, stubber = client
    _expect_start(stubber, echo_port)
    stdin, stdout, out = _pipes(tmp_path, b"SSH-2.0-hello\r\n")
    with stdin, stdout:
        code = ssm.run_session(ssm_client, TARGET, echo_port, stdin, stdout, profile="dev")
    assert code == 0
    assert out.read_bytes() == b"SSH-2.0-hello\r\n"  # relayed through the plugin to "sshd" and back
    [record] = plugin_records(plugin_dir)
    assert record["argv"] == [
        "AWS_SSM_START_SESSION_RESPONSE", REGION, "StartSession", "dev",
        json.dumps({"Target": TARGET, "DocumentName": "AWS-StartSSHSession",
                    "Parameters": {"portNumber": [str(echo_port)]}}),
        "https://ssm.us-west-2.amazonaws.com",
    ]
    assert record["session_id"] == "rd-1"
    assert "AWS_SSM_START_SESSION_RESPONSE" not in os.environ  # only the plugin's environment had it
    # no TerminateSession after a clean end: the plugin closes its own session


def test_missing_plugin_starts_no_session(
    client: tuple[Any, Stubber], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no plugin anywhere
    ssm_client, _ = client  # no stubbed response: a StartSession call would fail differently
    stdin, stdout, _ = _pipes(tmp_path, b"")
    with stdin, stdout, pytest.raises(ssm.PluginError, match="session-manager-plugin not found on PATH: install"):
        ssm.run_session(ssm_client, TARGET, 2222, stdin, stdout)


def test_plugin_that_cannot_run_terminates_the_session(client: tuple[Any, Stubber], tmp_path: Path) -> None:
    ssm_client, stubber = client
    _expect_start(stubber, 2222)
    stubber.add_response("terminate_session", {"SessionId": "rd-1"}, {"SessionId": "rd-1"})
    broken = ssm.Plugin(str(tmp_path / "gone" / "session-manager-plugin"), "1.2.707.0")
    stdin, stdout, _ = _pipes(tmp_path, b"")
    with stdin, stdout, pytest.raises(ssm.PluginError, match="cannot run"):
        ssm.run_session(ssm_client, TARGET, 2222, stdin, stdout, plugin=broken)


def test_failing_plugin_terminates_the_session(client: tuple[Any, Stubber], tmp_path: Path) -> None:
    ssm_client, stubber = client
    _expect_start(stubber, 2222)
    stubber.add_response("terminate_session", {"SessionId": "rd-1"}, {"SessionId": "rd-1"})
    script = tmp_path / "plugin"
    script.write_text("#!/bin/sh\nexit 5\n")
    script.chmod(0o755)
    stdin, stdout, _ = _pipes(tmp_path, b"")
    with stdin, stdout:
        assert ssm.run_session(ssm_client, TARGET, 2222, stdin, stdout,
                               plugin=ssm.Plugin(str(script), "1.2.707.0")) == 5


def test_sigint_is_left_to_the_plugin_and_sighup_ends_the_session(
    client: tuple[Any, Stubber], tmp_path: Path
) -> None:
    """Ctrl-C while the plugin runs must not kill us (the plugin would be orphaned); ssh's SIGHUP on
    exit ends the plugin and then the session."""
    ssm_client, stubber = client
    _expect_start(stubber, 2222)
    stubber.add_response("terminate_session", {"SessionId": "rd-1"}, {"SessionId": "rd-1"})
    script = tmp_path / "plugin"
    script.write_text(
        "#!/bin/sh\nkill -INT $PPID\nsleep 0.2\nkill -HUP $PPID\nexec sleep 30\n"
    )
    script.chmod(0o755)
    stdin, stdout, _ = _pipes(tmp_path, b"")
    with stdin, stdout:
        code = ssm.run_session(ssm_client, TARGET, 2222, stdin, stdout,
                               plugin=ssm.Plugin(str(script), "1.2.707.0"))
    assert code == -signal.SIGTERM
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored afterwards


def test_plugin_version_rules(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ssm.parse_version(" 1.2.707.0\n") == (1, 2, 707, 0)
    assert ssm.parse_version("1.2") == (1, 2, 0, 0)
    assert ssm.parse_version("dev") is None
    assert ssm.find_plugin().version == "1.2.707.0"
    monkeypatch.setenv("FAKE_PLUGIN_VERSION", "1.2.497.0")  # would need the token in argv: refused
    with pytest.raises(ssm.PluginError, match="too old"):
        ssm.find_plugin()


def test_target_not_connected_is_one_actionable_line(client: tuple[Any, Stubber]) -> None:
    ssm_client, stubber = client
    stubber.add_client_error("start_session", "TargetNotConnected", f"{TARGET} is not connected.")
    with pytest.raises(UserError) as info:
        ssm.start_session(ssm_client, TARGET, 2222)
    message = str(info.value)
    assert "\n" not in message and "is not connected" in message
    # the two causes a user can act on: the job's state, and a VPC without a way out to SSM
    assert "Training" in message and "remote debugging enabled" in message
    assert "VPC" in message and "NAT gateway" in message
    assert "VPC interface endpoints for ssm, ssmmessages and ec2messages" in message


def test_hybrid_target_not_connected_says_the_same_about_the_vpc(client: tuple[Any, Stubber]) -> None:
    ssm_client, stubber = client
    stubber.add_client_error("start_session", "TargetNotConnected", "mi-0123456789abcdef0 is not connected.")
    with pytest.raises(UserError) as info:
        ssm.start_session(ssm_client, "mi-0123456789abcdef0", 2222)
    message = str(info.value)
    assert "\n" not in message and "amazon-ssm-agent" in message and "NAT gateway" in message


def test_standard_tier_refusal_names_the_setting_to_change(client: tuple[Any, Stubber]) -> None:
    ssm_client, stubber = client
    stubber.add_client_error(
        "start_session", "BadRequest", "Enable advanced-instances tier to use Session Manager with your on-premises "
        "instances",
    )
    with pytest.raises(UserError) as info:
        ssm.start_session(ssm_client, "mi-0123456789abcdef0", 2222)
    message = str(info.value)
    assert "\n" not in message
    assert "aws ssm update-service-setting --setting-id /ssm/managed-instance/activation-tier " \
           f"--setting-value advanced --region {REGION}" in message


def test_access_denied_points_at_doctor(client: tuple[Any, Stubber]) -> None:
    ssm_client, stubber = client
    stubber.add_client_error("start_session", "AccessDeniedException", "not authorized to perform ssm:StartSession")
    with pytest.raises(UserError, match="remote-debug doctor"):
        ssm.start_session(ssm_client, TARGET, 2222)


def test_native_target_is_built_not_looked_up() -> None:
    assert ssm.native_target("my-job", "algo-2") == "sagemaker-training-job:my-job_algo-2"
