"""The hybrid transport: the node registers itself as an SSM managed instance (``mi-...``).

For jobs where SageMaker's native remote debugging is unavailable (network isolation is not one of
them - SSM needs the network either way - but older regions, Marketplace-style containers, or an
organisation that disables ``sagemaker:EnableRemoteDebug``), the node runs its own amazon-ssm-agent,
registered with a hybrid activation; the laptop then starts AWS-StartSSHSession against the
managed instance id published in the node manifest (``ssm_target``).

Where the activation comes from: a JSON file ``{"ActivationId", "ActivationCode", "Region"}`` in the
job's input (``REMOTE_DEBUG_SSM_ACTIVATION_FILE``, by default the ``remote-debug`` channel's
``ssm-activation.json``), never the job environment: DescribeTrainingJob shows the environment to
anyone who may describe the job, and the code is a credential.  (amazon-ssm-agent only takes it on
its command line, which only processes inside this container can read.)

No leaked registrations: on exit we stop the agent, deregister the instance with one signed
``DeregisterManagedInstance`` call (the execution role needs ``ssm:DeregisterManagedInstance``, scoped
to instances tagged ``remote-debug:execution-role`` = its own ARN:
``templates/iam/hybrid-execution-role-policy.json``), and clear the agent's local registration.  A
failed deregistration is logged with the exact AWS CLI command that finishes the job.

No activation left usable: once registered, the job's *first* node (the first of the sorted hosts:
one watcher per job, not one per node; if that node cannot register, nobody watches from inside the
job) watches the activation (``DescribeActivations``, every :data:`RETIRE_POLL` seconds) until
every node has registered, then deletes it (``DeleteActivation``) and the S3 object that holds its
code (the ``S3Uri`` of the activation file; a signed S3 ``DELETE``) - :class:`Retirement`.  It needs
``templates/iam/hybrid-execution-role-retire-policy.json``, which an administrator may withhold
(``ssm:DeleteActivation`` cannot be scoped to one activation): then it logs one line and stops, and
the laptop (``remote-debug cleanup``, or any look at the job) and the activation's short expiry do
it.  The node keeps the code nowhere but the downloaded file, which lives and dies with the container.

:class:`AgentCli` is the seam around the ``amazon-ssm-agent`` binary; tests replace it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_debug.container.log import log, one_line
from remote_debug.container.node_env import identify
from remote_debug.container.threads import quiet_thread
from remote_debug.contract.spec import SSM_INSTANCE_RE

ENV_ACTIVATION_FILE = "REMOTE_DEBUG_SSM_ACTIVATION_FILE"
DEFAULT_ACTIVATION_FILE = "/opt/ml/input/data/remote_debug/ssm-activation.json"
NOTE_FILE = "ssm-activation.txt"  # next to it, written by enable() (sagemaker/hybrid_activation.NOTE_FILE)
REGISTRATION_FILE = Path("/var/lib/amazon/ssm/registration")
REGISTER_TIMEOUT = 120.0
RETIRE_POLL = 15.0  # seconds between two looks at the activation (one node per job looks)
_INSTANCE_IN_OUTPUT = re.compile(r"\b(mi-[0-9a-f]{8,17})\b")
_GONE = ("InvalidActivation", "InvalidActivationId")  # DeleteActivation of an activation already deleted


class HybridError(RuntimeError):
    """Registration is impossible or failed (message is one line)."""


@dataclass(frozen=True)
class Activation:
    activation_id: str
    code: str
    region: str
    s3_uri: str = ""  # where the activation file is in S3 (enable() writes it), so that it can be retired

    def __repr__(self) -> str:  # the code is a credential: keep it out of logs and tracebacks
        return f"Activation(activation_id={self.activation_id!r}, region={self.region!r})"

    @classmethod
    def load(cls, env: Mapping[str, str]) -> Activation:
        path = Path(env.get(ENV_ACTIVATION_FILE) or DEFAULT_ACTIVATION_FILE)
        try:
            data = json.loads(path.read_text())
            activation = cls(
                str(data["ActivationId"]),
                str(data["ActivationCode"]),
                str(data["Region"]),
                str(data.get("S3Uri") or ""),
            )
        except FileNotFoundError:
            if (path.parent / NOTE_FILE).is_file():  # the channel came, its activation had been retired
                raise HybridError(
                    f"no SSM activation at {path}: the job's activation was retired once every node had registered "
                    "(a restarted job cannot register again; debug it through a new job)"
                ) from None
            raise HybridError(
                f"no SSM activation at {path}: the hybrid transport needs one (set {ENV_ACTIVATION_FILE})"
            ) from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise HybridError(f"unreadable SSM activation {path}: {one_line(exc)}") from None
        if not all((activation.activation_id, activation.code, activation.region)):
            raise HybridError(f"SSM activation {path} has empty fields")
        return activation


class AgentCli:
    """The ``amazon-ssm-agent`` binary: register, run, report the instance id, stop, clear."""

    def __init__(self, binary: str | None = None, registration_file: Path = REGISTRATION_FILE) -> None:
        self.binary = binary or shutil.which("amazon-ssm-agent") or "/usr/bin/amazon-ssm-agent"
        self.registration_file = registration_file
        self.process: subprocess.Popen[bytes] | None = None
        self._output = ""

    def available(self) -> bool:
        return os.path.isfile(self.binary) and os.access(self.binary, os.X_OK)

    def _run(self, args: list[str], secret: str = "") -> str:
        """Run the agent; errors are one line and never contain ``secret``: they are logged and
        published in the manifest (CloudWatch Logs on SageMaker), and both TimeoutExpired's text
        and an agent echoing its arguments would carry the whole command line, activation code included."""

        def redact(text: str) -> str:
            return text.replace(secret, "<activation code>") if secret else text

        try:
            proc = subprocess.run(
                [self.binary, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=REGISTER_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise HybridError(f"amazon-ssm-agent {args[0]} timed out after {REGISTER_TIMEOUT:g} s") from None
        except (OSError, subprocess.SubprocessError) as exc:
            raise HybridError(redact(f"amazon-ssm-agent {args[0]} failed: {one_line(exc)}")) from None
        output = redact((proc.stdout + proc.stderr).strip())
        if proc.returncode != 0:
            last = output.splitlines()[-1] if output else "no output"
            raise HybridError(f"amazon-ssm-agent {args[0]} failed (exit {proc.returncode}): {one_line(last)}")
        return output

    def register(self, activation: Activation) -> None:
        # The code goes on the command line because amazon-ssm-agent takes it nowhere else (no file or
        # stdin input); only processes in this container can read it there, for the seconds it runs.
        self._output = self._run(
            [
                "-register",
                "-code",
                activation.code,
                "-id",
                activation.activation_id,
                "-region",
                activation.region,
                "-clear",
                "-y",
            ],
            secret=activation.code,
        )

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def instance_id(self) -> str:
        """From the agent's registration file, else from what ``-register`` printed."""
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(self.registration_file.read_text())
            found = str(data.get("ManagedInstanceID", ""))
            if SSM_INSTANCE_RE.fullmatch(found):
                return found
        match = _INSTANCE_IN_OUTPUT.search(self._output)
        if match:
            return match.group(1)
        raise HybridError("amazon-ssm-agent registered but reported no managed instance id")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def clear(self) -> None:
        with contextlib.suppress(HybridError):
            self._run(["-register", "-clear"])


Deregister = Callable[[str, str], None]  # (managed instance id, region)
SsmCall = Callable[[str, Mapping[str, Any], str], Any]  # (operation, parameters, region) -> the answer
DeleteObject = Callable[[str, str], None]  # (s3:// URI, region)


def deregister_with_api(instance_id: str, region: str) -> None:
    from remote_debug.container.node.awscall import call_ssm  # urllib & co.: only paid by hybrid jobs, at the end

    call_ssm("DeregisterManagedInstance", {"InstanceId": instance_id}, region)


def s3_object_url(bucket: str, key: str, region: str, env: Mapping[str, str]) -> str:
    """The unencoded URL of an S3 object: the endpoint override (path style, as boto3 with one), else
    virtual-hosted style, else path style for a bucket name with dots (TLS would not match)."""
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        return f"{endpoint.rstrip('/')}/{bucket}/{key}"
    if "." in bucket:
        return f"https://s3.{region}.amazonaws.com/{bucket}/{key}"
    return f"https://{bucket}.s3.{region}.amazonaws.com/{key}"


def delete_s3_object(uri: str, region: str, env: Mapping[str, str] | None = None) -> None:
    """One signed S3 ``DELETE`` (deleting a missing key succeeds); raises AwsCallError or ValueError."""
    from remote_debug.container.node import aws_sdk
    from remote_debug.container.node.awscall import AwsCallError, credentials_from, sign

    env = os.environ if env is None else env
    bucket, _, key = uri[len("s3://") :].partition("/") if uri.startswith("s3://") else ("", "", "")
    if not bucket or not key or any(c in uri for c in "?#"):  # (? and # would split the URL to sign)
        raise ValueError(f"not an s3://bucket/key URI this node can sign: {uri[:200]!r}")
    if aws_sdk.available(env):  # every credential source the SDK knows
        try:
            aws_sdk.call("s3", "DeleteObject", {"Bucket": bucket, "Key": key}, region)
        except aws_sdk.SdkCallError as exc:
            raise AwsCallError(str(exc), exc.code) from None
        return
    raw = s3_object_url(bucket, key, region, env)  # what is signed: sign() encodes the path once, as S3 wants
    parts = urllib.parse.urlsplit(raw)
    url = urllib.parse.urlunsplit(parts._replace(path=urllib.parse.quote(parts.path, safe="/~")))
    headers = sign(
        method="DELETE",
        url=raw,
        body=b"",
        region=region,
        service="s3",
        credentials=credentials_from(env),
        headers={"x-amz-content-sha256": hashlib.sha256(b"").hexdigest()},
        amz_date=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
    )
    headers.pop("Host")  # urllib sets it from the URL
    request = urllib.request.Request(url, headers=headers, method="DELETE")
    try:
        with urllib.request.urlopen(request, timeout=10.0):
            pass
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise AwsCallError(f"DeleteObject failed: HTTP {exc.code} {' '.join(detail.split())}") from None
    except OSError as exc:
        raise AwsCallError(f"DeleteObject failed: {exc}") from None


def _error_code(exc: BaseException) -> str:
    if getattr(exc, "code", ""):  # the SDK's call: the code as the service gave it
        return str(exc.code)  # type: ignore[attr-defined]
    match = re.search(r'"__type":\s*"(?:[^"#]*#)?([A-Za-z]+)"', str(exc))
    return match.group(1) if match else ""


class Retirement:
    """The first node's watch over the job's activation: delete it, and the S3 object that holds its
    code, once every node has registered (``RegistrationsCount`` reached ``RegistrationLimit``).

    Stops - after one log line - when that is done, when the activation has expired (both go too) or
    is gone (the file goes), at the first refused or failed call (no retries: the laptop and the expiry
    take over), or when ``stop`` is set.  Never raises.
    """

    def __init__(
        self,
        activation: Activation,
        env: Mapping[str, str] | None = None,
        *,
        ssm: SsmCall | None = None,
        delete_object: DeleteObject | None = None,
        poll: float | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.activation = activation
        self.env = os.environ if env is None else env
        self.ssm = ssm or self._call_ssm
        self.delete_object = delete_object or (lambda uri, region: delete_s3_object(uri, region, self.env))
        self.poll = RETIRE_POLL if poll is None else poll
        self.stop = stop or threading.Event()

    def _call_ssm(self, operation: str, params: Mapping[str, Any], region: str) -> Any:
        from remote_debug.container.node.awscall import call_ssm

        return call_ssm(operation, params, region, self.env)

    def run(self) -> None:
        activation_id, region = self.activation.activation_id, self.activation.region
        what = f"SSM activation {activation_id}"
        fallback = "the laptop (remote-debug cleanup) or its expiry retires it"
        try:
            while not self.stop.is_set():
                listed = self.ssm(
                    "DescribeActivations",
                    {"Filters": [{"FilterKey": "ActivationIds", "FilterValues": [activation_id]}]},
                    region,
                )
                found = next(iter((listed or {}).get("ActivationList") or []), None)
                if found is None:  # the laptop retired it (or SSM forgot an expired one)
                    self._retire_file(f"{what} is gone")
                    return
                registered = int(found.get("RegistrationsCount") or 0)  # absent before the first registration
                limit = int(found.get("RegistrationLimit") or 1)
                if registered >= limit or found.get("Expired"):
                    try:
                        self.ssm("DeleteActivation", {"ActivationId": activation_id}, region)
                    except Exception as exc:
                        if _error_code(exc) not in _GONE:
                            raise
                    why = f"every node registered ({registered}/{limit})" if registered >= limit else "it expired"
                    self._retire_file(f"deleted {what}: {why}")
                    return
                self.stop.wait(self.poll)
        except Exception as exc:
            log(f"could not retire {what}: {one_line(exc)}; {fallback}")

    def _retire_file(self, done: str) -> None:
        uri = self.activation.s3_uri
        if not uri:
            log(f"{done}; its file's S3 location is unknown (an older enable()): remote-debug cleanup deletes it")
            return
        try:
            self.delete_object(uri, self.activation.region)
        except Exception as exc:
            log(f"{done}; could not delete {uri}: {one_line(exc)}; the laptop (remote-debug cleanup) does")
            return
        log(f"{done}; deleted {uri}")


Retire = Callable[[Activation, Mapping[str, str], threading.Event], None]  # (activation, env, stop)


def retire_with_api(activation: Activation, env: Mapping[str, str], stop: threading.Event) -> None:
    Retirement(activation, env, stop=stop).run()


class HybridRegistration:
    """Register on start, deregister on stop; ``start`` raises HybridError, ``stop`` never raises."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        agent: AgentCli | None = None,
        deregister: Deregister = deregister_with_api,
        retire: Retire = retire_with_api,
    ) -> None:
        self.env = os.environ if env is None else env
        self.agent = agent or AgentCli()
        self.deregister = deregister
        self.retire = retire
        self.instance_id: str | None = None
        self.region = ""
        self.retiring: threading.Thread | None = None  # the first node's Retirement
        self._stop_retiring = threading.Event()

    def start(self) -> str:
        if not self.agent.available():
            raise HybridError(
                f"amazon-ssm-agent is not installed at {self.agent.binary}: add it to the image for the hybrid "
                "transport (see templates/byoc), or use the native ssm transport"
            )
        activation = Activation.load(self.env)
        self.region = activation.region
        started = time.monotonic()
        self.agent.register(activation)
        self.instance_id = self.agent.instance_id()
        self.agent.start()
        log(f"registered with SSM as {self.instance_id} in {time.monotonic() - started:.1f} s (hybrid transport)")
        identity = identify(self.env)
        if identity.hosts and identity.node == sorted(identity.hosts)[0]:  # one watcher per job
            self.retiring = quiet_thread(
                lambda: self.retire(activation, self.env, self._stop_retiring), "remote-debug-retire"
            )
            self.retiring.start()
        return self.instance_id

    def stop(self) -> None:
        self._stop_retiring.set()
        if self.instance_id is None:
            return
        instance, self.instance_id = self.instance_id, None
        try:
            self.agent.stop()
        except Exception as exc:
            log(f"stopping amazon-ssm-agent failed: {one_line(exc)}")
        try:
            self.deregister(instance, self.region)
            log(f"deregistered SSM managed instance {instance}")
        except Exception as exc:  # whatever went wrong, say how to finish the job by hand
            log(
                f"could not deregister SSM managed instance {instance}: {one_line(exc)}; run "
                f"`aws ssm deregister-managed-instance --instance-id {instance} --region {self.region}`"
            )
        self.agent.clear()
