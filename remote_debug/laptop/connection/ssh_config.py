"""OpenSSH client config for job nodes, written so that the user's HOME stays ours to borrow, not to own.

Layout (everything but one line lives under the state dir, see :class:`StatePaths`)::

    ~/.ssh/config                 Include "<state>/ssh/config"          <- the only line we add, first line
    <state>/ssh/config            Include "<state>/ssh/jobs/*.conf"
    <state>/ssh/jobs/<job>.conf   one Host block per node (alias "<node>.<job>")
    <state>/ssh/known_hosts.d/<job>  the nodes' pinned host keys, under their HostKeyAlias

Why the Include goes on the very first line: OpenSSH makes an Include that follows a ``Host`` or
``Match`` line conditional on it, silently; and the first value obtained for an option wins, so our
blocks must be read before a user's ``Host *``.  Why HostKeyAlias + our own known_hosts +
``StrictHostKeyChecking yes``: every node is reached through a ProxyCommand, so ssh cannot key the
host by address; the key arrives through the AWS-authenticated manifest and is pinned, never
trusted on first use.

The user's file is edited as bytes (their encoding and line endings are theirs), under a lock,
atomically, and what we inserted is recorded so that :func:`remove_include` restores it byte for byte.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_debug.contract import spec
from remote_debug.laptop.core import paths as paths_mod
from remote_debug.laptop.core.dir_lock import locked
from remote_debug.laptop.core.errors import SshConfigError as SshConfigError
from remote_debug.laptop.core.paths import StatePaths, job_names_in, private_dir
from remote_debug.laptop.wire.documents import format_ssh_alias
from remote_debug.oskit import osutil

LOCK_TIMEOUT_S = 30.0
STATE_VERSION = 1
SERVER_ALIVE_INTERVAL = 15
SERVER_ALIVE_COUNT_MAX = 4
# Every connection goes through our ProxyCommand, so ssh's INFO lines about it ("Connection closed by
# UNKNOWN port 65535": the proxy has no address) say nothing; when the proxy refuses (the job has
# ended) it prints the one line that does.  Errors still show, and -v / -q on the command line win.
LOG_LEVEL = "ERROR"

# What a user's own ``Host *`` may turn on for every host, and must not for a job node (our block is
# read first, and the first value wins): their agent (anyone root on the node could use the laptop's
# keys), their X display, a local command run at every connect, and forwards bound to every address
# of the laptop (a -D or -L without a bind address would let the LAN reach the job's debug ports:
# debugpy runs whatever a client sends).  ForwardX11Trusted no: if someone still passes -X, the X
# client is untrusted.  Not here: ClearAllForwardings (it also clears -L/-R/-D given on the command
# line, which the IDEs need) and Tunnel (sshd refuses tun devices anyway: PermitTunnel no).
HARDENING = (
    "ForwardAgent no",
    "ForwardX11 no",
    "ForwardX11Trusted no",
    "PermitLocalCommand no",
    "GatewayPorts no",
)

_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@$-]{0,63}$")  # no '%': ssh expands tokens in User
_KEY_TYPE_RE = re.compile(r"^[A-Za-z0-9@._-]+$")
_BASE64_RE = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")


# --- quoting -------------------------------------------------------------------------------------


def _quote(value: str, *, percent: bool = False, glob: bool = False) -> str:
    """``value`` as one double-quoted ssh_config argument.

    ssh_config unescapes ``\\\\`` and ``\\"`` inside quotes (argv_split); options that expand
    ``%`` tokens (IdentityFile, UserKnownHostsFile) need ``%%``; Include runs glob(3), which has
    its own backslash escapes, applied after the config-level ones.  There is no escape for a
    line break, so such a path cannot be written at all.
    """
    if any(c in value for c in "\n\r\0"):
        raise spec.ContractError(f"path {value[:80]!r} has a line break: it cannot go into an ssh config")
    if glob:
        value = re.sub(r"([\\*?\[])", r"\\\1", value)
    value = value.replace("\\", "\\\\").replace('"', '\\"')
    if percent:
        value = value.replace("%", "%%")
    return f'"{value}"'


def natural_key(text: str) -> list[Any]:
    # algo-2 before algo-10; re.split with a group alternates str, digits, str... so types line up
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


# --- job entries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostEntry:
    """One node of a job, as an ssh Host block (built from the node's manifest)."""

    job: str
    node: str
    user: str
    port: int
    host_public_key: str  # "ssh-ed25519 AAAA..." (a trailing comment is dropped)
    identity_file: Path
    proxy_command: str  # written verbatim: the caller quotes it, and may use %h %p

    def __post_init__(self) -> None:
        spec.check_job_name(self.job)
        if not spec.NODE_NAME_RE.fullmatch(self.node):
            raise spec.ContractError(f"bad node name {self.node[:80]!r}: use letters, digits, . _ and -")
        if not _USER_RE.fullmatch(self.user):
            raise spec.ContractError(f"bad ssh user {self.user[:80]!r} for node {self.node}")
        spec.check_port(self.port, f"sshd port of node {self.node}", allow_zero=False)
        parts = self.host_public_key.split()
        if (
            len(parts) < 2
            or "\n" in self.host_public_key
            or not _KEY_TYPE_RE.fullmatch(parts[0])
            or not _BASE64_RE.fullmatch(parts[1])
        ):
            raise spec.ContractError(f"host key of node {self.node} is not one OpenSSH public key line")
        if not self.proxy_command.strip() or any(c in self.proxy_command for c in "\n\r\0"):
            raise spec.ContractError("ProxyCommand must be one non-empty line")

    @property
    def alias(self) -> str:
        return format_ssh_alias(self.job, self.node)

    @property
    def host_key_alias(self) -> str:
        return f"remote-debug.{self.node}.{self.job}"

    @property
    def known_host_line(self) -> str:
        key_type, key_data = self.host_public_key.split()[:2]
        return f"{self.host_key_alias} {key_type} {key_data}"


def _sorted_entries(entries: Sequence[HostEntry]) -> list[HostEntry]:
    """Entries in a stable order (so the same nodes give the same bytes), checked for one job."""
    if not entries:
        raise spec.ContractError("no nodes to write ssh entries for")
    jobs = {e.job for e in entries}
    if len(jobs) != 1:
        raise spec.ContractError(f"ssh entries mix jobs {', '.join(sorted(jobs))}: write one job at a time")
    ordered = sorted(entries, key=lambda e: natural_key(e.node))
    for a, b in itertools.pairwise(ordered):
        if a.node == b.node:
            raise spec.ContractError(f"node {a.node} appears twice in job {a.job}")
    return ordered


def render_job_config(entries: Sequence[HostEntry], paths: StatePaths | None = None) -> str:
    """The ``<job>.conf`` text: one Host block per node."""
    ordered = _sorted_entries(entries)
    job = ordered[0].job
    paths = paths or StatePaths.default()
    known_hosts = _quote(str(paths.job_known_hosts(job).absolute()), percent=True)
    out = [
        f"# Generated by remote-debug for job {job}; rewritten on every attach, do not edit.",
        "# Host keys are pinned (HostKeyAlias + this job's own known_hosts); never trusted on first use.",
    ]
    for e in ordered:
        out += [
            "",
            f"Host {e.alias}",
            f"    HostName {e.alias}",
            f"    User {e.user}",
            f"    Port {e.port}",
            f"    ProxyCommand {e.proxy_command}",
            f"    HostKeyAlias {e.host_key_alias}",
            f"    UserKnownHostsFile {known_hosts}",
            "    StrictHostKeyChecking yes",
            f"    IdentityFile {_quote(str(e.identity_file.absolute()), percent=True)}",
            "    IdentitiesOnly yes",
            f"    ServerAliveInterval {SERVER_ALIVE_INTERVAL}",
            f"    ServerAliveCountMax {SERVER_ALIVE_COUNT_MAX}",
            f"    LogLevel {LOG_LEVEL}",
            *(f"    {line}" for line in HARDENING),
        ]
    return "\n".join(out) + "\n"


def render_known_hosts(entries: Sequence[HostEntry]) -> str:
    return "".join(e.known_host_line + "\n" for e in _sorted_entries(entries))


def render_main_config(paths: StatePaths) -> str:
    jobs_dir = paths.job_ssh_configs_dir.absolute()
    jobs_glob = _quote(str(jobs_dir), glob=True)[:-1] + '/*.conf"'  # escaped dir, then our own wildcard
    return (
        f"# Generated by remote-debug; ~/.ssh/config includes this file. One file per job below.\nInclude {jobs_glob}\n"
    )


def _read_exact(path: Path) -> str | None:
    try:
        with path.open(encoding="utf-8", newline="") as fh:  # newline="": see \r\n if someone added them
            return fh.read()
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _changed(texts: Sequence[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """The files that do not hold their text yet (the others only get their mode fixed)."""
    out = []
    for path, text in texts:
        if _read_exact(path) == text:
            if stat.S_IMODE(path.stat().st_mode) != 0o600:
                os.chmod(path, 0o600)
        else:
            out.append((path, text))
    return out


@contextlib.contextmanager
def _os_errors(what: str) -> Iterator[None]:
    """A failed write (disk full, read-only HOME, permissions) as one line naming the file.

    Our writes are atomic, so by the time this is raised the files are as they were before.
    """
    try:
        yield
    except OSError as exc:
        where = exc.filename or what
        raise SshConfigError(
            f"cannot write {where}: {exc.strerror or exc}; {what} left as it was (free space or fix permissions)"
        ) from None


@contextlib.contextmanager
def _locked(paths: StatePaths) -> Iterator[None]:
    """The ssh-config lock: the same directory flock as launch.json's (see :mod:`dir_lock`), on
    ``<state>/ssh``.  Taken outside :func:`_os_errors`: a busy lock is "try again", not "free space"."""
    with _os_errors(str(paths.ssh_dir)):
        private_dir(paths.root)
        private_dir(paths.ssh_dir)
    with locked(paths.ssh_dir, what="the ssh config", timeout=LOCK_TIMEOUT_S):
        yield


def write_job_entries(paths: StatePaths, job: str, entries: Sequence[HostEntry]) -> list[Path]:
    """Write the job's Host blocks, its pinned keys and the main include file.

    Returns the files actually (re)written: none when they already hold these bytes, so a second
    call with the same nodes leaves every file (and its mtime) untouched.
    """
    spec.check_job_name(job)
    ordered = _sorted_entries(entries)  # validates before anything is written
    if ordered[0].job != job:
        raise spec.ContractError(f"ssh entries are for job {ordered[0].job}, not {job}")
    # known_hosts first: a Host block must never point at keys that are not there yet
    texts = [
        (paths.job_known_hosts(job), render_known_hosts(ordered)),
        (paths.job_ssh_config(job), render_job_config(ordered, paths)),
        (paths.ssh_config, render_main_config(paths)),
    ]
    with _locked(paths), _os_errors(f"the ssh entries of job {job}"):
        changed = _changed(texts)
        for path, _ in changed:
            private_dir(path.parent)
        # every byte on disk before the first rename: a full disk leaves all three as they were
        osutil.atomic_write_many([(path, text.encode("utf-8"), 0o600) for path, text in changed])
    return [path for path, _ in changed]


def remove_job_entries(paths: StatePaths, job: str) -> list[Path]:
    """Delete the job's Host blocks and pinned keys; returns the files removed."""
    spec.check_job_name(job)
    removed: list[Path] = []
    with _locked(paths), _os_errors(f"the ssh entries of job {job}"):
        for path in (paths.job_ssh_config(job), paths.job_known_hosts(job)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


@dataclass(frozen=True)
class JobEntries:
    """What we wrote for one job: its Host aliases (``<job>.conf``) and its pinned host keys."""

    job: str
    aliases: list[str]
    known_hosts: int  # lines in known_hosts.d/<job>

    @property
    def empty(self) -> bool:
        return not self.aliases and not self.known_hosts


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SshConfigError(f"cannot read {path}: {exc.strerror}") from None


def job_entries(paths: StatePaths, job: str) -> JobEntries:
    """The job's entries as they are on disk (empty when there are none)."""
    spec.check_job_name(job)
    aliases = [line.split(None, 1)[1] for line in _lines(paths.job_ssh_config(job)) if line.startswith("Host ")]
    pinned = [line for line in _lines(paths.job_known_hosts(job)) if line.strip()]
    return JobEntries(job, aliases, len(pinned))


def jobs_with_entries(paths: StatePaths) -> list[str]:
    """Every job that has a Host file or pinned keys of ours (names that are not job names are not ours)."""
    names = job_names_in(paths.job_ssh_configs_dir, ".conf") | job_names_in(paths.known_hosts_dir)
    return sorted(names, key=natural_key)


def remove_all_entries(paths: StatePaths) -> list[JobEntries]:
    """Delete every job's entries and the main include file: all we keep under ``<state>/ssh`` but the
    record of the user's Include line (:func:`remove_include` takes that line out).  Returns what went."""
    removed: list[JobEntries] = []
    for job in jobs_with_entries(paths):
        entries = job_entries(paths, job)
        if remove_job_entries(paths, job):
            removed.append(entries)
    with _locked(paths), _os_errors(str(paths.ssh_dir)):
        with contextlib.suppress(FileNotFoundError):
            paths.ssh_config.unlink()
        for folder in (paths.job_ssh_configs_dir, paths.known_hosts_dir):
            with contextlib.suppress(OSError):  # not empty: something not ours lives there
                folder.rmdir()
    return removed


# --- the one line in ~/.ssh/config ---------------------------------------------------------------


@dataclass(frozen=True)
class IncludeChange:
    changed: bool
    diff: str  # unified diff of the user's file ("" when unchanged)
    path: Path


def include_line(paths: StatePaths) -> str:
    """Our line, without its line ending (Include arguments are globs, hence glob=True)."""
    return f"Include {_quote(str(paths.ssh_config.absolute()), glob=True)}"


def _split_lines(data: bytes) -> list[bytes]:
    """Lines with their endings; OpenSSH reads lines up to '\\n', so a lone '\\r' is not an end."""
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _content(line: bytes) -> bytes:
    line = line[:-1] if line.endswith(b"\n") else line
    return line[:-1] if line.endswith(b"\r") else line


def _is_ours(line: bytes, ours: bytes) -> bool:
    # indentation is allowed: users indent Include lines they move under a Host block
    return _content(line).strip() == ours


def _with_include(old: bytes | None, ours: bytes) -> bytes:
    if old is None:
        return ours + b"\n"
    lines = _split_lines(old)
    if lines and _is_ours(lines[0], ours):
        return old
    eol = b"\r\n" if lines and lines[0].endswith(b"\r\n") else b"\n"
    # a copy further down (e.g. moved under a Host line, where it only applies to that host) moves up
    return ours + eol + b"".join(line for line in lines if not _is_ours(line, ours))


def _without_include(old: bytes, ours: bytes) -> bytes:
    lines = _split_lines(old)
    if lines and _is_ours(lines[0], ours):
        return b"".join(lines[1:])  # exactly the bytes we inserted: line and line ending
    return b"".join(line for line in lines if not _is_ours(line, ours))


def _diff(path: Path, old: bytes | None, new: bytes | None) -> str:
    def lines(data: bytes | None) -> list[str]:
        return [] if data is None else data.decode("utf-8", "replace").splitlines()

    diff = difflib.unified_diff(
        lines(old),
        lines(new),
        fromfile=str(path) if old is not None else "/dev/null",
        tofile=str(path) if new is not None else "/dev/null",
        lineterm="",
    )
    text = "\n".join(diff)
    return text + "\n" if text else ""


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SshConfigError(f"cannot read {path}: {exc.strerror}") from None


def _target(user_config: Path) -> Path:
    # write through a symlink (dotfile managers link ~/.ssh/config): replacing the link itself
    # would silently detach the user's config from their dotfiles repository
    return Path(os.path.realpath(user_config))


def _load_state(paths: StatePaths) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(paths.include_state.read_text(encoding="utf-8"))
        files = data["files"] if data.get("version") == STATE_VERSION else {}
        return {str(k): dict(v) for k, v in files.items() if isinstance(v, dict)}
    except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError):
        # without a record we still remove our exact line; we only lose "delete the file we created"
        return {}


def _save_state(paths: StatePaths, files: dict[str, dict[str, Any]]) -> None:
    if not files:
        with contextlib.suppress(FileNotFoundError):
            paths.include_state.unlink()
        return
    text = json.dumps({"version": STATE_VERSION, "files": files}, indent=2, sort_keys=True) + "\n"
    osutil.atomic_write_text(paths.include_state, text, mode=0o600)


def _restore_state(paths: StatePaths, data: bytes | None) -> None:
    with contextlib.suppress(OSError):  # best effort: a stale record only costs "delete the file we made"
        if data is None:
            paths.include_state.unlink()
        else:
            osutil.atomic_write_bytes(paths.include_state, data, 0o600)


def _resolve_user_config(user_config: Path | None) -> Path:
    return (paths_mod.user_ssh_config() if user_config is None else user_config).absolute()


def ensure_include(paths: StatePaths, user_config: Path | None = None, *, dry_run: bool = False) -> IncludeChange:
    """Make ``Include "<state>/ssh/config"`` the first line of the user's ssh config."""
    path = _resolve_user_config(user_config)
    line = include_line(paths)
    ours = os.fsencode(line)
    if dry_run:  # no lock either: taking it creates the state dir
        old = _read_bytes(_target(path))
        new = _with_include(old, ours)
        return IncludeChange(new != old, _diff(path, old, new) if new != old else "", path)
    with _locked(paths), _os_errors(str(path)):
        target = _target(path)
        old = _read_bytes(target)
        new = _with_include(old, ours)
        if new == old:
            return IncludeChange(False, "", path)
        saved_state = _read_bytes(paths.include_state)
        files = _load_state(paths)
        record = files.get(str(path), {})
        created_dir = not target.parent.exists()
        files[str(path)] = {
            "line": line,
            "created_file": bool(record.get("created_file")) or old is None,
            "created_dir": bool(record.get("created_dir")) or created_dir,
        }
        _save_state(paths, files)  # before the edit: a crash in between leaves a record, not a stray line
        try:
            if created_dir:
                target.parent.mkdir(mode=0o700, parents=True)
                os.chmod(target.parent, 0o700)  # mkdir's mode is masked by the umask
            mode = 0o600 if old is None else stat.S_IMODE(target.stat().st_mode)
            osutil.atomic_write_bytes(target, new, mode)
        except OSError:
            _restore_state(paths, saved_state)  # the edit did not happen: neither did its record
            raise
        return IncludeChange(True, _diff(path, old, new), path)


def remove_include(paths: StatePaths, user_config: Path | None = None, *, dry_run: bool = False) -> IncludeChange:
    """Take our line out again: the user's file is back to the bytes it had (or gone, if we made it)."""
    path = _resolve_user_config(user_config)
    line = include_line(paths)
    if dry_run:
        target = _target(path)
        old = _read_bytes(target)
        record = _load_state(paths).get(str(path), {})
        new = _removed(old, line, record)
        return IncludeChange(new != old, _diff(path, old, new) if new != old else "", path)
    with _locked(paths), _os_errors(str(path)):
        target = _target(path)
        old = _read_bytes(target)
        files = _load_state(paths)
        record = files.pop(str(path), {})
        new = _removed(old, line, record)
        if new != old:
            if new is None:
                target.unlink()
            else:
                osutil.atomic_write_bytes(target, new, stat.S_IMODE(target.stat().st_mode))
        if record.get("created_dir") and new is None:
            with contextlib.suppress(OSError):  # not empty any more: it is the user's now
                target.parent.rmdir()
        _save_state(paths, files)
        return IncludeChange(new != old, _diff(path, old, new) if new != old else "", path)


def _removed(old: bytes | None, line: str, record: dict[str, Any]) -> bytes | None:
    if old is None:
        return None
    new = _without_include(old, os.fsencode(line))
    recorded = record.get("line")
    if isinstance(recorded, str) and recorded != line:  # the state dir's path was spelled differently
        new = _without_include(new, os.fsencode(recorded))
    if record.get("created_file") and new == b"":
        return None  # we created it and nobody added anything: it goes away again
    return new
