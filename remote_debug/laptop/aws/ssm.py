"""The SSM transport: StartSession, then ``session-manager-plugin``, exactly as the AWS CLI runs them.

``aws ssm start-session`` (awscli/customizations/sessionmanager.py) does, and so do we:

1. ``ssm.start_session(Target=..., DocumentName="AWS-StartSSHSession", Parameters={"portNumber": [port]})``;
2. put ``{"SessionId", "TokenValue", "StreamUrl"}`` into the environment variable
   ``AWS_SSM_START_SESSION_RESPONSE`` and pass that variable's NAME as the plugin's first argument
   (plugins newer than 1.2.497.0 read it from there; the token never appears in argv, where any
   local user could read it with ``ps``);
3. run ``session-manager-plugin AWS_SSM_START_SESSION_RESPONSE <region> StartSession <profile>
   <request parameters JSON> <ssm endpoint URL>`` with our stdin/stdout (for AWS-StartSSHSession it
   relays raw bytes, which is what a ProxyCommand needs), ignoring SIGINT/SIGQUIT/SIGTSTP meanwhile
   so that they reach the plugin rather than killing us and orphaning it;
4. call TerminateSession when the plugin cannot be run or fails, so the agent does not keep a
   zombie session open until it times out.  We also do it when ssh ends us (it sends its
   ProxyCommand SIGHUP on exit): the plugin then gets SIGTERM, which it does not handle gracefully.

Two deliberate differences from the CLI: we look for the plugin BEFORE starting a session (a
missing plugin then costs no session at all), and we refuse plugins too old for the environment
variable instead of falling back to the token in argv.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws import ssm_forward
from remote_debug.laptop.core.errors import AwsError, UserError
from remote_debug.laptop.core.errors import DocumentRefused as DocumentRefused
from remote_debug.laptop.core.errors import PluginError as PluginError

PLUGIN = "session-manager-plugin"
RESPONSE_ENV = "AWS_SSM_START_SESSION_RESPONSE"
LAST_VERSION_WITHOUT_ENV = (1, 2, 497, 0)
DOCUMENT = "AWS-StartSSHSession"
NATIVE_TARGET_PREFIX = "sagemaker-training-job:"
INSTALL_HINT = (
    "install the Session Manager plugin: "
    "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html"
)
USER_SIGNALS = ("SIGINT", "SIGQUIT", "SIGTSTP")
MANAGED_INSTANCE_PREFIX = "mi-"  # the hybrid transport's targets: SSM managed instances
# Session Manager refuses sessions to hybrid (``mi-``) managed instances unless the account's
# instance tier is "advanced" in that region (a charged, per-region account setting).
ACTIVATION_TIER_SETTING = "/ssm/managed-instance/activation-tier"
ADVANCED_TIER = "advanced"
# what a job in a VPC needs for its SSM agent to reach SSM at all
VPC_OUTBOUND_HINT = (
    "a job in a VPC (VpcConfig) needs outbound access to SSM: a NAT gateway, or VPC interface endpoints "
    "for ssm, ssmmessages and ec2messages"
)


def native_target(job: str, node: str) -> str:
    """SageMaker's native remote-debug target for one node (built, never looked up)."""
    return f"{NATIVE_TARGET_PREFIX}{job}_{node}"


def session_parameters(target: str, port: int) -> dict[str, Any]:
    return {"Target": target, "DocumentName": DOCUMENT, "Parameters": {"portNumber": [str(port)]}}


def parse_version(text: str) -> tuple[int, ...] | None:
    cleaned = re.sub(r"\s+", "", text)
    if not re.fullmatch(r"\d+(\.\d+){0,3}", cleaned):
        return None
    parts = [int(p) for p in cleaned.split(".")]
    return tuple(parts + [0] * (4 - len(parts)))


@dataclass(frozen=True)
class Plugin:
    path: str
    version: str

    @property
    def reads_env(self) -> bool:
        """Whether it takes the response from AWS_SSM_START_SESSION_RESPONSE (the AWS CLI's test)."""
        parsed = parse_version(self.version)
        return parsed is not None and parsed > LAST_VERSION_WITHOUT_ENV


def find_plugin(which: Callable[[str], str | None] = shutil.which) -> Plugin:
    path = which(PLUGIN)
    if path is None:
        raise PluginError(f"{PLUGIN} not found on PATH: {INSTALL_HINT}")
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PluginError(f"{path} --version failed ({exc}): reinstall it; {INSTALL_HINT}") from None
    plugin = Plugin(path, proc.stdout.strip())
    if proc.returncode != 0 or not plugin.reads_env:
        shown = plugin.version or (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise PluginError(
            f"{PLUGIN} version {shown!r} is too old (remote-debug needs a version after "
            f"{'.'.join(map(str, LAST_VERSION_WITHOUT_ENV))}, which keeps the session token out of the "
            f"command line): {INSTALL_HINT}"
        )
    return plugin


@contextlib.contextmanager
def ignore_user_signals() -> Iterator[None]:
    saved = {}
    for name in USER_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            saved[sig] = signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def advanced_tier_fix(region: str | None) -> str:
    """The command that lets Session Manager reach hybrid managed instances in ``region``."""
    where = f" --region {region}" if region else ""
    return (
        f"aws ssm update-service-setting --setting-id {ACTIVATION_TIER_SETTING} --setting-value {ADVANCED_TIER}"
        f"{where} (the advanced-instances tier is charged per instance-hour)"
    )


def activation_tier(client: Any) -> str:
    """The account's managed-instance tier in the client's region ("standard" or "advanced"); botocore
    errors propagate (moto does not implement GetServiceSetting)."""
    response = client.get_service_setting(SettingId=ACTIVATION_TIER_SETTING)
    return str(response["ServiceSetting"].get("SettingValue", "")).strip().lower()


def not_connected_message(target: str) -> str:
    """Why a target SSM says is not connected can be unreachable, as one line."""
    if target.startswith(MANAGED_INSTANCE_PREFIX):
        first = (
            f"SSM managed instance {target} is not connected: the job must be in Training and its node's "
            "amazon-ssm-agent registered (see the node's log for 'SSM hybrid registration')"
        )
    else:
        first = (
            f"SSM target {target} is not connected: the job must be in Training with remote debugging enabled "
            "(remote_debug.enable(...) at launch, or remote-debug enable JOB), its execution role needs the "
            "ssmmessages:* channel actions"
        )
    return f"{first}, and {VPC_OUTBOUND_HINT} (remote-debug doctor JOB checks the rest)"


# A session that cannot start YET: the platform's SSM agent comes online some seconds after the job reaches
# Training (or after remote debugging is turned on), and StartSession is throttled per account.  Such a start is
# tried again, spaced out (1, 2, 4, 4, 4 s: about AGENT_WAIT_SECONDS in all), with one line to the user.
NOT_YET = ("TargetNotConnected", "ThrottlingException")
AGENT_WAIT_SECONDS = 15.0
_BACKOFF_FIRST, _BACKOFF_MAX = 1.0, 4.0


def _say(line: str) -> None:
    print(f"remote-debug: {line}", file=sys.stderr, flush=True)


def start_when_ready(
    start: Callable[[], dict[str, Any]],
    target: str,
    *,
    wait: float | None = None,
    say: Callable[[str], None] = _say,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """``start()`` (a StartSession call), tried again while SSM answers that the target is not connected yet or
    that it is throttled, with a growing pause, for up to ``wait`` seconds (:data:`AGENT_WAIT_SECONDS`); the last
    error is raised."""
    wait = AGENT_WAIT_SECONDS if wait is None else wait
    deadline = time.monotonic() + wait
    delay, said = _BACKOFF_FIRST, False
    while True:
        try:
            return start()
        except Exception as exc:
            code = aws.error_code(exc) if aws.is_error(exc) else None
            if code not in NOT_YET or time.monotonic() + delay > deadline:
                raise
            if not said:
                why = "throttled by SSM" if code == "ThrottlingException" else "its SSM agent is not online yet"
                say(f"cannot open a session to {target} yet ({why}): trying again for up to {wait:g} s")
                said = True
            sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)


def start_session(client: Any, target: str, port: int, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """StartSession (``params``: the request, by default an ``AWS-StartSSHSession`` to ``port``), waiting for an
    agent that is not online yet; AWS's refusals as one line (DocumentRefused when it was the document)."""
    request = params if params is not None else session_parameters(target, port)
    try:
        response: dict[str, Any] = start_when_ready(lambda: client.start_session(**request), target)
    except Exception as exc:
        if not aws.is_error(exc):
            raise
        code = aws.error_code(exc)
        if request["DocumentName"] == DOCUMENT and ssm_forward.refused_document(exc, DOCUMENT):
            raise DocumentRefused(aws.describe_error(exc, f"ssm StartSession {target}")) from None
        if code == "TargetNotConnected":
            raise UserError(not_connected_message(target)) from None
        if "advanced-instances tier" in str(exc):  # BadRequest for mi- targets in a standard-tier account
            region = getattr(getattr(client, "meta", None), "region_name", None)
            raise UserError(
                f"SSM refuses sessions to the hybrid managed instance {target} because the account's instance tier "
                f"is standard in {region or 'this region'}: {advanced_tier_fix(region)}"
            ) from None
        raise AwsError(aws.describe_error(exc, f"ssm StartSession {target}")) from None
    return response


def terminate(client: Any, session_id: str) -> None:
    with contextlib.suppress(Exception):  # best effort: the agent times the session out anyway
        client.terminate_session(SessionId=session_id)


def plugin_launch(
    plugin_path: str, client: Any, params: dict[str, Any], response: dict[str, Any], profile: str
) -> tuple[list[str], dict[str, str]]:
    """The plugin's argv and environment for a started session (``params``: its StartSession request), as the AWS
    CLI runs it: the response, token included, in ``AWS_SSM_START_SESSION_RESPONSE`` and never in argv."""
    env = dict(os.environ)
    env[RESPONSE_ENV] = json.dumps(
        {"SessionId": response["SessionId"], "TokenValue": response["TokenValue"], "StreamUrl": response["StreamUrl"]}
    )
    argv = [
        plugin_path,
        RESPONSE_ENV,
        client.meta.region_name,
        "StartSession",
        profile,
        json.dumps(params),
        client.meta.endpoint_url,
    ]
    return argv, env


def run_session(
    client: Any,
    target: str,
    port: int,
    stdin: BinaryIO,
    stdout: BinaryIO,
    *,
    profile: str = "",
    plugin: Plugin | None = None,
) -> int:
    """Relay stdin/stdout through an SSM session to ``port`` on ``target``; the plugin's exit code."""
    plugin = plugin or find_plugin()
    try:
        response = start_session(client, target, port)
    except DocumentRefused as refused:
        say = f"{DOCUMENT} refused for {target} ({refused}): using {ssm_forward.DOCUMENT} instead"
        _say(" ".join(say.split()))  # once per connection, one line
        with ignore_user_signals():
            return ssm_forward.run_forwarding(
                target,
                port,
                stdin,
                stdout,
                start=lambda params: start_session(client, target, port, params),
                launch=lambda params, started: plugin_launch(plugin.path, client, params, started, profile),
                terminate=lambda session_id: terminate(client, session_id),
            )
    session_id = str(response["SessionId"])
    argv, env = plugin_launch(plugin.path, client, session_parameters(target, port), response, profile)
    # Like the CLI, the plugin starts with the user signals ignored too (for an SSH session it installs
    # no handlers of its own: SIGINT/SIGTSTP stay ignored, SIGQUIT still kills it - Go's runtime).
    with ignore_user_signals():
        try:
            proc = subprocess.Popen(argv, env=env, stdin=stdin, stdout=stdout)
        except OSError as exc:
            terminate(client, session_id)
            raise PluginError(f"cannot run {plugin.path} ({exc.strerror or exc}): {INSTALL_HINT}") from None
        with forward_stop_signals(proc):
            code = proc.wait()
    # Always: the real plugin exits 0 when its stdin closes (upstream standardstreamforwarding.go)
    # without closing the session, which the agent would then keep until it times out. AWS answers
    # TerminateSession for an already-closed session with its id all the same.
    terminate(client, session_id)
    return code


@contextlib.contextmanager
def forward_stop_signals(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """SIGTERM/SIGHUP (ssh sends SIGHUP to its ProxyCommand when it exits) end the plugin, and the
    caller then terminates the session: the plugin dies on SIGTERM without closing its session."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers: main thread only
        yield
        return

    def on_stop(_signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()

    saved = {sig: signal.signal(sig, on_stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
