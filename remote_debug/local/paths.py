"""Where the laptop side keeps its files.  Everything we write lives under one state dir.

The user's HOME is sacred: besides this dir we only ever touch one ``Include`` line at the top of
``~/.ssh/config``.  ``REMOTE_DEBUG_HOME`` moves the state dir (tests, shared machines).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from remote_debug.spec import JOB_NAME_RE

ENV_HOME = "REMOTE_DEBUG_HOME"


@dataclass(frozen=True)
class StatePaths:
    root: Path

    @classmethod
    def default(cls) -> StatePaths:
        override = os.environ.get(ENV_HOME)
        root = Path(override) if override else Path.home() / ".remote-debug"
        return cls(root.expanduser().absolute())

    # --- jobs (local backend) ---
    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def job_dir(self, job: str) -> Path:
        return self.jobs_dir / job

    def attach_lock(self, job: str) -> Path:
        """Held (flock) by the attach that owns the job's IDE configuration (launch.json, PyCharm's run
        configuration) for as long as it runs; it says who that is.  Not under ``job_dir``: SageMaker
        jobs have none."""
        return self.root / "attach" / f"{job}.lock"

    # --- ssh ---
    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def ssh_config(self) -> Path:
        """The file the user's ~/.ssh/config includes; it includes one file per job."""
        return self.ssh_dir / "config"

    @property
    def job_ssh_configs_dir(self) -> Path:
        """One ``<job>.conf`` of Host entries per job (the main config includes them all)."""
        return self.ssh_dir / "jobs"

    def job_ssh_config(self, job: str) -> Path:
        return self.job_ssh_configs_dir / f"{job}.conf"

    @property
    def known_hosts_dir(self) -> Path:
        """One file of pinned host keys per job."""
        return self.ssh_dir / "known_hosts.d"

    def job_known_hosts(self, job: str) -> Path:
        return self.known_hosts_dir / job

    @property
    def keys_dir(self) -> Path:
        """One folder per job with its client key pair."""
        return self.root / "keys"

    def job_key(self, job: str) -> Path:
        """Private key (0600, in a 0700 dir); the public key is next to it with ``.pub``."""
        return self.keys_dir / job / "id_ed25519"

    # --- SageMaker ---
    @property
    def sagemaker_hints_dir(self) -> Path:
        return self.root / "sagemaker"

    def sagemaker_hint(self, job: str) -> Path:
        """What the proxy needs to reach a SageMaker job (region, profile, transport) without asking AWS."""
        return self.sagemaker_hints_dir / f"{job}.json"

    @property
    def include_state(self) -> Path:
        """What we inserted into ~/.ssh/config, so that removal restores it byte for byte."""
        return self.ssh_dir / "include-state.json"

    def launch_record(self, launch_json: Path) -> Path:
        """What we added to a workspace's launch.json beyond our entries (a key, the file itself),
        so that removing the last of our entries restores the user's bytes exactly."""
        digest = hashlib.sha256(os.fsencode(launch_json.absolute())).hexdigest()[:32]
        return self.root / "vscode" / f"{digest}.json"


def user_ssh_config() -> Path:
    return Path.home() / ".ssh" / "config"


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make the leaf 0700."""
    path.mkdir(parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:  # no needless write: HOME may be read-only
        os.chmod(path, 0o700)
    return path


def job_names_in(folder: Path, suffix: str = "") -> set[str]:
    """The jobs that have a file ``<job><suffix>`` in ``folder`` (names that are not job names are not ours)."""
    names: set[str] = set()
    try:
        entries = list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return names
    for path in entries:
        if path.name.endswith(suffix):
            name = path.name[: len(path.name) - len(suffix)]
            if JOB_NAME_RE.fullmatch(name):
                names.add(name)
    return names
