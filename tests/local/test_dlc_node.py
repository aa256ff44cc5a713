"""The emulator models a node of AWS's own images: no gdb, and SSM shells as ``ssm-user`` with or without sudo.

AWS's PyTorch training images ship no gdb and no sudo, and SageMaker's agent may open shells as ``ssm-user``:
``adopt JOB`` has to work there (or say why not), so the emulator must be able to be that node.  Driven with the
product's own ShellSession through AWS's real plugin.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.emulator.images import ImageMap
from remote_debug.laptop.aws import ssm
from remote_debug.laptop.aws.ssm_shell import ShellSession
from tests.emulator.test_ssm_shell import Running, needs_nodes, running_emulator
from tests.helpers.ssm_plugin import needs_plugin, plugin_version, real_plugin

pytestmark = [needs_nodes, needs_plugin, pytest.mark.timeout(180)]
SUDO = shutil.which("sudo") is not None and Path("/etc/sudoers").is_file()
IMAGES = {
    "dlc-sudo": {"gdb": False, "shell_user": "ssm-user", "sudo": True},
    "dlc-no-sudo": {"gdb": False, "shell_user": "ssm-user", "sudo": False},
}


def image(name: str) -> str:
    return f"763104351884.dkr.ecr.us-east-1.amazonaws.com/{name}:2.5-cpu-py311"


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with running_emulator(tmp_path_factory.mktemp("dlc"), ImageMap.from_dict({"images": IMAGES})) as running:
        for name in (*IMAGES, "plain"):
            running.start_job(name, image=image(name))
        yield running


def run(emu: Running, job: str, command: str) -> tuple[int, str]:
    plugin = ssm.Plugin(str(real_plugin()), plugin_version())
    with ShellSession.for_node(emu.client("ssm"), job, "algo-1", plugin=plugin) as shell:
        code, out = shell.run(command)
    return code, out.strip()


def test_a_dlc_node_has_no_gdb_and_a_shell_as_ssm_user(emu: Running) -> None:
    assert shutil.which("gdb") is not None  # this machine has one: the node must not
    assert run(emu, "dlc-sudo", "id -un; id -u") == (0, "ssm-user\n64001")
    assert run(emu, "dlc-sudo", "command -v gdb || echo none") == (0, "none")
    assert run(emu, "plain", "id -u; command -v gdb")[1].split("\n")[0] == "0"  # the default: root, with gdb
    assert run(emu, "plain", "command -v gdb")[0] == 0


@pytest.mark.skipif(not SUDO, reason="sudo is not installed on this machine (./dev setup installs it)")
def test_sudo_or_not(emu: Running) -> None:
    assert run(emu, "dlc-sudo", "sudo -n id -u") == (0, "0")
    code, out = run(emu, "dlc-no-sudo", "sudo -n id -u 2>&1")
    assert code != 0 and out != "0", out
