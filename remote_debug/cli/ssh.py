"""``remote-debug ssh JOB [--node algo-2] [-- CMD]``: the real OpenSSH client with the generated entries."""

from __future__ import annotations

import os
import shlex
import shutil
from typing import Annotated

import typer

from remote_debug.cli.application import app, positive_seconds
from remote_debug.cli.output import wait_printer
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.core.errors import UserError


# Options may follow the job name (`ssh JOB --node algo-2 -- CMD`); the remote command comes after
# `--`, so its own options (`-- ls -la`) are never taken for ours.
@app.command()
def ssh(
    job: Annotated[str, typer.Argument(help="Job name.")],
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="Remote command after '--' (default: a shell); its words are sent as typed, "
            "and a single quoted word is a shell command line ('ls | head')."
        ),
    ] = None,
    node: Annotated[str, typer.Option("--node", help="Node to log in to.")] = "algo-1",
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="How long to wait for the node to publish sshd.",
            callback=positive_seconds,
        ),
    ] = 60.0,
) -> None:
    """Log in to a job's node (or run a command there) over the job's transport."""
    connection = JobConnection.open(job, emit=wait_printer())
    connection.require_running()
    manifests = connection.wait_for_manifests(timeout)
    if node not in manifests:
        raise UserError(f"job {connection.job} has no node {node!r}: it has {', '.join(sorted(manifests))}")
    entries = connection.write_ssh_entries(manifests, edit_user_config=False)
    client = shutil.which("ssh")
    if client is None:
        raise UserError("OpenSSH client 'ssh' not found: install it (apt install openssh-client)")
    alias = next(e.alias for e in entries if e.node == node)
    # -F: our generated config (it includes every job's entries); OpenSSH would otherwise read the
    # passwd user's ~/.ssh/config, which may not include us yet.  exec: ssh's exit code (the remote
    # command's, or 255 for ssh's own failures) is ours.
    os.execv(client, [client, "-F", str(connection.paths.ssh_config), alias, *remote_command_line(command or [])])


def remote_command_line(command: list[str]) -> list[str]:
    """What ssh sends as the remote command: the words the user typed, each one kept whole.

    OpenSSH joins its arguments with spaces and the remote shell splits them again, so
    ``-- sh -c 'exit 7'`` would run ``sh -c exit 7`` (exit code 0).  Several words are quoted one
    by one (``shlex.join``) so the remote side sees exactly those words; a single word is a command
    line, as with plain ``ssh host 'ls | head'``, so pipes and ``$VARS`` in it work remotely.
    """
    if len(command) <= 1:
        return list(command)
    return [shlex.join(command)]
