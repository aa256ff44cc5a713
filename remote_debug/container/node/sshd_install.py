"""Installing openssh-server when the image lacks sshd (many BYOC images do; framework images don't).

Only on SageMaker by default (``TRAINING_JOB_ARN`` is an ARN): a local job runs on the user's own
machine, where installing system packages behind their back would be rude.  ``REMOTE_DEBUG_INSTALL_SSHD``
forces it on (``1``) or off (``0``).  Installation needs root and a package manager (apt-get, dnf,
microdnf or yum); it is logged step by step, bounded by ``REMOTE_DEBUG_INSTALL_TIMEOUT`` seconds
(300 by default: ``apt-get update`` alone can take a minute), and when it is impossible the log
says why in one line, with the fix (bake openssh-server into the image).

The decision (:func:`plan_install`) and the steps (:func:`install_sshd`) take their environment
through small seams (``which``, ``euid``, ``runner``), so tests check them without a real apt run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from remote_debug.container.knobs import seconds_knob
from remote_debug.container.log import log, one_line

ENV_INSTALL = "REMOTE_DEBUG_INSTALL_SSHD"
ENV_INSTALL_TIMEOUT = "REMOTE_DEBUG_INSTALL_TIMEOUT"
DEFAULT_TIMEOUT = 300.0
MAX_TIMEOUT = 86400.0
FIX = "add openssh-server to the image (see templates/byoc)"

Which = Callable[[str], "str | None"]
# (argv, environment, timeout in seconds) -> (exit code, last line of output)
Runner = Callable[[list[str], dict[str, str], float], tuple[int, str]]


@dataclass(frozen=True)
class InstallPlan:
    manager: str
    commands: list[list[str]]
    env: dict[str, str] = field(default_factory=dict)


def on_sagemaker(env: Mapping[str, str]) -> bool:
    return env.get("TRAINING_JOB_ARN", "").startswith("arn:")


def should_install(env: Mapping[str, str]) -> bool:
    flag = env.get(ENV_INSTALL, "").strip().lower()
    if flag in ("0", "no", "false", "off"):
        return False
    if flag in ("1", "yes", "true", "on"):
        return True
    return on_sagemaker(env)


def install_timeout(env: Mapping[str, str]) -> float:
    # at least a second: 0 would fail every step at once, and the default is what a bad value means
    return seconds_knob(env, ENV_INSTALL_TIMEOUT, DEFAULT_TIMEOUT, low=1.0, high=MAX_TIMEOUT)


def plan_install(which: Which = shutil.which, euid: int | None = None) -> InstallPlan | str:
    """How to install openssh-server here, or the one-line reason why it cannot be done."""
    if (os.geteuid() if euid is None else euid) != 0:
        return f"installing packages needs root and the job runs as another user: {FIX}"
    apt = which("apt-get")
    if apt:
        return InstallPlan(
            "apt-get",
            [
                [apt, "update", "-qq"],
                # the lock timeout: an image's own apt run (unattended upgrades) may hold the lock
                [
                    apt,
                    "install",
                    "-y",
                    "-qq",
                    "--no-install-recommends",
                    "-o",
                    "DPkg::Lock::Timeout=60",
                    "openssh-server",
                ],
            ],
            {"DEBIAN_FRONTEND": "noninteractive"},
        )
    for name in ("dnf", "microdnf", "yum"):
        path = which(name)
        if path:
            return InstallPlan(name, [[path, "install", "-y", "openssh-server"]])
    return f"no apt-get, dnf, microdnf or yum in the image: {FIX}"


def run_command(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run one installation step; its whole process group is killed when it overruns."""
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # apt-get forks dpkg & co.: a timeout must reach them too
        )
    except OSError as exc:
        return 127, one_line(exc)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return 124, f"timed out after {timeout:.3g} s"
    lines = output.decode(errors="replace").strip().splitlines()
    return proc.returncode, one_line(lines[-1]) if lines else "no output"


def install_sshd(
    env: Mapping[str, str],
    *,
    which: Which = shutil.which,
    euid: int | None = None,
    runner: Runner = run_command,
    clock: Callable[[], float] = time.monotonic,
) -> str | None:
    """Install openssh-server; None on success, else the one-line reason (already logged)."""
    plan = plan_install(which, euid)
    if isinstance(plan, str):
        log(f"sshd is not installed and cannot be installed: {plan}")
        return plan
    timeout = install_timeout(env)
    started = clock()
    log(f"sshd is not installed: installing openssh-server with {plan.manager} (at most {timeout:g} s)")
    step_env = {**env, **plan.env}
    for argv in plan.commands:
        remaining = timeout - (clock() - started)
        if remaining <= 0:
            code, detail = 124, f"timed out after {timeout:g} s"
        else:
            code, detail = runner(argv, step_env, remaining)
        if code != 0:
            reason = f"{os.path.basename(argv[0])} {argv[1]} failed (exit {code}): {detail}; {FIX}"
            log(f"installing openssh-server failed: {reason}")
            return reason
    log(f"openssh-server installed with {plan.manager} in {clock() - started:.1f} s")
    return None
