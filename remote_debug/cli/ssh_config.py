"""``remote-debug ssh-config [JOB] [--dry-run] [--remove] [--json]``: the ssh Host entries of a job."""

from __future__ import annotations

import typer

from remote_debug.cli.app import app
from remote_debug.cli.attach import check_seconds
from remote_debug.cli.output import console, print_json
from remote_debug.local import ssh_config as ssh_files
from remote_debug.local.attach import host_entries, require_running, wait_for_manifests
from remote_debug.local.backends import backend_for
from remote_debug.local.errors import UserError
from remote_debug.local.paths import StatePaths


@app.command("ssh-config")
def ssh_config(
    job: str = typer.Argument(None, help="Job name (omit with --remove to undo everything)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would change in ~/.ssh/config; write nothing."),
    remove: bool = typer.Option(False, "--remove", help="Remove our entries; without JOB also restore ~/.ssh/config."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for the job's nodes to publish sshd."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (the aliases)."),
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
    check_seconds(timeout, "--timeout")
    backend = backend_for(job, paths)
    require_running(backend, job)
    manifests = wait_for_manifests(backend, job, timeout, lambda _event: None)
    entries = host_entries(job, manifests, paths)
    if dry_run:
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
    ssh_files.write_job_entries(paths, job, entries)
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
