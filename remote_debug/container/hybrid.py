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
``DeregisterManagedInstance`` call (the execution role needs ``ssm:DeregisterManagedInstance``),
and clear the agent's local registration.  A failed deregistration is logged with the exact AWS CLI
command that finishes the job.

:class:`AgentCli` is the seam around the ``amazon-ssm-agent`` binary; tests replace it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from remote_debug.container.log import log, one_line
from remote_debug.spec import SSM_INSTANCE_RE

ENV_ACTIVATION_FILE = "REMOTE_DEBUG_SSM_ACTIVATION_FILE"
DEFAULT_ACTIVATION_FILE = "/opt/ml/input/data/remote_debug/ssm-activation.json"
REGISTRATION_FILE = Path("/var/lib/amazon/ssm/registration")
REGISTER_TIMEOUT = 120.0
_INSTANCE_IN_OUTPUT = re.compile(r"\b(mi-[0-9a-f]{8,17})\b")


class HybridError(RuntimeError):
    """Registration is impossible or failed (message is one line)."""


@dataclass(frozen=True)
class Activation:
    activation_id: str
    code: str
    region: str

    def __repr__(self) -> str:  # the code is a credential: keep it out of logs and tracebacks
        return f"Activation(activation_id={self.activation_id!r}, region={self.region!r})"

    @classmethod
    def load(cls, env: Mapping[str, str]) -> Activation:
        path = Path(env.get(ENV_ACTIVATION_FILE) or DEFAULT_ACTIVATION_FILE)
        try:
            data = json.loads(path.read_text())
            activation = cls(str(data["ActivationId"]), str(data["ActivationCode"]), str(data["Region"]))
        except FileNotFoundError:
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
                [self.binary, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
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
            ["-register", "-code", activation.code, "-id", activation.activation_id,
             "-region", activation.region, "-clear", "-y"],
            secret=activation.code,
        )

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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


def deregister_with_api(instance_id: str, region: str) -> None:
    from remote_debug.container.awscall import call_ssm  # urllib & co.: only paid by hybrid jobs, at the end

    call_ssm("DeregisterManagedInstance", {"InstanceId": instance_id}, region)


class HybridRegistration:
    """Register on start, deregister on stop; ``start`` raises HybridError, ``stop`` never raises."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        agent: AgentCli | None = None,
        deregister: Deregister = deregister_with_api,
    ) -> None:
        self.env = os.environ if env is None else env
        self.agent = agent or AgentCli()
        self.deregister = deregister
        self.instance_id: str | None = None
        self.region = ""

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
        return self.instance_id

    def stop(self) -> None:
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
