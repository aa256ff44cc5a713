"""Set up an emulated node's mount and UTS namespaces (used by :mod:`remote_debug.emulator.nodes`).

Two uses, both stdlib only and run with ``python -I -S`` so a job's PYTHONPATH / sitecustomize never
load in here:

* the node's holder, once per node at ``Cluster.create``:
  ``ip netns exec <ns> python -I -S node_enter.py --hostname algo-N --notify --bind ROOT /opt/ml -- sleep infinity``.
  ``ip netns exec`` has put us in the node's network namespace and in a fresh mount namespace with
  ``/etc/netns/<ns>/*`` (hosts, hostname, environment) bound over ``/etc/*``.  Here that mount
  namespace is made private (nothing mounted in a node shows on the host), the node's root is bound
  on ``/opt/ml``, a UTS namespace gets the node's hostname (gloo and the toolkit go by
  ``gethostname()``; ``netns.set_hostname``, which local multi-node jobs use too), "ready" is
  written to stdout and the process execs into ``sleep``, which keeps the namespaces alive: every
  command of the node enters them (``nsenter --target``), so a node has one mount table and one
  hostname, like a container;
* later additions to a running node, via ``nsenter --target <holder> --mount``:
  ``node_enter.py --bind SSHD_CONFIG /etc/ssh/sshd_config --home UPPER WORK --`` (no command: mount
  and exit).  ``--home`` puts an overlay on ``/root`` whose writes (and the job's ``/root/.ssh``)
  stay in the node, the way each container has its own ``/root``.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
NETNS_PY = Path(__file__).resolve().parents[1] / "oskit" / "netns.py"

EXIT_SETUP = 126  # like a shell's "found but could not run"
EXIT_NOT_FOUND = 127
READY = b"ready\n"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _netns() -> ModuleType:
    """``remote_debug/oskit/netns.py``, loaded by path: under ``-I -S`` the package may not be
    importable, and that file is standard library only for this reason."""
    name = "_remote_debug_netns"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, NETNS_PY)
        if spec is None or spec.loader is None:
            raise OSError(f"cannot load {NETNS_PY}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses looks the module up while it makes a class
        spec.loader.exec_module(module)
    return sys.modules[name]


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(value: str | None) -> bytes | None:
        return None if value is None else os.fsencode(value)

    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {source or ''} on {target}")


class Options:
    def __init__(self) -> None:
        self.hostname = ""  # set: this is the holder (private mounts, own UTS namespace)
        self.notify = False
        self.binds: list[tuple[str, str]] = []
        self.home: tuple[str, str] | None = None


USAGE = "usage: node_enter.py [--hostname NAME] [--notify] [--bind SRC DST]... [--home UPPER WORK] -- [ARGV...]"


def parse(args: list[str]) -> tuple[Options, list[str]]:
    opts = Options()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return opts, args[i + 1 :]
        if arg == "--hostname" and i + 1 < len(args):
            opts.hostname, i = args[i + 1], i + 2
        elif arg == "--notify":
            opts.notify, i = True, i + 1
        elif arg == "--bind" and i + 2 < len(args):
            opts.binds.append((args[i + 1], args[i + 2]))
            i += 3
        elif arg == "--home" and i + 2 < len(args):
            opts.home, i = (args[i + 1], args[i + 2]), i + 3
        else:
            raise ValueError(f"unexpected argument {arg!r}; {USAGE}")
    raise ValueError(USAGE)


def enter(opts: Options) -> None:
    if opts.hostname:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
    for source, target in opts.binds:
        _mount(source, target, None, MS_BIND | MS_REC)
    if opts.home is not None:
        upper, work = opts.home
        try:
            _mount("overlay", "/root", "overlay", 0, f"lowerdir=/root,upperdir={upper},workdir={work}")
        except OSError:
            # No overlayfs (or a path it cannot take): the node's home replaces /root outright, as in a
            # container whose image has nothing in /root; the job's /root/.ssh is there either way.
            _mount(upper, "/root", None, MS_BIND)
    if opts.hostname:
        _netns().set_hostname(opts.hostname)


def main(args: list[str]) -> int:
    try:
        opts, argv = parse(args)
    except ValueError as exc:
        print(f"remote-debug node_enter: {exc}", file=sys.stderr)
        return EXIT_SETUP
    try:
        enter(opts)
    except OSError as exc:
        print(f"remote-debug: cannot set up node {opts.hostname or '(mounts)'}: {exc}", file=sys.stderr)
        return EXIT_SETUP
    if opts.notify:
        # The parent waits for this line before anyone enters the namespaces; then stdout is let go
        # so the parent can close its end of the pipe.
        os.write(1, READY)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
    if not argv:
        return 0
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"remote-debug: node {opts.hostname}: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
    return EXIT_NOT_FOUND


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
