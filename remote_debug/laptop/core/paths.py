"""Where the laptop side keeps its files.  Everything we write lives under one state dir.

The user's HOME is sacred: besides this dir we only ever touch one ``Include`` line at the top of
``~/.ssh/config``.  ``REMOTE_DEBUG_HOME`` moves the state dir (tests, shared machines).

The state dir holds job keys, pinned host keys and the ssh config every ``ssh`` of the user reads, so
it must be ours alone: on a shared machine ``REMOTE_DEBUG_HOME`` (or a stale ``~/.remote-debug``) may
name a folder that another user made.  Its owner could rename job dirs or plant a file under
``ssh/jobs/`` that every ssh of ours includes.  So the state dir and each folder of ours in it must be
a real folder (no symlink) owned by our euid, and no folder above it may be replaceable by someone
else (owned by another user, or writable by all without the sticky bit); anything else is refused in
one line (:class:`UnsafeStateDir`), and we never chmod a folder that is not ours.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from remote_debug.contract.spec import JOB_NAME_RE
from remote_debug.laptop.core.errors import UnsafeStateDir as UnsafeStateDir

ENV_HOME = "REMOTE_DEBUG_HOME"
# the folders of ours directly in the state dir (each checked like the state dir itself)
STATE_SUBDIRS = ("jobs", "attach", "ssh", "ssh/jobs", "ssh/known_hosts.d", "keys", "sagemaker", "vscode")


@dataclass(frozen=True)
class StatePaths:
    root: Path

    @classmethod
    def default(cls) -> StatePaths:
        override = os.environ.get(ENV_HOME)
        root = Path(override) if override else Path.home() / ".remote-debug"
        paths = cls(root.expanduser().absolute())
        paths.check()
        return paths

    def check(self) -> None:
        """Refuse (:class:`UnsafeStateDir`) a state dir, or a folder of ours in it, that is not ours
        alone (see the module doc).  Folders that do not exist yet are fine: we make them 0700."""
        check_ancestors(self.root)
        for folder in (self.root, *(self.root / sub for sub in STATE_SUBDIRS)):
            check_own_dir(folder)
        # every ssh of the user includes these files (and refuses to run over one of another owner's)
        for path in _entries(self.job_ssh_configs_dir):
            try:
                st = os.lstat(path)
            except FileNotFoundError:  # removed meanwhile (prune, a detach)
                continue
            if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
                raise UnsafeStateDir(
                    f"{path} is {'a symbolic link' if stat.S_ISLNK(st.st_mode) else f'owned by uid {st.st_uid}'}, "
                    f"not a file of yours, in the ssh config every ssh of yours reads: remove it (check {ENV_HOME})"
                )

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


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def user_ssh_config() -> Path:
    return Path.home() / ".ssh" / "config"


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make the leaf 0700 - only once it is proven ours: a symlink
    or another user's folder there (or above it) is refused (:class:`UnsafeStateDir`), never chmodded."""
    check_ancestors(path)  # e.g. <state>/keys in a state dir of another user's: refused before mkdir
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:  # a symlink to nowhere, or a file: check_own_dir says which
        pass
    check_own_dir(path)
    # checked and changed through one descriptor opened without following a link: a folder swapped
    # for a link after the check is refused by the open, not chmodded
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise UnsafeStateDir(f"cannot open state folder {path} (no symlink allowed): {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UnsafeStateDir(f"state folder {path} is owned by uid {st.st_uid}, not by you: refusing to use it")
        if stat.S_IMODE(st.st_mode) != 0o700:  # no needless write: HOME may be read-only
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def check_own_dir(path: Path) -> os.stat_result | None:
    """``path`` itself (not followed) when it is a folder owned by our euid; None when it does not
    exist; else :class:`UnsafeStateDir`."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafeStateDir(f"cannot check state folder {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeStateDir(
            f"state folder {path} is a symbolic link: refusing to use it; remove it or point {ENV_HOME} at a real "
            "folder of yours"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeStateDir(f"state folder {path} is not a folder: remove it or set {ENV_HOME} elsewhere")
    if st.st_uid != os.geteuid():
        raise UnsafeStateDir(
            f"state folder {path} is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}): refusing to use it; "
            f"set {ENV_HOME} to a folder of your own"
        )
    return st


def check_ancestors(path: Path) -> None:
    """Every folder above ``path`` must be root's or ours, and not writable by all unless sticky (/tmp):
    else its owner (or anyone) could rename our state dir away and put their own in its place."""
    for parent in path.parents:
        try:
            st = os.stat(parent)  # followed: a link above the state dir is the user's own layout
        except OSError:
            continue  # not there yet: mkdir makes it (ours)
        if st.st_uid not in (0, os.geteuid()):
            raise UnsafeStateDir(
                f"state dir {path} lies in {parent}, owned by uid {st.st_uid}, who could replace it: "
                f"set {ENV_HOME} to a folder of your own"
            )
        if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            raise UnsafeStateDir(
                f"state dir {path} lies in {parent}, which anyone may write to: set {ENV_HOME} to a folder of your own"
            )


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
