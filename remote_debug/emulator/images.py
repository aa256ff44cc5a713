"""Training images, emulated: an image URI resolves to a local Python environment, not a container.

SageMaker runs ``docker run <image> train``; the emulator runs the same ``train`` (AWS's training
toolkit, ``sagemaker-training``) from a local environment instead, with the environment variables the
image's Dockerfile would set.  By default every image maps to the emulator's own interpreter
(``sys.executable`` and the ``bin`` directory beside it, where pip put ``train`` and ``torchrun``),
and AWS's PyTorch training images (repository ``pytorch-training``) add
``SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main``, as their Dockerfile does.

A JSON file (``remote-debug emulator --images FILE``) maps images elsewhere::

    {
      "images": {
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311": {"venv": "/opt/pt25"},
        "pytorch-training": {"python": "/opt/pt/bin/python3", "env": {"OMP_NUM_THREADS": "1"}},
        "my-byoc": {"venv": "/opt/byoc", "train": ["/opt/byoc/bin/python", "-m", "my_trainer"]},
        "*": {"venv": "/opt/default"}
      },
      "gpus": {"ml.g5.12xlarge": 2, "ml.p4d.24xlarge": 2}
    }

An image entry may also model the node beyond its Python (:class:`~remote_debug.emulator.node_model.NodeImage`):
``"gdb": false`` (AWS's DLCs ship none), ``"shell_user": "ssm-user"`` and ``"sudo": true|false`` (how SSM shell
sessions reach the node).

An image matches its exact URI first, then its repository with the registry (no tag or digest), then
the repository's name (its last path component), then ``"*"``.

``gpus`` is how many processes per host the toolkit starts for an instance type.  The toolkit counts
GPUs with ``nvidia-smi --list-gpus`` and falls back to ONE process per host on a CPU machine (for
``torch_distributed`` and, unless ``processes_per_host`` is given, for MPI); AWS's launchers never pass
a count for ``torch_distributed``.  For an instance type listed here the emulator puts an
``nvidia-smi`` on the node's PATH that lists that many "GPUs", so an unchanged launcher gets e.g.
2 nodes x 2 processes.  It is a process count, nothing more: CUDA stays unavailable, training runs
on the CPU (gloo), and ``SM_NUM_GPUS`` says the same number.  Instance types not listed get no shim:
one process per host, the toolkit's honest answer on this machine.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote_debug.emulator.node_model import SSM_USER, NodeImage

PYTORCH_TRAINING_MODULE = "sagemaker_pytorch_container.training:main"

# What AWS's PyTorch training Dockerfiles set with ENV (the part that matters outside a container).
_PYTORCH_ENV = {
    "SAGEMAKER_TRAINING_MODULE": PYTORCH_TRAINING_MODULE,
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONIOENCODING": "UTF-8",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "DLC_CONTAINER_TYPE": "training",
}
_PYTORCH_REPOSITORIES = ("pytorch-training",)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ImageMapError(ValueError):
    """The image map file is unreadable or says something impossible."""


@dataclass(frozen=True)
class ImageRef:
    """An image URI taken apart: ``[registry/]repository[:tag][@digest]``."""

    registry: str
    repository: str  # without the registry: "pytorch-training", "library/python"
    tag: str
    digest: str

    @property
    def name(self) -> str:
        """The repository's last path component: "pytorch-training"."""
        return self.repository.rsplit("/", 1)[-1]

    @property
    def full_repository(self) -> str:
        return f"{self.registry}/{self.repository}" if self.registry else self.repository


def parse_image(uri: str) -> ImageRef:
    """Split an image URI the way Docker does.

    A tag is what follows the last ``:`` after the last ``/`` (a ``:`` before it is a registry port,
    ``localhost:5000/x``); a digest follows ``@``; the first component is a registry when it has a
    ``.`` or ``:`` or is ``localhost``.
    """
    rest = uri.strip()
    digest = ""
    if "@" in rest:
        rest, digest = rest.split("@", 1)
    tag = ""
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
    registry = ""
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, rest = first, remainder
    return ImageRef(registry=registry, repository=rest, tag=tag, digest=digest)


@dataclass(frozen=True)
class ImageEnv:
    """The local stand-in of one image: an interpreter, its bin directory, the image's ENV, its ``train``."""

    python: Path
    bin_dir: Path  # first on PATH in the node, as the image's own PATH would be
    env: dict[str, str] = field(default_factory=dict)
    train: tuple[str, ...] = ()  # the image's default command; empty = ``<bin_dir>/train``
    node: NodeImage = field(default_factory=NodeImage)  # gdb, the shell's user, sudo: see NodeImage

    def train_argv(self) -> list[str]:
        if self.train:
            return list(self.train)
        candidate = self.bin_dir / "train"
        # an absolute path when there is one: the node's PATH lookup then cannot pick another `train`
        return [str(candidate)] if candidate.exists() else ["train"]


@dataclass(frozen=True)
class _Entry:
    python: Path | None
    env: dict[str, str]
    train: tuple[str, ...]
    node: NodeImage = field(default_factory=NodeImage)


class ImageMap:
    """Image URI -> :class:`ImageEnv`; instance type -> "GPUs" (processes per host)."""

    def __init__(self, entries: dict[str, _Entry] | None = None, gpus: dict[str, int] | None = None) -> None:
        self._entries = dict(entries or {})
        self._gpus = dict(gpus or {})

    @classmethod
    def default(cls) -> ImageMap:
        """Every image runs on the emulator's own interpreter; no instance type has GPUs."""
        return cls()

    @classmethod
    def load(cls, path: Path) -> ImageMap:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ImageMapError(f"cannot read the image map {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ImageMapError(f"the image map {path} is not JSON: {exc}") from None
        return cls.from_dict(raw, where=str(path))

    @classmethod
    def from_dict(cls, raw: Any, *, where: str = "the image map") -> ImageMap:
        if not isinstance(raw, dict):
            raise ImageMapError(f"{where}: expected a JSON object with 'images' and/or 'gpus'")
        unknown = set(raw) - {"images", "gpus"}
        if unknown:
            raise ImageMapError(f"{where}: unknown keys {sorted(unknown)} (expected 'images', 'gpus')")
        images = raw.get("images", {})
        gpus = raw.get("gpus", {})
        if not isinstance(images, dict) or not isinstance(gpus, dict):
            raise ImageMapError(f"{where}: 'images' and 'gpus' must be JSON objects")
        entries = {str(key): _entry(value, f"{where}: images[{key!r}]") for key, value in images.items()}
        counts: dict[str, int] = {}
        for instance_type, count in gpus.items():
            if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= 64:
                raise ImageMapError(f"{where}: gpus[{instance_type!r}] must be an integer from 0 to 64")
            counts[str(instance_type)] = count
        return cls(entries, counts)

    def gpus(self, instance_type: str) -> int:
        """How many "GPUs" (processes per host) the emulator gives ``instance_type``; 0 = none, the CPU rule."""
        return self._gpus.get(instance_type, 0)

    def resolve(self, image: str) -> ImageEnv:
        ref = parse_image(image)
        entry = None
        for key in (image.strip(), ref.full_repository, ref.repository, ref.name, "*"):
            if key and key in self._entries:
                entry = self._entries[key]
                break
        env = dict(_PYTORCH_ENV) if ref.name in _PYTORCH_REPOSITORIES else {}
        python = Path(sys.executable)
        train: tuple[str, ...] = ()
        node = NodeImage()
        if entry is not None:
            env.update(entry.env)
            python = entry.python or python
            train = entry.train
            node = entry.node
        # not resolved: a venv's python is a symlink to the base interpreter, and it is the venv's
        # bin directory (with its `train`, `torchrun`) that must come first on PATH
        return ImageEnv(python=python, bin_dir=python.parent, env=env, train=train, node=node)


def _entry(value: Any, where: str) -> _Entry:
    if not isinstance(value, dict):
        raise ImageMapError(f"{where}: expected an object with 'python' or 'venv', 'env', 'train'")
    unknown = set(value) - {"python", "venv", "env", "train", "gdb", "shell_user", "sudo"}
    if unknown:
        raise ImageMapError(f"{where}: unknown keys {sorted(unknown)}")
    if "python" in value and "venv" in value:
        raise ImageMapError(f"{where}: give 'python' or 'venv', not both")
    python: Path | None = None
    if "python" in value:
        python = Path(_string(value["python"], where + ".python")).expanduser()
    elif "venv" in value:
        python = Path(_string(value["venv"], where + ".venv")).expanduser() / "bin" / "python"
    if python is not None:
        if not python.is_absolute():
            raise ImageMapError(f"{where}: {python} is not an absolute path")
        if not python.exists():
            raise ImageMapError(f"{where}: no interpreter at {python}")
    env_raw = value.get("env", {})
    if not isinstance(env_raw, dict):
        raise ImageMapError(f"{where}.env: expected an object of strings")
    env: dict[str, str] = {}
    for name, text in env_raw.items():
        if not _ENV_NAME.fullmatch(str(name)):
            raise ImageMapError(f"{where}.env: {name!r} is not an environment variable name")
        env[str(name)] = _string(text, f"{where}.env[{name!r}]")
    train_raw = value.get("train", [])
    if not isinstance(train_raw, list) or not all(isinstance(part, str) for part in train_raw):
        raise ImageMapError(f"{where}.train: expected a list of strings (an argv)")
    for flag in ("gdb", "sudo"):
        if not isinstance(value.get(flag, True), bool):
            raise ImageMapError(f"{where}.{flag}: expected true or false")
    shell_user = value.get("shell_user", "root")
    if shell_user not in ("root", SSM_USER):
        raise ImageMapError(f"{where}.shell_user: expected 'root' or '{SSM_USER}'")
    node = NodeImage(gdb=value.get("gdb", True), shell_user=shell_user, sudo=value.get("sudo", True))
    return _Entry(python=python, env=env, train=tuple(train_raw), node=node)


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ImageMapError(f"{where}: expected a non-empty string")
    return value
