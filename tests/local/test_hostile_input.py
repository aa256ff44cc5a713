"""Hostile paths: the ProxyCommand and Include lines we write, really executed.

OpenSSH runs a ProxyCommand as ``$SHELL -c "exec <command>"`` after expanding its ``%`` tokens, so
a state dir or an interpreter path with spaces, quotes, ``$``, backticks or ``%`` must survive two
parsers.  These tests put both paths in such directories and then (1) run ``ssh -F <our config>
<alias> true`` against a private sshd, with dash and with bash as the shell; (2) run the written
ProxyCommand through ``/bin/sh -c`` with ``%h``/``%p`` substituted the way ssh does and check it
reaches the node.  ssh resolves ``~`` from the passwd entry, not $HOME: every call passes ``-F``.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.contract import spec
from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.core.keys import ensure_job_key
from remote_debug.laptop.core.paths import StatePaths
from tests.helpers.sshd import SSHD, private_sshd
from tests.local.test_local_faults import make_fake_job

SSH = shutil.which("ssh")
JOB = "quoting"
# every character a shell or ssh_config could trip over, but a line break (refused, see below)
HOSTILE = "dir with space 'single' \"double\" $HOME `id` $(id) %h %% \\back ;&|<>*?[x] ünï"

pytestmark = pytest.mark.skipif(
    SSH is None or not os.path.exists(SSHD), reason="needs the OpenSSH client and server (apt install openssh-server)"
)


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[tuple[int, Path, str]]:
    """A private sshd on 127.0.0.1; yields (port, authorized_keys file, host public key)."""
    with private_sshd(tmp_path) as server:
        yield server.port, server.authorized_keys, server.host_key_line


def hostile_python(root: Path) -> Path:
    """This venv's interpreter, reachable under ``root/bin/python``: a venv of its own (pyvenv.cfg +
    the same site-packages), so ``sys.executable`` -- what the ProxyCommand names -- is that path."""
    venv = Path(sys.prefix)
    (root / "bin").mkdir(parents=True)
    shutil.copy(venv / "pyvenv.cfg", root / "pyvenv.cfg")
    (root / "lib").symlink_to(venv / "lib")
    python = root / "bin" / "python"
    python.symlink_to(os.path.realpath(sys.executable))
    return python


@pytest.fixture
def world(home: Path, tmp_path: Path, sshd: tuple[int, Path, str]) -> Iterator[dict[str, object]]:
    """A fake running job whose node is the private sshd, a hostile state dir and interpreter path,
    and the ssh config written by ``<hostile python> -m remote_debug ssh-config``."""
    port, authorized, host_key = sshd
    state = tmp_path / f"state {HOSTILE}"
    python = hostile_python(tmp_path / f"py {HOSTILE}")
    paths = StatePaths(state)
    supervisor = subprocess.Popen(["sleep", "300"])
    try:
        make_fake_job(paths, JOB, supervisor.pid, sshd_port=port, host_key=host_key, user=getpass.getuser())
        _, public = ensure_job_key(paths, JOB)
        authorized.write_text(public + "\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_")}
        env.update(HOME=str(home), REMOTE_DEBUG_HOME=str(state))
        out = subprocess.run(
            [str(python), "-m", "remote_debug", "ssh-config", JOB, "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        yield {"paths": paths, "python": python, "env": env, "port": port}
    finally:
        supervisor.kill()
        supervisor.wait()


def test_state_dir_and_python_paths_are_really_hostile(world: dict[str, object]) -> None:
    paths = world["paths"]
    assert isinstance(paths, StatePaths)
    conf = paths.job_ssh_config(JOB).read_text()
    template = re.search(r"^\s*ProxyCommand (.*)$", conf, re.M)
    assert template is not None
    argv = shlex.split(ssh_expand(template[1]))  # what ssh, then the shell, make of it
    assert argv[0] == str(world["python"])  # sys.executable was the hostile path, kept exactly
    assert argv[argv.index("--state-dir") + 1] == str(paths.root)
    assert argv[-2:] == [f"algo-1.{JOB}", "22"]


def ssh_expand(template: str) -> str:
    """ssh's token expansion of a ProxyCommand: %h, %p and %% in one left-to-right pass."""
    return re.sub(r"%([hp%])", lambda m: {"h": f"algo-1.{JOB}", "p": "22", "%": "%"}[m[1]], template)


@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
def test_real_ssh_runs_our_proxy_command_with_hostile_paths(home: Path, world: dict[str, object], shell: str) -> None:
    if not os.path.exists(shell):
        pytest.skip(f"{shell} not installed")
    env = dict(world["env"])  # type: ignore[call-overload]
    env["SHELL"] = shell  # ssh runs the ProxyCommand as $SHELL -c "exec ..."
    # through the user's file: Include (glob-quoted) -> our config -> the job's file -> ProxyCommand
    proc = subprocess.run(
        [SSH or "ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes", f"algo-1.{JOB}", "echo reached"],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "reached", proc.stderr


def test_proxy_command_through_sh_reaches_the_node(world: dict[str, object]) -> None:
    paths, env = world["paths"], world["env"]
    assert isinstance(paths, StatePaths) and isinstance(env, dict)
    conf = paths.job_ssh_config(JOB).read_text()
    template = re.search(r"^\s*ProxyCommand (.*)$", conf, re.M)
    assert template is not None
    expanded = ssh_expand(template[1])  # what ssh hands to the shell
    proc = subprocess.run(
        ["/bin/sh", "-c", "exec " + expanded],
        input=b"",
        capture_output=True,
        env=env,
        timeout=30,
    )
    # the relay reached the node's sshd (found through the hostile state dir), which greets first
    assert proc.stdout.startswith(b"SSH-2.0-OpenSSH"), (proc.returncode, proc.stderr[-500:])


def test_line_break_in_state_dir_is_one_line_error(home: Path, tmp_path: Path) -> None:
    state = tmp_path / "state\nProxyCommand evil"
    entry = ssh_config.HostEntry(JOB, "algo-1", "root", 2222, "ssh-ed25519 AAAA", state / "keys" / "id", "proxy %h %p")
    with pytest.raises(spec.ContractError) as info:
        ssh_config.write_job_entries(StatePaths(state), JOB, [entry])
    assert "\n" not in str(info.value)
    with pytest.raises(spec.ContractError):
        ssh_config.ensure_include(StatePaths(state), home / ".ssh" / "config")
    assert not (home / ".ssh").exists()
