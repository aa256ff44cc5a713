"""Secrets of the AWS transports, scanned in /proc while they are in use.

- SSM, with AWS's real session-manager-plugin against the emulator's SSM API and data channel
  (:mod:`tests.helpers.ssm_plugin`): the StartSession token travels to the plugin in its ENVIRONMENT only, never in
  any process's command line (world-readable); the user's AWS keys are where the AWS CLI has them too, in the
  environment of the relay and its plugin, and in no command line.  A second user (``nobody``, by
  ``setpriv``) plays the attacker: it finds neither in any command line it can read, and cannot read the
  environment of the plugin or the relay (``/proc/<pid>/environ`` is for the same uid and root only).
- Hybrid: the activation code reaches amazon-ssm-agent's ``-register`` command line (the agent takes
  it nowhere else: its flag parser has no file or stdin input) and nothing else - not the hook's
  environment or command line, not the training process, not the running agent, not the node's log
  or manifest; and an agent that fails or hangs does not put the code into the error we log.
- AWS secret keys from the environment appear in no command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from remote_debug.container.node import hybrid
from remote_debug.container.node.hybrid import Activation, AgentCli, HybridError
from remote_debug.emulator.sigv4 import Keys
from remote_debug.emulator.ssm_channel import Session
from remote_debug.laptop.aws import ssm
from tests.helpers.fake_aws import FakeSsm
from tests.helpers.hook_runs import (
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
from tests.helpers.second_user import needs_second_user, nobody, python_as_nobody
from tests.helpers.ssm_plugin import (
    LocalSsm,
    banner,
    echo_server,
    needs_plugin,
    plugin_bin,
    plugin_pids,
    read_all,
    relay_argv,
    relay_env,
)

AWS_ACCESS_KEY = "AKIDSECURITYTEST"
AWS_SECRET = "rdSecretAccessKey0123456789abcdefTRANSPORT"
REGION = "us-west-2"
ACTIVATION_CODE = "rdActivationCode-SECURITY-0123456789"
SSM_TARGET = "sagemaker-training-job:sec-job_algo-1"


def _aws_env(tmp_path: Path, endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_DEBUG_"))}
    env.update(
        {
            "AWS_ACCESS_KEY_ID": AWS_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL_SSM": endpoint,
            "PYTHONPATH": str(REPO),
            "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
            TOKEN_ENV: str(tmp_path),
            "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        }
    )
    return env


# --- ssm ----------------------------------------------------------------------------------------------


@dataclass
class LiveSsm:
    """A relay (``SageMakerBackend.relay``'s work, as a ProxyCommand runs it) with the real plugin under it and
    its session live: bytes went to the node's port and back."""

    local_ssm: LocalSsm
    relay: subprocess.Popen[bytes]
    plugin: int
    session: Session
    out: bytearray = field(default_factory=bytearray)


@contextlib.contextmanager
def live_ssm_session(tmp_path: Path) -> Iterator[LiveSsm]:
    """The relay, its plugin and the session; afterwards all of them gone (by the relay's process group, then
    by the test's token in their environment), and the emulator and the node's echo server stopped."""
    keys = Keys(AWS_ACCESS_KEY, AWS_SECRET)  # recognisable keys, which the emulator accepts
    with LocalSsm(tmp_path / "emulator", REGION, keys=keys) as local_ssm, echo_server() as node:
        local_ssm.targets.add(SSM_TARGET)
        env = relay_env(
            endpoint=local_ssm.url,
            region=REGION,
            bin_dir=plugin_bin(tmp_path / "bin"),
            token=str(tmp_path),
            scratch=tmp_path,
            keys=keys,
        )
        relay = subprocess.Popen(
            relay_argv(SSM_TARGET, node.port),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert relay.stdin is not None and relay.stdout is not None
        out = bytearray()
        reader = threading.Thread(target=read_all, args=(relay.stdout.fileno(), out), daemon=True)
        reader.start()
        try:
            relay.stdin.write(b"ping\n")
            relay.stdin.flush()
            session = wait_for(
                lambda: local_ssm.channel.started[0] if local_ssm.channel.started else None, 30, "StartSession"
            )
            wait_for(
                lambda: bytes(out) == banner(session.session_id) + b"ping\n" or None,
                30,
                "ping back through the session",
            )  # the session is live while we scan
            [plugin] = plugin_pids(relay.pid)
            yield LiveSsm(local_ssm, relay, plugin, session, out)
        finally:
            if relay.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(relay.pid, signal.SIGKILL)  # the group we made: the relay and its plugin
            relay.wait(10)
            kill_all(f"{TOKEN_ENV}={tmp_path}\0")  # a plugin that outlived its relay (it carries our token)
            reader.join(10)
            for pipe in (relay.stdin, relay.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()


@needs_plugin
def test_ssm_session_token_reaches_only_the_plugin_environment(tmp_path: Path) -> None:
    with live_ssm_session(tmp_path) as live:
        token = live.session.token_value
        argv = scan_for_secrets([token, AWS_SECRET], "cmdline")
        environ = scan_for_secrets([token], "environ")
        keys = scan_for_secrets([AWS_SECRET], "environ")
        assert argv.offenders == []  # in no command line, where any local user could read it
        assert [pid for pid, _ in environ.offenders] == [live.plugin]  # the plugin, and no one else
        assert sorted(pid for pid, _ in keys.offenders) == sorted([live.relay.pid, live.plugin])
        assert argv_of(live.plugin)[1] == ssm.RESPONSE_ENV  # the plugin is told the variable's NAME
        assert live.session.session_id.startswith(f"{AWS_ACCESS_KEY}-")  # StartSession signed with those keys

        assert live.relay.stdin is not None
        live.relay.stdin.close()  # ssh is done: the plugin exits, the relay ends the session
        assert live.relay.wait(30) == 0
        assert live.local_ssm.channel.terminated == [live.session.session_id]
    print(
        f"\n[security] ssm: {argv.scanned} command lines, {environ.scanned} environments scanned; token in "
        f"the environment of {environ.offenders}, in no command line"
    )


# The attacker: another local user, scanning every command line and environment it can read for the secrets
# (given on stdin: never in its own command line), and trying the relay's and the plugin's environment.
ATTACKER = textwrap.dedent(
    """
    import errno, json, os, sys
    task = json.load(sys.stdin)
    needles = [s.encode() for s in task["secrets"]]
    report = {"uid": os.getuid(), "read": {"cmdline": 0, "environ": 0}, "found": [], "tried": {}}
    for entry in os.listdir("/proc"):
        for what in ("cmdline", "environ") if entry.isdigit() else ():
            try:
                with open(f"/proc/{entry}/{what}", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            report["read"][what] += 1
            if any(n in data for n in needles):
                report["found"].append([int(entry), what])
    for pid in task["pids"]:
        for what in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as fh:
                    fh.read()
                outcome = "read"
            except OSError as exc:
                outcome = errno.errorcode.get(exc.errno or 0, str(exc))
            report["tried"].setdefault(str(pid), {})[what] = outcome
    json.dump(report, sys.stdout)
    """
)


def _as_nobody(task: dict[str, Any]) -> dict[str, Any]:
    result = subprocess.run(
        python_as_nobody(ATTACKER),
        input=json.dumps(task),
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["uid"] == nobody().pw_uid
    return report


@needs_plugin
@needs_second_user
def test_another_user_reads_neither_the_token_nor_the_keys(tmp_path: Path) -> None:
    """The token and the keys are in the environment of the relay and its plugin, which their own user (and
    root) can read: another local user cannot, and finds them in no command line it can read."""
    with live_ssm_session(tmp_path) as live:
        report = _as_nobody({"secrets": [live.session.token_value, AWS_SECRET], "pids": [live.plugin, live.relay.pid]})
        assert live.relay.poll() is None and plugin_pids(live.relay.pid) == [live.plugin]  # alive all along
    assert report["found"] == []
    # it sees both processes and their command lines; their environments are refused
    assert report["tried"] == {
        str(pid): {"cmdline": "read", "environ": "EACCES"} for pid in (live.plugin, live.relay.pid)
    }
    assert report["read"]["cmdline"] > report["read"]["environ"]  # every command line, only its own environments
    print(
        f"\n[security] ssm as {pwd.getpwuid(report['uid']).pw_name}: {report['read']['cmdline']} command lines "
        f"and {report['read']['environ']} environments readable, no secret in any; the plugin's and the relay's "
        "environment refused (EACCES)"
    )


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
            registering = int(
                wait_for(lambda: flag.read_text() if flag.exists() else None, 30, "amazon-ssm-agent -register")
            )
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
    print(
        f"\n[security] hybrid: {during.scanned} + {after.scanned} command lines and {in_env.scanned} environments "
        f"scanned; code only in the -register call (pid {registering}), never in logs or manifest"
    )


@pytest.mark.parametrize("behaviour", ["hangs", "fails"])
def test_a_failing_agent_does_not_put_the_activation_code_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str
) -> None:
    """The error is logged on the node and published in the manifest (CloudWatch Logs for SageMaker):
    whatever the agent does, the code must not be in it."""
    source = (
        "import time; time.sleep(30)\n"
        if behaviour == "hangs"
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
