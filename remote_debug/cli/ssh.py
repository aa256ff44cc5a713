"""``remote-debug ssh JOB [--node algo-2] [-- CMD]``: the real OpenSSH client with the generated entries."""

from __future__ import annotations

import os
import shutil

import typer

from remote_debug.cli.app import app
from remote_debug.local import ssh_config as ssh_files
from remote_debug.local.attach import host_entries, require_running, wait_for_manifests
from remote_debug.local.backends import backend_for
from remote_debug.local.errors import UserError
from remote_debug.local.paths import StatePaths


@app.command(context_settings={"allow_interspersed_args": False})
def ssh(
    job: str = typer.Argument(..., help="Job name."),
    command: list[str] = typer.Argument(None, help="Remote command, after '--' (default: a shell)."),
    node: str = typer.Option("algo-1", "--node", help="Node to log in to."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for the node to publish sshd."),
) -> None:
    """Log in to a job's node (or run a command there) over the job's transport."""
    paths = StatePaths.default()
    backend = backend_for(job, paths)
    require_running(backend, job)
    manifests = wait_for_manifests(backend, job, timeout, lambda _event: None)
    if node not in manifests:
        raise UserError(f"job {job} has no node {node!r}: it has {', '.join(sorted(manifests))}")
    entries = host_entries(job, manifests, paths)
    ssh_files.write_job_entries(paths, job, entries)
    client = shutil.which("ssh")
    if client is None:
        raise UserError("OpenSSH client 'ssh' not found: install it (apt install openssh-client)")
    alias = next(e.alias for e in entries if e.node == node)
    # -F: our generated config (it includes every job's entries); OpenSSH would otherwise read the
    # passwd user's ~/.ssh/config, which may not include us yet.
    os.execv(client, [client, "-F", str(paths.ssh_config), alias, *(command or [])])
