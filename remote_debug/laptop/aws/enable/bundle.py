"""What ships into a SageMaker job: the container side of remote_debug, plus debugpy.

Framework images (the PyTorch DLC and friends) have neither our package nor debugpy, and a job
cannot be expected to reach PyPI.  So ``enable()`` ships both with the job's code: a *bundle*
directory holding ``remote_debug/`` (only what runs in the container: the package ``__init__``,
the stdlib-only contract modules and ``container/``) and ``debugpy/``, copied from this machine's
installation so the job speaks exactly the laptop's spec version.

Where the bundle lands in the container (the *package root*, the directory that holds
``remote_debug/``):

* SDK v2 framework estimators: ``dependencies`` are copied into the root of ``sourcedir.tar.gz``,
  which the training toolkit extracts to ``/opt/ml/code``;
* SDK v3 ``ModelTrainer`` and raw boto3 requests: an input channel named ``remote-debug``, i.e.
  ``/opt/ml/input/data/remote_debug`` (the channel the hybrid transport also reads its activation
  from), which keeps the user's source directory untouched.

Bundles are cached under the state dir by content hash, built in a temp dir and renamed into
place, so concurrent ``enable()`` calls never see half a bundle.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from remote_debug.laptop.aws.enable.terms import EnableError
from remote_debug.laptop.core.paths import StatePaths

CHANNEL_NAME = "remote_debug"  # an identifier: SDK v3 drivers export SM_CHANNEL_<NAME> in bash
CHANNEL_ROOT = "/opt/ml/input/data/" + CHANNEL_NAME
CODE_ROOT = "/opt/ml/code"  # where the v2 training toolkit extracts sourcedir.tar.gz
INJECT_SUBDIR = "remote_debug/container/inject"  # holds the sitecustomize every process imports

_PACKAGE_DIR = Path(__file__).resolve().parents[3]  # .../remote_debug
# What the container gets: the package's __init__ and the three folders the job side may import
# (tests/test_layering.py holds container/ to that); never the CLI, the laptop side or the emulator.
_SHIPPED_TOP = ("__init__.py", "py.typed")
_SHIPPED_DIRS = ("container", "contract", "oskit")
_SKIP_NAMES = ("__pycache__",)
_SKIP_SUFFIXES = (".pyc", ".pyo")
# debugpy's build sources and its Windows attach-to-process helpers: not needed to listen in a
# Linux container, and half the size of the upload.
_DEBUGPY_SKIP = (
    "*.c",
    "*.cpp",
    "*.h",
    "*.hpp",
    "*.pyx",
    "*.pxd",
    "*.dll",
    "*.exe",
    "*.pdb",
    "*.dylib",
    "winappdbg",
    "windows",
)


def bundles_root(paths: StatePaths) -> Path:
    """Where the bundles live under the state dir (one per content hash)."""
    return paths.root / "bundles"


def is_bundle_part(path: str, paths: StatePaths) -> bool:
    """Whether ``path`` is in one of our bundles (an earlier ``enable()`` of the same SDK object)."""
    return path.startswith(str(bundles_root(paths)) + "/")


def inject_dir(package_root: str) -> str:
    """The container path of our sitecustomize dir when the bundle is at ``package_root``."""
    return package_root.rstrip("/") + "/" + INJECT_SUBDIR


def _debugpy_dir() -> Path:
    spec = importlib.util.find_spec("debugpy")
    if spec is None or not spec.submodule_search_locations:
        # debugpy is a hard dependency of remote-debug; this means a broken installation.
        raise EnableError("debugpy is not installed here, so it cannot be shipped to the job: pip install debugpy")
    return Path(next(iter(spec.submodule_search_locations)))


def _package_files() -> list[Path]:
    """The files of remote_debug that the container side needs, relative to the package dir."""
    files = [Path(name) for name in _SHIPPED_TOP if (_PACKAGE_DIR / name).is_file()]
    for folder in _SHIPPED_DIRS:
        for p in sorted((_PACKAGE_DIR / folder).rglob("*")):
            if p.is_file() and not _skipped(p):
                files.append(p.relative_to(_PACKAGE_DIR))
    return files


def _skipped(path: Path) -> bool:
    return any(part in _SKIP_NAMES for part in path.parts) or path.suffix in _SKIP_SUFFIXES


def _fingerprint(debugpy: Path) -> str:
    digest = hashlib.sha256()
    for rel in _package_files():
        digest.update(str(rel).encode() + b"\0" + (_PACKAGE_DIR / rel).read_bytes() + b"\0")
    # debugpy is 20 MB: its location and version identify it well enough (an upgrade moves on).
    version = ""
    init = debugpy / "public_api.py"
    if init.exists():
        version = str(init.stat().st_mtime_ns)
    digest.update(f"debugpy:{debugpy}:{version}:{_DEBUGPY_SKIP}".encode())
    return digest.hexdigest()[:16]


def bundle_dir(paths: StatePaths | None = None) -> Path:
    """A directory holding ``remote_debug/`` (container side) and ``debugpy/``, built on first use."""
    paths = paths or StatePaths.default()
    debugpy = _debugpy_dir()
    target = bundles_root(paths) / _fingerprint(debugpy)
    if (target / "remote_debug" / "__init__.py").exists() and (target / "debugpy").is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bundle-", dir=target.parent))
    try:
        for rel in _package_files():
            dest = staging / "remote_debug" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(_PACKAGE_DIR / rel, dest)
        skip = shutil.ignore_patterns(*_SKIP_NAMES, *(f"*{s}" for s in _SKIP_SUFFIXES), *_DEBUGPY_SKIP)
        shutil.copytree(debugpy, staging / "debugpy", ignore=skip)
        # Readable by the job whatever the umask here (mkdtemp makes 0700).
        os.chmod(staging, 0o755)
        try:
            os.replace(staging, target)
        except OSError:  # another enable() finished the same bundle first: theirs is identical
            if not (target / "remote_debug" / "__init__.py").exists():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
