"""An ssh session into a node looks like the job, and ends with it.

The node's private sshd runs every session - a shell, ``ssh node -- python ...``, VS Code's Remote-SSH
server, scp/sftp, rsync - through ``ForceCommand``: this file, run as a script by the job's own
interpreter (``python -I -S ssh_session.py <session file>``; stdlib only, so neither the job's
PYTHONPATH nor its site-packages load here).  Two halves:

* the node side, :class:`SessionScope` (``NodeServices`` owns one): at start it writes the session
  file, 0600 in sshd's private dir - the environment the training command got, minus our wiring
  (``REMOTE_DEBUG_*``: the job secret never reaches a session), with the job's interpreter first on
  PATH; the code dir; the job's mark - and, where cgroup v2 is mounted writable (root on most hosts;
  SageMaker containers usually have none), makes a cgroup for the sessions.  At the end of the job it
  ends every process a session started (:meth:`SessionScope.end`);
* the session side, :func:`main`: joins that cgroup, records its session id, puts the mark into the
  environment and ``exec``s the user's shell in the code dir with the job's environment:
  ``shell -c "$SSH_ORIGINAL_COMMAND"``, or the bare shell when the client asked for no command.  Not a
  login shell, as ``docker exec`` does it: /etc/profile would reset PATH (Debian's does for root) and
  the job's interpreter would be gone again.  A command reads no rc file either (see
  :func:`session_environment`); an interactive shell does read ~/.bashrc, which may change PATH.

Finding a session's processes at the end, so that a Remote-SSH server, a ``nohup`` tool or a
double-forked daemon does not outlive the job: with a cgroup, ``cgroup.kill`` (whatever a process did
to its environment or session); always, every process whose environment carries the mark (inherited
through fork and exec, so daemons carry it) and every process still in a session a session leader
recorded (what cleared its environment but stayed in the session).  SIGTERM first, a short grace,
then SIGKILL.  Node services killed before they could sweep (SIGKILL) leave their cgroup behind: the
next node started in the same cgroup ends what is in it and removes it.

Subsystems: under ``ForceCommand`` sshd runs a subsystem's command through this file too (as
``SSH_ORIGINAL_COMMAND``), so sftp must be a real ``sftp-server`` binary, not ``internal-sftp``
(``node.py`` only forces the command when there is one).  ``-N`` and port forwards run no command.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

ENV_CGROUP = "REMOTE_DEBUG_SESSION_CGROUP"  # "0": no cgroup, the fallback (what most SageMaker containers get)
MARK_ENV = "REMOTE_DEBUG_SESSION_OF"  # in the environment of every process a session starts
# Told to every session: the hook's private dir (where `remote-debug run` finds the node's run entry,
# see run_slot) and the job's interpreter (which runs `python -m remote_debug.container.node.run_command`)
NODE_DIR_ENV = "REMOTE_DEBUG_NODE_DIR"
NODE_PYTHON_ENV = "REMOTE_DEBUG_NODE_PYTHON"  # spec.RERUN_PYTHON_ENV (this file imports nothing of ours)
SESSION_FILE = "ssh-session.json"
LEADERS_FILE = "ssh-session-leaders"  # "<sid> <start time>" per session
CGROUP_PREFIX = "remote-debug-ssh-"
CGROUP_MOUNTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")  # v2 alone, then the hybrid layout's v2 part
SWEEP_GRACE = 2.0  # SIGTERM, then SIGKILL after this long (an interactive bash ignores SIGTERM)
KILL_TIMEOUT = 5.0
INJECT_SUFFIX = os.path.join("remote_debug", "container", "inject")  # our sitecustomize: not for sessions
# The job's bookkeeping of its own shell, and what sshd sets for each session (the session's wins).
NOT_FROM_JOB = frozenset(
    {
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "MAIL",
        "TERM",
        "DISPLAY",
        "XAUTHORITY",
        "SSH_CLIENT",
        "SSH_CONNECTION",
        "SSH_TTY",
        "SSH_AUTH_SOCK",
        "SSH_ORIGINAL_COMMAND",
    }
)
STARTTIME = 19  # index of the start time among /proc/<pid>/stat's fields after the command name
SESSION_ID = 3


# --- both sides ---------------------------------------------------------------------------------------


def _stat(pid: int | str) -> list[str] | None:
    # osutil.proc_stat's twin: the session side runs as a script and imports nothing of the package
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split() or None
    except (OSError, IndexError):
        return None


# --- the session side (sshd's ForceCommand) --------------------------------------------------------------


def session_environment(document: Mapping[str, object], current: Mapping[str, str]) -> dict[str, str]:
    """The job's environment, then what sshd set for this session (but PATH: the job's), then the mark."""
    saved = document.get("env")
    env = {str(k): str(v) for k, v in saved.items()} if isinstance(saved, dict) else {}
    for name, value in current.items():
        if name not in ("PATH", "SSH_ORIGINAL_COMMAND"):
            env[name] = value
    env.setdefault("PATH", current.get("PATH", os.defpath))
    env[MARK_ENV] = str(document.get("mark", ""))
    # bash sources ~/.bashrc for a command run by sshd when it is a top-level shell (SHLVL < 2, stdin
    # a socket): a user's rc that puts another Python first (pyenv, conda init) would hide the job's
    # interpreter again.  As a nested shell it reads no rc file, as a command run by `docker exec`.
    env["SHLVL"] = "1"
    return env


def join(document: Mapping[str, object]) -> None:
    """Into the sessions' cgroup, if any, and this session's leader on record (each best effort)."""
    cgroup = document.get("cgroup")
    if isinstance(cgroup, str) and cgroup:
        with contextlib.suppress(OSError), open(os.path.join(cgroup, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    leaders = document.get("leaders")
    sid = os.getsid(0)  # sshd made the session (setsid); we are normally its leader (the shell exec'd us)
    if isinstance(leaders, str) and leaders and sid != document.get("node_sid"):  # never the node's own
        fields = _stat(sid)
        if fields is not None and len(fields) > STARTTIME:
            fd = os.open(leaders, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, f"{sid} {fields[STARTTIME]}\n".encode())
            finally:
                os.close(fd)


def shell_argv(shell: str, command: str | None) -> list[str]:
    if command:
        return [shell, "-c", command]
    return [shell]  # interactive when stdin is a terminal, else it reads commands from stdin (Remote-SSH)


def _warn(message: str) -> None:
    with contextlib.suppress(Exception):  # stdout belongs to the session's protocol (sftp): stderr only
        sys.stderr.write(f"[remote-debug] {message}\n")
        sys.stderr.flush()


def main(argv: list[str]) -> int:
    command = os.environ.get("SSH_ORIGINAL_COMMAND") or None
    shell = os.environ.get("SHELL") or "/bin/sh"
    env = {k: v for k, v in os.environ.items() if k != "SSH_ORIGINAL_COMMAND"}
    cwd = os.environ.get("HOME") or "/"
    try:
        # Whatever goes wrong here, the session still runs, as sshd alone would have run it.
        with open(argv[1], encoding="utf-8") as fh:
            document = json.load(fh)
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        env = session_environment(document, os.environ)
        env[NODE_DIR_ENV] = os.path.dirname(os.path.abspath(argv[1]))
        env[NODE_PYTHON_ENV] = sys.executable
        join(document)
        wanted = document.get("cwd")
        if isinstance(wanted, str) and os.path.isdir(wanted):
            cwd = wanted
    except Exception as exc:  # a login must never fail because of us
        _warn(f"this session does not see the job's environment: {exc}")
    with contextlib.suppress(OSError):
        os.chdir(cwd)
        env["PWD"] = cwd
    try:
        os.execve(shell, shell_argv(shell, command), env)
    except OSError as exc:
        _warn(f"cannot run {shell}: {exc.strerror or exc}")
    return 127


# --- the node side -------------------------------------------------------------------------------------


def _is_inject_dir(path: str) -> bool:
    return path.rstrip(os.sep).endswith(INJECT_SUFFIX)


def job_environment(env: Mapping[str, str], python: str) -> dict[str, str]:
    """What a session gets of the job's environment: no wiring of ours, the job's interpreter first on PATH."""
    out = {k: v for k, v in env.items() if not k.startswith("REMOTE_DEBUG_") and k not in NOT_FROM_JOB}
    bin_dir = os.path.dirname(python)
    rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != bin_dir]
    out["PATH"] = os.pathsep.join([bin_dir, *rest] if bin_dir else rest)
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not _is_inject_dir(p)]
    if kept:
        out["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        out.pop("PYTHONPATH", None)
    return out


def _own_cgroup() -> str | None:
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def _cgroup2_mounts() -> list[tuple[str, str]]:
    """(mount point, root inside the hierarchy) of each cgroup v2 mount, the usual places first."""
    found = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                before, _, after = line.partition(" - ")
                fields = before.split()
                if after.split()[:1] == ["cgroup2"] and len(fields) >= 5:
                    found.append((fields[4].replace("\\040", " "), fields[3]))
    except OSError:
        return []
    return sorted(found, key=lambda m: CGROUP_MOUNTS.index(m[0]) if m[0] in CGROUP_MOUNTS else len(CGROUP_MOUNTS))


def cgroup_base() -> Path | None:
    """The cgroup v2 directory this process is in, when we may make cgroups below it."""
    own = _own_cgroup()
    if own is None:
        return None
    for mount_point, root in _cgroup2_mounts():
        root = root.rstrip("/")  # "" when the mount shows the whole hierarchy (or our cgroup namespace)
        if root and own != root and not own.startswith(root + "/"):
            continue  # we are not below what this mount shows
        base = Path(mount_point) / own[len(root) :].lstrip("/")
        if (base / "cgroup.procs").is_file() and os.access(base, os.W_OK):
            return base
    return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _signal(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _cgroup_pids(cgroup: Path | None) -> set[int]:
    """The processes in ``cgroup`` and the cgroups below it."""
    pids: set[int] = set()
    for directory, _dirs, _files in os.walk(cgroup) if cgroup is not None else ():
        with contextlib.suppress(OSError, ValueError), open(os.path.join(directory, "cgroup.procs")) as fh:
            pids.update(int(line) for line in fh if line.strip())
    return pids


def _kill_cgroup(cgroup: Path | None) -> None:
    if cgroup is None:
        return
    try:
        (cgroup / "cgroup.kill").write_text("1")  # Linux 5.14+: the whole subtree, atomically
    except OSError:
        _signal(_cgroup_pids(cgroup), signal.SIGKILL)


def _remove_cgroup(cgroup: Path | None, timeout: float = 1.0) -> None:
    """rmdir, deepest first, retried for ``timeout`` (a killed process leaves its cgroup when it has exited)."""
    deadline = time.monotonic() + timeout
    while cgroup is not None and cgroup.exists():
        for directory, _dirs, _files in sorted(os.walk(cgroup), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        if not cgroup.exists() or time.monotonic() > deadline:
            return
        time.sleep(0.02)


def _owner_tag() -> str:
    """``<pid namespace>.<pid>`` of this process: a pid means something only in its own pid namespace."""
    return f"{os.stat('/proc/self/ns/pid').st_ino}.{os.getpid()}"


def _remove_stale(base: Path) -> None:
    """The sessions' cgroups of nodes whose services died without ending them (SIGKILL): what still runs
    there belonged to a job that is over.  Named ``<prefix><pid namespace>.<owner pid>-<mark>``; an
    owner in another pid namespace, a live owner (or a reused pid) keeps its cgroup."""
    namespace = _owner_tag().split(".")[0]
    with contextlib.suppress(OSError):
        for child in base.iterdir():
            if not child.name.startswith(CGROUP_PREFIX):
                continue
            owner_ns, _, owner = child.name[len(CGROUP_PREFIX) :].split("-")[0].partition(".")
            if owner_ns == namespace and owner.isdigit() and not _alive(int(owner)) and child.is_dir():
                _kill_cgroup(child)
                _remove_cgroup(child)


class SessionScope:
    """The node side: the session file, the sessions' cgroup (if any), and the sweep at the job's end."""

    def __init__(self, state_dir: Path, mark: str, cgroup: Path | None, python: str) -> None:
        self.state_dir = state_dir
        self.mark = mark
        self.cgroup = cgroup
        self.python = python

    @property
    def session_file(self) -> Path:
        return self.state_dir / SESSION_FILE

    @property
    def leaders_file(self) -> Path:
        return self.state_dir / LEADERS_FILE

    @property
    def force_command(self) -> str:
        """sshd's ForceCommand (run by the user's shell with ``-c``)."""
        script = str(Path(__file__).resolve())
        return f"exec {shlex.quote(self.python)} -I -S {shlex.quote(script)} {shlex.quote(str(self.session_file))}"

    @classmethod
    def create(cls, state_dir: Path, env: Mapping[str, str], code_dir: str, python: str | None = None) -> SessionScope:
        """Write the session file into ``state_dir`` (ours, 0700) and make the cgroup; raises OSError."""
        from remote_debug.oskit.osutil import atomic_write_bytes

        python = python or sys.executable
        if not python:
            raise OSError("this interpreter does not know its own path")
        mark = secrets.token_hex(8)
        cgroup: Path | None = None
        base = None if env.get(ENV_CGROUP, "").strip() == "0" else cgroup_base()
        if base is not None:
            with contextlib.suppress(OSError):  # read-only or not delegated to us: the fallback it is
                _remove_stale(base)
                wanted = base / f"{CGROUP_PREFIX}{_owner_tag()}-{mark}"
                wanted.mkdir()
                cgroup = wanted
        scope = cls(state_dir, mark, cgroup, python)
        document = {
            "version": 1,
            "env": job_environment(env, python),
            "cwd": code_dir,
            "mark": mark,
            "cgroup": str(cgroup or ""),
            "leaders": str(scope.leaders_file),
            "node_sid": os.getsid(0),
        }
        try:
            scope.leaders_file.unlink(missing_ok=True)  # an earlier run's sessions are not this job's
            atomic_write_bytes(scope.session_file, json.dumps(document).encode(), 0o600)
        except BaseException:
            _remove_cgroup(cgroup, timeout=0)
            raise
        return scope

    # --- the end -------------------------------------------------------------------------------------

    def _recorded_sessions(self) -> set[str]:
        """Session ids recorded by session leaders whose number was not reused since.  A session id
        is not handed out again while any process is in that session, so a live leader with another
        start time means ours are all gone."""
        try:
            lines = self.leaders_file.read_text().splitlines()
        except OSError:
            return set()
        ids = set()
        for line in lines:
            sid, _, started = line.partition(" ")
            fields = _stat(sid) if sid.isdigit() else None
            if sid.isdigit() and (fields is None or len(fields) <= STARTTIME or fields[STARTTIME] == started):
                ids.add(sid)
        ids.discard(str(os.getsid(0)))  # the node's own session (sshd's, the training's): never a victim
        return ids

    def members(self) -> set[int]:
        """Every live process a session started (never this process, nor PID 1)."""
        found = _cgroup_pids(self.cgroup)
        sessions = self._recorded_sessions()
        needle = f"\0{MARK_ENV}={self.mark}\0".encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            fields = _stat(entry)
            if fields is None or fields[0] == "Z":
                continue
            if len(fields) > SESSION_ID and fields[SESSION_ID] in sessions:
                found.add(int(entry))
                continue
            with contextlib.suppress(OSError), open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in b"\0" + fh.read():
                    found.add(int(entry))
        return {pid for pid in found if pid not in (os.getpid(), 1) and _alive(pid)}

    def end(self, grace: float = SWEEP_GRACE) -> int:
        """End every process the sessions started (call after sshd stopped); returns how many there were."""
        victims = self.members()
        ended = len(victims)
        _signal(victims, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while victims and time.monotonic() < deadline:
            time.sleep(0.05)
            victims = {pid for pid in victims if _alive(pid)}
        deadline = time.monotonic() + KILL_TIMEOUT
        while True:  # what ignored SIGTERM, and whatever was forked meanwhile
            _kill_cgroup(self.cgroup)
            left = self.members()
            _signal(left, signal.SIGKILL)
            if not left and not _cgroup_pids(self.cgroup):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        _remove_cgroup(self.cgroup)
        for name in (self.session_file, self.leaders_file):  # the job's environment stays on disk no longer
            with contextlib.suppress(OSError):
                name.unlink()
        return ended


if __name__ == "__main__":
    sys.exit(main(sys.argv))
