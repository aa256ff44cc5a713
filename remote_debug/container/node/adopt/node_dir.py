"""``adopt JOB``'s private dir on a node, in the node's shared ``/tmp``, and the guard every step passes through.

The laptop reaches a node only through a root shell, one command per round trip (``ssm_shell``), and each
command names the dir again.  A predictable name there (``/tmp/remote-debug-adopt-<job>``, made with
``mkdir -p``) let another user of the container put a symlink at it first: root then created, chmodded and
finally ran files wherever the link pointed when each later command ran.  So:

* the dir gets a random name (``tempfile.mkdtemp``: ``mkdir`` of a fresh name, 0700, never through a link)
  under a prefix naming the job and node, ``remote-debug-adopt-<job>.<node>.`` (job names hold no dot); a
  re-adoption finds the earlier dir by that prefix, and takes one only if ``lstat`` (the entry itself, never
  what a link points at) says: a real dir, owned by us, mode 0700.  Nothing is ever chmodded;
* every later step runs behind :data:`SOURCE`'s ``in`` verb: it opens the dir with ``O_NOFOLLOW |
  O_DIRECTORY``, checks the opened dir (``fstat``: ours, 0700) and its parent (ours or root's, and sticky if
  others may write there, so nobody can rename our entry away), checks the SHA-256 of the files this step
  will use that an earlier step wrote (opened relative to that dir, ``dir_fd``, ``O_NOFOLLOW``), then makes
  the opened dir its working directory and execs the step's command, which names files relative to it.

Only stdlib, Python 3.10+: the program runs with the node's own interpreter (``-I``: neither the shell's
working directory nor ``PYTHON*`` variables can put modules on its path) before our bundle is there.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

PARENT = "/tmp"
EXIT_REFUSED = 3  # the guard's exit status: the dir (or a file in it) is not what this run made
REFUSAL = "remote-debug adopt: "  # how the guard's one line (on stderr) starts

# No single quote inside: the program travels shlex-quoted, possibly twice (through ``sudo -n sh -c``).
SOURCE = r"""
import hashlib, os, stat, sys, tempfile
def refuse(why):
    sys.stderr.write("remote-debug adopt: " + why + "\n")
    sys.exit(3)
def safe_parent(path):
    st = os.lstat(path)
    shared = st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX
    return stat.S_ISDIR(st.st_mode) and st.st_uid in (0, os.geteuid()) and not shared
def ours(st):
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
verb, args = sys.argv[1], sys.argv[2:]
if verb == "make":
    parent, prefix = args
    if not safe_parent(parent):
        refuse(parent + " is not a safe place for a private dir (owned by another user, or shared and not sticky)")
    found = []
    for name in os.listdir(parent):
        rest = name[len(prefix):]
        if name.startswith(prefix) and rest and "." not in rest:
            try:
                st = os.lstat(os.path.join(parent, name))
            except OSError:
                continue
            if ours(st):
                found.append((st.st_mtime, name))
    if found:
        print("old " + os.path.join(parent, max(found)[1]))
    else:
        print("new " + tempfile.mkdtemp(prefix=prefix, dir=parent))
elif verb == "in":
    directory, sums = args[0], {}
    args = args[1:]
    while args[:1] == ["--sha256"]:
        name, _, digest = args[1].partition("=")
        sums[name], args = digest, args[2:]
    try:
        if not safe_parent(os.path.dirname(directory)):
            refuse(os.path.dirname(directory) + " is not a safe place for a private dir")
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        refuse(directory + " is not our private dir: " + exc.strerror)
    if not ours(os.fstat(fd)):
        refuse(directory + " is not our private dir (owner or mode changed)")
    for name, digest in sums.items():
        try:
            f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            refuse(name + " in " + directory + ": " + exc.strerror)
        h = hashlib.sha256()
        while chunk := os.read(f, 1 << 20):
            h.update(chunk)
        os.close(f)
        if h.hexdigest() != digest:
            refuse(name + " in " + directory + " is not the file uploaded")
    os.fchdir(fd)
    os.execvp(args[0], args)
else:
    refuse("unknown verb " + verb)
"""


def prefix(job: str, node: str) -> str:
    """The start of the node's dir name for ``job`` (a random suffix without dots follows)."""
    return f"remote-debug-adopt-{job}.{node}."


def make_command(python: str, job: str, node: str) -> str:
    """Prints ``new DIR`` (made now) or ``old DIR`` (an earlier adoption's, checked as ours)."""
    return f"{shlex.quote(python)} -I -c {shlex.quote(SOURCE)} make {PARENT} {shlex.quote(prefix(job, node))}"


def in_dir(python: str, directory: str, command: str, sha256: Mapping[str, str] | None = None) -> str:
    """``command`` (sh) run inside ``directory`` once the guard has checked it (and ``sha256``: name -> hex
    digest of files in it that this step trusts)."""
    sums = "".join(f" --sha256 {shlex.quote(f'{name}={digest}')}" for name, digest in (sha256 or {}).items())
    return (
        f"{shlex.quote(python)} -I -c {shlex.quote(SOURCE)} in {shlex.quote(directory)}{sums} "
        f"sh -c {shlex.quote(command)}"
    )
