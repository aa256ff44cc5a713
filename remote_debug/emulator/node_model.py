"""What a node is, shared by :mod:`.nodes` (namespaces) and :mod:`.node_ssh` (its sshd on port 22)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The user AWS's SSM agent opens shell sessions as, when it is not set to root: a uid of its own in the node.
SSM_USER = "ssm-user"
SSM_USER_UID = 64001


@dataclass(frozen=True)
class NodeImage:
    """What of a training image the emulated node models beyond its Python (the image map's keys of the same names).

    AWS's PyTorch training images (DLCs) ship no gdb, and SageMaker's native remote debug opens SSM shells as
    root or, where the agent is set so, as ``ssm-user`` with or without passwordless sudo.  A node shares this
    machine's ``/usr`` and ``/etc``: ``gdb=False`` hides every gdb on the node's PATH (``/dev/null`` bound over it
    in the node's mounts), ``shell_user="ssm-user"`` adds that user to the node's ``/etc/passwd`` (bound over the
    machine's) and runs shell sessions as it, and ``sudo`` decides whether the node's ``/etc/sudoers`` lets it run
    anything as root without a password (needs sudo installed on this machine).
    """

    gdb: bool = True
    shell_user: str = "root"  # or SSM_USER
    sudo: bool = True


class ClusterError(RuntimeError):
    """The emulated nodes could not be set up or torn down (message is one actionable line)."""


@dataclass(frozen=True)
class Node:
    name: str
    namespace: str
    address: str
    dir: Path  # work_dir/nodes/<name>: everything of this node on the host

    @property
    def root(self) -> Path:
        return self.dir / "opt_ml"
