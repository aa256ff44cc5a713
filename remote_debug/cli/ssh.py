"""``remote-debug ssh JOB [--node algo-2] [-- CMD]``: the real OpenSSH client with the generated entries."""

from __future__ import annotations

import os
import shutil
from typing import Annotated

import typer

from remote_debug.cli.app import app, positive_seconds
from remote_debug.local.connection import JobConnection
from remote_debug.local.errors import UserError


# Options may follow the job name (`ssh JOB --node algo-2 -- CMD`); the remote command comes after
# `--`, so its own options (`-- ls -la`) are never taken for ours.
@app.command()
def ssh(
    job: Annotated[str, typer.Argument(help="Job name.")],
    command: Annotated[list[str] | None, typer.Argument(help="Remote command, after '--' (default: a shell).")] = None,
    node: Annotated[str, typer.Option("--node", help="Node to log in to.")] = "algo-1",
    timeout: Annotated[
        float,
        typer.Option("--timeout", help="Seconds to wait for the node to publish sshd.", callback=positive_seconds),
    ] = 60.0,
) -> None:
    """Log in to a job's node (or run a command there) over the job's transport."""
    connection = JobConnection.open(job)
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
    # passwd user's ~/.ssh/config, which may not include us yet.
    os.execv(client, [client, "-F", str(connection.paths.ssh_config), alias, *(command or [])])
