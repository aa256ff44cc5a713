"""``remote-debug ssh-config [JOB] [--dry-run] [--remove] [--json]``: the ssh Host entries of a job."""

from __future__ import annotations

from typing import Annotated

import typer

from remote_debug.cli.app import app, flag, positive_seconds
from remote_debug.cli.output import console, print_json
from remote_debug.local import ssh_config as ssh_files
from remote_debug.local.connection import JobConnection
from remote_debug.local.errors import UserError
from remote_debug.local.paths import StatePaths


@app.command("ssh-config")
def ssh_config(
    job: Annotated[str | None, typer.Argument(help="Job name (omit with --remove to undo everything).")] = None,
    dry_run: Annotated[bool, flag("--dry-run", help="Show what would change in ~/.ssh/config; write nothing.")] = False,
    remove: Annotated[
        bool, flag("--remove", help="Remove our entries; without JOB also restore ~/.ssh/config.")
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", help="Seconds to wait for the job's nodes to publish sshd.", callback=positive_seconds
        ),
    ] = 60.0,
    as_json: Annotated[bool, flag("--json", help="Print JSON (the aliases).")] = False,
) -> None:
    """Write (or remove) ssh Host entries <node>.<job> with pinned host keys and the proxy."""
    paths = StatePaths.default()
    if remove:
        if job:
            ssh_files.remove_job_entries(paths, job)
            result: dict[str, object] = {"removed_job": job}
        else:
            change = ssh_files.remove_include(paths)
            result = {"restored": str(change.path), "changed": change.changed}
        if as_json:
            print_json(result)
        else:
            console.print(f"removed: {result}")
        return
    if not job:
        raise UserError("give a JOB (or --remove): remote-debug ssh-config JOB")
    connection = JobConnection.open(job, paths)
    connection.require_running()
    manifests = connection.wait_for_manifests(timeout)
    if dry_run:
        entries = connection.host_entries(manifests)
        change = ssh_files.ensure_include(paths, dry_run=True)
        rendered = ssh_files.render_job_config(entries)
        if as_json:
            print_json(
                {
                    "aliases": [e.alias for e in entries],
                    "dry_run": True,
                    "user_config_diff": change.diff,
                    "job_config": rendered,
                }
            )
        else:
            console.print(change.diff or f"{change.path}: already includes {paths.ssh_config}", markup=False)
            console.print(rendered, markup=False)
        return
    entries = connection.write_ssh_entries(manifests, edit_user_config=False)
    change = ssh_files.ensure_include(paths)
    if as_json:
        print_json(
            {
                "aliases": [e.alias for e in entries],
                "config": str(paths.ssh_config),
                "user_config": str(change.path),
                "user_config_changed": change.changed,
            }
        )
        return
    for e in entries:
        console.print(f"ssh {e.alias}", markup=False)
