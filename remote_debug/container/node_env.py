"""Where am I?  Node identity, code dir and the per-node directories, from the job's environment.

SageMaker tells a training container who it is in two places: ``resourceconfig.json``, which the
platform writes into every container (BYOC included), and environment variables set by the
training toolkit (``SM_CURRENT_HOST``, ``SM_HOSTS``), which only exist when the toolkit is the
entry point.  The file comes first: under MPI / smdistributed the toolkit on the master starts
every rank of every node with ``mpirun -x SM_...`` (``sagemaker_training/mpi.py`` forwards its
whole ``SM_*`` environment), so a rank on algo-2 inherits the master's ``SM_CURRENT_HOST=algo-1``,
while the file is each node's own.  A local job writes the same file (``machine_job``); a
process without one falls back to the environment, then to a one-node job.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import struct
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_debug.contract.spec import ENV_MANIFEST_DIR, LOOPBACK, NODE_NAME_RE

DEFAULT_NODE = "algo-1"
DEFAULT_CONFIG_DIR = "/opt/ml/input/config"
ENV_CODE_DIR = "REMOTE_DEBUG_CODE_DIR"
ENV_SSHD_ADDRESS = "REMOTE_DEBUG_SSHD_ADDRESS"  # direct transport: the address sshd listens on
ML_ROOT = "/opt/ml"
CODE_SUBDIRS = ("code", os.path.join("input", "data", "code"))


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
    if NODE_NAME_RE.fullmatch(name):
        return name
    cleaned = re.sub(r"[^a-zA-Z0-9._-]", "-", name).lstrip("._-")[:63]
    return cleaned or DEFAULT_NODE


def identify(env: Mapping[str, str] | None = None) -> NodeIdentity:
    env = os.environ if env is None else env
    config = _resource_config(env)  # the node's own file first: see the module docstring

    current = config.get("current_host")
    node = current.strip() if isinstance(current, str) else ""
    node = safe_node_name(node or env.get("SM_CURRENT_HOST", "").strip() or DEFAULT_NODE)

    hosts: list[str] = []
    listed = config.get("hosts")
    if isinstance(listed, list):
        hosts = [str(h) for h in listed]
    raw_hosts = env.get("SM_HOSTS")
    if not hosts and raw_hosts:
        try:
            parsed = json.loads(raw_hosts)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            hosts = [str(h) for h in parsed]
    hosts = [safe_node_name(h) for h in hosts if str(h).strip()]
    if node not in hosts:
        hosts.append(node)
    return NodeIdentity(node=node, hosts=hosts)


def code_dir(env: Mapping[str, str] | None = None, *, ml_root: str = ML_ROOT) -> str:
    """The job's code directory (what the IDE's path mappings map to the workspace).

    ``REMOTE_DEBUG_CODE_DIR`` when the launcher set it (local jobs do).  On SageMaker the code is
    in ``/opt/ml/code`` (the training toolkit's sourcedir, and the BYOC convention) or in
    ``/opt/ml/input/data/code`` (the "code" channel SDK v3 drivers run from, also named by
    ``SM_SOURCE_DIR``).  The directory the process runs in decides between them when it is inside
    one; otherwise the first that holds files.  Else the working directory, as before.
    """
    env = os.environ if env is None else env
    explicit = env.get(ENV_CODE_DIR)
    if explicit:
        return os.path.abspath(explicit)
    cwd = os.getcwd()
    candidates = [os.path.join(ml_root, sub) for sub in CODE_SUBDIRS]
    source_dir = env.get("SM_SOURCE_DIR", "")
    if source_dir.startswith(os.sep) and os.path.isdir(source_dir):
        candidates.insert(0, os.path.abspath(source_dir))
    for candidate in candidates:
        if cwd == candidate or cwd.startswith(candidate + os.sep):
            return candidate
    for candidate in candidates:
        try:
            if os.path.isdir(candidate) and os.listdir(candidate):
                return candidate
        except OSError:
            continue
    return cwd


# Interpreter options that take their value as the next word (python -W ignore, -X dev, ...).
_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")
# Modules that run a script named after them, as ``python script.py`` would (the script's dir is the rank's code).
_SCRIPT_RUNNERS = ("mpi4py", "runpy")
_RUNNER_OPTIONS_WITH_VALUE = ("-rc",)  # mpi4py's runtime configuration: -rc thread_level=multiple


def script_of(argv: Sequence[str]) -> str | None:
    """The script ``argv`` (``sys.orig_argv``) runs: ``python [opts] script.py``, or ``python -m mpi4py
    [opts] script.py``; None for ``-c``, another ``-m`` module, or an interactive interpreter."""
    args = list(argv[1:])
    i = 0
    runner = False
    while i < len(args):
        arg = args[i]
        if not runner and (arg == "-m" or (arg.startswith("-m") and not arg.startswith("--"))):
            module = args[i + 1] if arg == "-m" and i + 1 < len(args) else arg[2:]
            if module not in _SCRIPT_RUNNERS:
                return None
            runner = True
            i += 2 if arg == "-m" else 1
            continue
        if arg in ("-c", "-m") or (not runner and arg[:2] in ("-c", "-m") and not arg.startswith("--")):
            return None  # code or a module of its own (python's, or mpi4py's -c/-m)
        if arg in (_RUNNER_OPTIONS_WITH_VALUE if runner else _OPTIONS_WITH_VALUE):
            i += 2
            continue
        if arg.startswith("-") and arg != "-":
            i += 1
            continue
        return None if arg == "-" else arg
    return None


def rank_code_dir(
    argv: Sequence[str], env: Mapping[str, str] | None = None, *, cwd: str | None = None, ml_root: str = ML_ROOT
) -> str | None:
    """Where THIS rank's code really is (what the IDE's path mappings must map the workspace to), from the script
    it runs; None when it runs no script file (the node's :func:`code_dir` applies).

    The node's code dir is a guess made when the node starts, which can be before the code is there (the SDK v2
    training toolkit downloads it to ``/opt/ml/code`` after the first Python process, and so the node daemon, has
    started), or miss a channel with another name (``/opt/ml/input/data/src``).  A rank knows: the root that holds
    its script - the launcher's ``REMOTE_DEBUG_CODE_DIR``, ``SM_SOURCE_DIR``, ``/opt/ml/code``, the input channel
    it came in (``/opt/ml/input/data/<channel>``) - so that a breakpoint in ``pkg/module.py`` of the source dir
    maps as well as one in the script; else the script's own folder.
    """
    env = os.environ if env is None else env
    script = script_of(argv)
    if script is None:
        return None
    base = os.getcwd() if cwd is None else cwd
    folder = os.path.realpath(os.path.dirname(os.path.join(base, script)))
    roots = [env.get(ENV_CODE_DIR, ""), env.get("SM_SOURCE_DIR", "")]
    roots += [os.path.join(ml_root, sub) for sub in CODE_SUBDIRS]
    for root in roots:
        if root.startswith(os.sep):
            real = os.path.realpath(root)
            if folder == real or folder.startswith(real + os.sep):
                return real
    channels = os.path.realpath(os.path.join(ml_root, "input", "data"))
    if folder.startswith(channels + os.sep):
        return os.path.join(channels, folder[len(channels) + 1 :].split(os.sep, 1)[0])
    return folder


def node_address(env: Mapping[str, str] | None = None) -> str:
    """This node's IPv4 address inside the job's VPC (what the direct transport connects to).

    ``REMOTE_DEBUG_SSHD_ADDRESS`` overrides; else the address of ``network_interface_name`` from
    resourceconfig.json (SageMaker names the interface it attaches to the VPC there), else the
    address the host name resolves to.
    """
    env = os.environ if env is None else env
    explicit = env.get(ENV_SSHD_ADDRESS, "").strip()
    if explicit:
        return explicit
    interface = _resource_config(env).get("network_interface_name")
    if isinstance(interface, str) and interface:
        address = interface_ipv4(interface)
        if address:
            return address
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return LOOPBACK


def interface_ipv4(name: str) -> str | None:
    """IPv4 address of a network interface (Linux SIOCGIFADDR), None if it has none."""
    try:
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except (OSError, ImportError):
        return None


MANIFEST_ROOT = "remote-debug"  # under the temp dir: <tmp>/remote-debug/<job>/<node>


class UnsafeManifestDir(PermissionError):
    """A manifest dir (or a folder of ours above it) that is a symlink or another user's (one line)."""


def default_manifest_dir(job_name: str, node: str) -> Path:
    return Path(tempfile.gettempdir()) / MANIFEST_ROOT / job_name / node


def prepare_manifest_dir(directory: Path) -> Path:
    """Make ``directory`` and prove it ours before anything is written or locked in it.

    The default lies in the shared temp dir, where another local user can make
    ``<tmp>/remote-debug`` (or a job's folder, or a symlink) first: they would then read the node's
    documents, rename them, or have us open our lock file through their link.  So each folder from
    ``<tmp>/remote-debug`` down is made 0700 when missing and must be a real folder owned by our euid;
    an explicit ``REMOTE_DEBUG_MANIFEST_DIR`` (the local backend's, inside the user's job dir) is
    checked itself.  Nothing is chmodded: a folder that is not ours is refused
    (:class:`UnsafeManifestDir`), and the caller runs the training without node services.
    """
    temp = Path(tempfile.gettempdir())
    try:
        below = directory.relative_to(temp / MANIFEST_ROOT)
    except ValueError:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        _check_own(directory)
        return directory
    folder = temp / MANIFEST_ROOT
    for part in ("", *below.parts):
        folder = folder / part if part else folder
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        _check_own(folder)
    return directory


def _check_own(folder: Path) -> None:
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeManifestDir(f"manifest folder {folder} is a symbolic link or not a folder: refusing to use it")
    if st.st_uid != os.geteuid():
        raise UnsafeManifestDir(
            f"manifest folder {folder} is owned by uid {st.st_uid}, not by this process (uid {os.geteuid()}): "
            f"refusing to use it; remove it or set {ENV_MANIFEST_DIR}"
        )


def manifest_dir(job_name: str, node: str, env: Mapping[str, str] | None = None) -> Path:
    """Where this node's manifest documents live: ``$REMOTE_DEBUG_MANIFEST_DIR`` or a temp default.

    The hook and the ranks compute the same answer, so env-based injection without the hook
    still publishes rank documents where a reader expects them.
    """
    env = os.environ if env is None else env
    explicit = env.get(ENV_MANIFEST_DIR)
    return Path(explicit) if explicit else default_manifest_dir(job_name, node)
