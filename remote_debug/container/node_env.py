"""Where am I?  Node identity, code dir and the per-node directories, from the job's environment.

SageMaker tells a training container who it is in two places: environment variables set by the
training toolkit (``SM_CURRENT_HOST``, ``SM_HOSTS``), which only exist when the toolkit is the
entry point, and ``resourceconfig.json``, which the platform writes for every container (BYOC
included).  A local job looks like a one-node SageMaker job unless its launcher says otherwise.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_debug.spec import ENV_MANIFEST_DIR, NODE_NAME_RE

DEFAULT_NODE = "algo-1"
DEFAULT_CONFIG_DIR = "/opt/ml/input/config"
ENV_CODE_DIR = "REMOTE_DEBUG_CODE_DIR"


@dataclass(frozen=True)
class NodeIdentity:
    node: str  # "algo-1"
    hosts: list[str]  # every node of the job, this one included


def _resource_config(env: Mapping[str, str]) -> dict[str, Any]:
    """``resourceconfig.json`` as a dict, or {} when absent or unreadable (a local job has none)."""
    config_dir = env.get("SM_INPUT_CONFIG_DIR") or DEFAULT_CONFIG_DIR
    try:
        data = json.loads((Path(config_dir) / "resourceconfig.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def safe_node_name(name: str) -> str:
    """``name`` made acceptable to the manifest contract (the laptop refuses other names).

    Host names come from the platform and are normally ``algo-N``; anything odd is mapped to the
    allowed alphabet rather than rejected, because a node without a manifest cannot be debugged.
    """
    if NODE_NAME_RE.match(name):
        return name
    cleaned = re.sub(r"[^a-zA-Z0-9._-]", "-", name).lstrip("._-")[:63]
    return cleaned or DEFAULT_NODE


def identify(env: Mapping[str, str] | None = None) -> NodeIdentity:
    env = os.environ if env is None else env
    config: dict[str, Any] | None = None  # read lazily: most jobs answer from the environment

    node = env.get("SM_CURRENT_HOST", "").strip()
    if not node:
        config = _resource_config(env)
        current = config.get("current_host")
        node = current.strip() if isinstance(current, str) else ""
    node = safe_node_name(node or DEFAULT_NODE)

    hosts: list[str] = []
    raw_hosts = env.get("SM_HOSTS")
    if raw_hosts:
        try:
            parsed = json.loads(raw_hosts)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            hosts = [str(h) for h in parsed]
    if not hosts:
        config = _resource_config(env) if config is None else config
        listed = config.get("hosts")
        if isinstance(listed, list):
            hosts = [str(h) for h in listed]
    hosts = [safe_node_name(h) for h in hosts if str(h).strip()]
    if node not in hosts:
        hosts.append(node)
    return NodeIdentity(node=node, hosts=hosts)


def code_dir(env: Mapping[str, str] | None = None) -> str:
    """The job's code directory (what the IDE's path mappings map to the workspace)."""
    env = os.environ if env is None else env
    return os.path.abspath(env.get(ENV_CODE_DIR) or os.getcwd())


def default_manifest_dir(job_name: str, node: str) -> Path:
    return Path(tempfile.gettempdir()) / "remote-debug" / job_name / node


def manifest_dir(job_name: str, node: str, env: Mapping[str, str] | None = None) -> Path:
    """Where this node's manifest documents live: ``$REMOTE_DEBUG_MANIFEST_DIR`` or a temp default.

    The hook and the ranks compute the same answer, so env-based injection without the hook
    still publishes rank documents where a reader expects them.
    """
    env = os.environ if env is None else env
    explicit = env.get(ENV_MANIFEST_DIR)
    return Path(explicit) if explicit else default_manifest_dir(job_name, node)
