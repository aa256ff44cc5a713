"""What a node is, shared by :mod:`.nodes` (namespaces) and :mod:`.node_ssh` (its sshd on port 22)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
