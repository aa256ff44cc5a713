"""``remote-debug ssh-config [JOB] [--dry-run] [--remove] [--json]``: the ssh Host entries of a job."""

from __future__ import annotations

from typing import Annotated

import typer

from remote_debug.cli.application import app, flag, positive_seconds
from remote_debug.cli.output import console, print_json, wait_printer
from remote_debug.contract import spec
from remote_debug.laptop.connection import ssh_config as ssh_files
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.wire import documents
from remote_debug.laptop.wire.events import plural


def _remove(paths: StatePaths, job: str | None, dry_run: bool, as_json: bool) -> None:
    """``--remove [JOB]``: one job's entries, or all of ours and the Include line in ~/.ssh/config."""
    would = "would remove" if dry_run else "removed"
    if job:
        entries = ssh_files.job_entries(paths, spec.check_job_name(job))
        if entries.empty:
            others = ssh_files.jobs_with_entries(paths)
            more = ", ..." if len(others) > 5 else ""
            have = f"jobs with entries: {', '.join(others[:5])}{more}" if others else "there are none"
            raise UserError(
                f"job {job} has no ssh entries to remove ({have}); 'remote-debug ssh-config --remove' without a job "
                "removes all of ours"
            )
        if not dry_run:
            ssh_files.remove_job_entries(paths, job)
        if as_json:
            print_json(
                documents.SshJobEntriesRemoved(
                    removed_job=job, aliases=entries.aliases, known_hosts=entries.known_hosts, dry_run=dry_run
                ).to_json()
            )
        else:
            console.print(f"{would} the ssh entries of job {job}: {_entries_phrase(entries)}", markup=False)
        return
    change = ssh_files.remove_include(paths, dry_run=dry_run)
    if dry_run:
        removed = [ssh_files.job_entries(paths, name) for name in ssh_files.jobs_with_entries(paths)]
    else:
        removed = ssh_files.remove_all_entries(paths)
    if as_json:
        print_json(
            documents.SshEntriesRemoved(
                removed_jobs=[
                    documents.SshEntries(job=e.job, aliases=e.aliases, known_hosts=e.known_hosts) for e in removed
                ],
                restored=str(change.path),
                changed=change.changed,
                dry_run=dry_run,
                user_config_diff=change.diff,
            ).to_json()
        )
        return
    if removed:
        jobs = ", ".join(e.job for e in removed)
        console.print(f"{would} the ssh entries of {plural(len(removed), 'job')} ({jobs})", markup=False)
    else:
        console.print("there are no ssh entries of jobs to remove", markup=False)
    if dry_run and change.changed:
        console.print(f"would take our Include line out of {change.path}:", markup=False)
        console.print(change.diff, markup=False, end="")
    elif change.changed:
        console.print(f"restored {change.path}: our Include line is gone, the rest is as it was", markup=False)
    else:
        console.print(f"{change.path} has no Include line of ours: left as it was", markup=False)


def _entries_phrase(entries: ssh_files.JobEntries) -> str:
    hosts = plural(len(entries.aliases), "Host entry", "Host entries")
    names = f" ({', '.join(entries.aliases)})" if entries.aliases else ""
    return f"{hosts}{names} and {plural(entries.known_hosts, 'pinned host key')}"


@app.command("ssh-config")
def ssh_config(
    job: Annotated[str | None, typer.Argument(help="Job name (omit with --remove to undo everything).")] = None,
    dry_run: Annotated[bool, flag("--dry-run", help="Show what would change in ~/.ssh/config; write nothing.")] = False,
    remove: Annotated[
        bool,
        flag("--remove", help="Remove the job's entries; without JOB, every job's and our line in ~/.ssh/config."),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="How long to wait for the job's nodes to publish sshd.",
            callback=positive_seconds,
        ),
    ] = 60.0,
    as_json: Annotated[bool, flag("--json", help="Print JSON (the aliases).")] = False,
) -> None:
    """Write (or remove) ssh Host entries <node>.<job> with pinned host keys and the proxy."""
    paths = StatePaths.default()
    if remove:
        _remove(paths, job, dry_run, as_json)
        return
    if not job:
        raise UserError("give a JOB (or --remove): remote-debug ssh-config JOB")
    connection = JobConnection.open(job, paths, emit=wait_printer())
    connection.require_running()
    manifests = connection.wait_for_manifests(timeout)
    if dry_run:
        entries = connection.host_entries(manifests)
        change = ssh_files.ensure_include(paths, dry_run=True)
        rendered = ssh_files.render_job_config(entries)
        if as_json:
            print_json(
                documents.SshConfigPreview(
                    aliases=[e.alias for e in entries], user_config_diff=change.diff, job_config=rendered
                ).to_json()
            )
        else:
            console.print(change.diff or f"{change.path}: already includes {paths.ssh_config}", markup=False)
            console.print(rendered, markup=False)
        return
    entries = connection.write_ssh_entries(manifests, edit_user_config=False)
    change = ssh_files.ensure_include(paths)
    if as_json:
        print_json(
            documents.SshConfigWritten(
                aliases=[e.alias for e in entries],
                config=str(paths.ssh_config),
                user_config=str(change.path),
                user_config_changed=change.changed,
            ).to_json()
        )
        return
    for e in entries:
        console.print(f"ssh {e.alias}", markup=False)
