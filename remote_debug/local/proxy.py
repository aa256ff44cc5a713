"""``remote-debug proxy HOST PORT``: the ProxyCommand of every generated ssh Host entry.

OpenSSH (and VS Code Remote-SSH through it, and our own tunnels) run this with the Host alias
``<node>.<job>``; it asks the job's backend for a byte stream to that node's sshd and relays
stdin/stdout over it.  For SageMaker the same seam starts an SSM session instead.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import BinaryIO

from remote_debug.local.backends import backend_for
from remote_debug.local.errors import UserError
from remote_debug.local.paths import StatePaths
from remote_debug.spec import NODE_NAME_RE


def proxy_command(paths: StatePaths) -> str:
    """The ProxyCommand line: absolute interpreter and state dir, so it works from any shell/PATH.

    Two parsers read it: ssh first expands ``%`` tokens (so a literal ``%`` is written ``%%``), then
    the user's shell runs it (so every path is shell-quoted).
    """

    def word(path: str) -> str:
        return shlex.quote(path).replace("%", "%%")

    return " ".join(
        [word(sys.executable), "-m", "remote_debug", "proxy", "--state-dir", word(str(paths.root)), "%h", "%p"]
    )


def split_alias(alias: str) -> tuple[str, str]:
    """``algo-1.my-job`` -> (``my-job``, ``algo-1``)."""
    node, sep, job = alias.partition(".")
    if not sep or not NODE_NAME_RE.fullmatch(node) or not job:
        raise UserError(f"bad host {alias[:80]!r}: expected <node>.<job>, e.g. algo-1.my-job")
    return job, node


def run_proxy(alias: str, port: int, paths: StatePaths, stdin: BinaryIO, stdout: BinaryIO) -> int:
    job, node = split_alias(alias)
    backend = backend_for(job, paths)
    return backend.relay(job, node, port, stdin, stdout)


def main(argv: list[str]) -> int:
    """``python -m remote_debug proxy [--state-dir DIR] HOST PORT`` without the CLI's imports.

    Every ssh connection (the IDE opens several) starts this process, so it skips typer, rich and
    paramiko (0.13 s instead of 0.65 s to start here); ``remote-debug proxy`` does the same work.
    """
    import argparse

    from remote_debug.spec import ContractError

    parser = argparse.ArgumentParser(prog="remote-debug proxy")
    parser.add_argument("--state-dir")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    args = parser.parse_args(argv)
    paths = StatePaths(Path(args.state_dir).absolute()) if args.state_dir else StatePaths.default()
    try:
        return run_proxy(args.host, args.port, paths, sys.stdin.buffer, sys.stdout.buffer)
    except (UserError, ContractError) as exc:
        sys.stderr.write(f"remote-debug: error: {' '.join(str(exc).split())}\n")
        return 2
    except KeyboardInterrupt:
        return 130
