"""Secrets of the AWS transports, scanned in /proc while they are in use.

- SSM: the StartSession token travels to session-manager-plugin in its ENVIRONMENT only (the fake
  StartSession of tests/fake_aws.py returns a recognisable TokenValue; the stand-in plugin relays to a
  socket of this test), never in any process's command line.
- Hybrid: the activation code reaches amazon-ssm-agent's ``-register`` command line (the agent takes
  it nowhere else: its flag parser has no file or stdin input) and nothing else - not the hook's
  environment or command line, not the training process, not the running agent, not the node's log
  or manifest; and an agent that fails or hangs does not put the code into the error we log.
- AWS secret keys from the environment appear in no command line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from remote_debug.container import hybrid
from remote_debug.container.hybrid import Activation, AgentCli, HybridError
from tests.container.helpers import (
    PYTHON,
    REPO,
    TOKEN_ENV,
    WAIT_SCRIPT,
    argv_of,
    base_env,
    hook_run,
    kill_all,
    make_key,
    scan_for_secrets,
    wait_for,
)
from tests.fake_aws import TOKEN_PREFIX, FakeSsm, install_fake_plugin, plugin_records

AWS_SECRET = "rdSecretAccessKey0123456789abcdefTRANSPORT"
REGION = "us-west-2"
ACTIVATION_CODE = "rdActivationCode-SECURITY-0123456789"

# What SageMakerBackend.relay does for the ssm transport (the ProxyCommand's work), in its own process.
RELAY = textwrap.dedent(
    """
    import sys, boto3
    from remote_debug.local import ssm
    client = boto3.client("ssm", region_name=sys.argv[3])
    sys.exit(ssm.run_session(client, sys.argv[1], int(sys.argv[2]), sys.stdin.buffer, sys.stdout.buffer))
    """
)


def _aws_env(tmp_path: Path, endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_DEBUG_"))}
    env.update({
        "AWS_ACCESS_KEY_ID": "AKIDSECURITYTEST", "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL_SSM": endpoint, "PYTHONPATH": str(REPO),
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", TOKEN_ENV: str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    })
    return env


def test_ssm_session_token_reaches_only_the_plugin_environment(tmp_path: Path) -> None:
    install_fake_plugin(tmp_path / "bin", tmp_path / "plugin-log")
    # The node's end of the session: what the agent connects the plugin's stream to.
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    relay: subprocess.Popen[bytes] | None = None
    try:
        with FakeSsm() as fake:
            env = _aws_env(tmp_path, fake.url)
            env["FAKE_PLUGIN_LOG"] = str(tmp_path / "plugin-log")
            relay = subprocess.Popen(
                [PYTHON, "-c", RELAY, "sagemaker-training-job:sec-job_algo-1", str(server.getsockname()[1]), REGION],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            )
            wait_for(lambda: accepted, 30, "the plugin to open the session's stream")
            assert relay.stdin is not None and relay.stdout is not None
            relay.stdin.write(b"ping\n")
            relay.stdin.flush()
            assert accepted[0].recv(5) == b"ping\n"  # the session is live while we scan

            [record] = plugin_records(tmp_path / "plugin-log")
            token = f"{TOKEN_PREFIX}0001"
            argv = scan_for_secrets([token, AWS_SECRET], "cmdline")
            environ = scan_for_secrets([token], "environ")
            assert argv.offenders == []
            assert [pid for pid, _ in environ.offenders] == [record["pid"]]  # the plugin, and no one else
            assert fake.calls("StartSession")

            relay.stdin.close()
            accepted[0].close()
            assert relay.wait(30) == 0
        print(f"\n[security] ssm: {argv.scanned} command lines, {environ.scanned} environments scanned; token in "
              f"the environment of {environ.offenders}, in no command line")
    finally:
        if relay is not None and relay.poll() is None:
            relay.kill()
        kill_all(f"{TOKEN_ENV}={tmp_path}\0")
        server.close()
        for conn in accepted:
            conn.close()


# --- hybrid -------------------------------------------------------------------------------------------

AGENT = textwrap.dedent(
    """
    import os, pathlib, sys, time
    args, marks = sys.argv[1:], pathlib.Path(os.environ["FAKE_AGENT_MARKS"])
    deadline = time.monotonic() + 120
    if args[:1] == ["-register"] and "-code" in args:
        (marks / "registering").write_text(str(os.getpid()))
        while not (marks / "registered").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        print("Successfully registered the instance with AWS SSM using Managed instance-id: mi-0123456789abcdef0")
    elif args == []:  # the agent itself: runs until stopped
        (marks / "running").write_text(str(os.getpid()))
        while time.monotonic() < deadline:
            time.sleep(0.1)
    """
)


def _install_agent(bin_dir: Path, source: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    agent = bin_dir / "amazon-ssm-agent"
    agent.write_text(f"#!{sys.executable}\n{source}")
    agent.chmod(0o755)
    return agent


def test_hybrid_activation_code_stays_out_of_everything_but_the_register_call(tmp_path: Path) -> None:
    _install_agent(tmp_path / "bin", AGENT)
    marks = tmp_path / "agent-marks"
    marks.mkdir()
    activation = tmp_path / "input" / "ssm-activation.json"
    activation.parent.mkdir()
    activation.write_text(json.dumps({"ActivationId": "act-123", "ActivationCode": ACTIVATION_CODE, "Region": REGION}))
    public_key = make_key(tmp_path / "client")
    (tmp_path / "wait.py").write_text(WAIT_SCRIPT)
    with FakeSsm() as fake:
        env = base_env(tmp_path / "node", public_key, job="sec-hybrid", transport="hybrid")
        env.update({k: v for k, v in _aws_env(tmp_path, fake.url).items() if k.startswith(("AWS_", "PATH"))})
        env.update({hybrid.ENV_ACTIVATION_FILE: str(activation), "FAKE_AGENT_MARKS": str(marks)})
        (tmp_path / "node").mkdir()
        with hook_run(tmp_path / "node", env) as run:
            run.start(PYTHON, str(tmp_path / "wait.py"), str(run.marks))
            flag = marks / "registering"
            registering = int(wait_for(lambda: flag.read_text() if flag.exists() else None, 30,
                                       "amazon-ssm-agent -register"))
            wait_for(lambda: (run.marks / "started").exists(), 30, "the training command")
            during = scan_for_secrets([ACTIVATION_CODE, AWS_SECRET], "cmdline")
            # The one documented exception: amazon-ssm-agent takes the code on its command line only.
            assert [pid for pid, _ in during.offenders] == [registering]
            agent_argv = argv_of(registering)  # [python, .../amazon-ssm-agent, -register, ...]: a script stand-in
            assert agent_argv[1].endswith("amazon-ssm-agent") and agent_argv[2:4] == ["-register", "-code"]
            in_env = scan_for_secrets([ACTIVATION_CODE], "environ")
            assert in_env.offenders == []  # not the hook's, not the training command's environment

            (marks / "registered").write_text("")
            wait_for(lambda: run.node_if_any() and run.node()["ssm_target"], 30, "the managed instance id")
            wait_for(lambda: (marks / "running").exists(), 30, "the agent to run")
            after = scan_for_secrets([ACTIVATION_CODE, AWS_SECRET], "cmdline")
            assert after.offenders == []  # the running agent, hook, sshd, training: none carries it
            run.release()
            assert run.wait(60) == 0
            assert fake.calls("DeregisterManagedInstance") == [{"InstanceId": "mi-0123456789abcdef0"}]
            published = run.stdout + run.stderr + "".join(p.read_text() for p in run.manifest_dir.iterdir())
            assert "mi-0123456789abcdef0" in published and ACTIVATION_CODE not in published
    print(f"\n[security] hybrid: {during.scanned} + {after.scanned} command lines and {in_env.scanned} environments "
          f"scanned; code only in the -register call (pid {registering}), never in logs or manifest")


@pytest.mark.parametrize("behaviour", ["hangs", "fails"])
def test_a_failing_agent_does_not_put_the_activation_code_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str
) -> None:
    """The error is logged on the node and published in the manifest (CloudWatch Logs for SageMaker):
    whatever the agent does, the code must not be in it."""
    source = (
        "import time; time.sleep(30)\n" if behaviour == "hangs"
        else "import sys; print('invalid activation: ' + ' '.join(sys.argv[1:]), file=sys.stderr); sys.exit(1)\n"
    )
    agent = _install_agent(tmp_path / "bin", source)
    monkeypatch.setattr(hybrid, "REGISTER_TIMEOUT", 1.0)
    cli = AgentCli(str(agent), registration_file=tmp_path / "registration")
    with pytest.raises(HybridError) as failed:
        cli.register(Activation("act-123", ACTIVATION_CODE, REGION))
    message = str(failed.value)
    assert ACTIVATION_CODE not in message and "\n" not in message
    assert ("timed out" if behaviour == "hangs" else "exit 1") in message
    # a traceback (if anyone printed one) would show a chained TimeoutExpired with the full argv
    error = failed.value
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
