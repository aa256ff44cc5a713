"""``remote-debug prune [--dry-run] [--older-than DAYS] [--json]``: remove what we wrote for ended jobs."""

from __future__ import annotations

from typing import Annotated

import typer

from remote_debug.cli.application import app, flag
from remote_debug.cli.output import console, err_console, print_json
from remote_debug.laptop.prune import JobOutcome, Pruner
from remote_debug.laptop.wire.events import plural

MAX_DAYS = 3650.0


def _sentence(o: JobOutcome, dry_run: bool) -> str:
    parts = o.leftovers.parts()
    what = ", ".join(parts) if parts else "nothing left"
    if o.error:
        return f"could not prune job {o.job}: {o.error}; the rest of it was left in place, run prune again"
    if o.kept:
        return f"kept job {o.job}: {o.kept}"
    verb = "would remove" if dry_run else "removed"
    why = f"{o.status}" if o.status else "no job of that name is known, and attach writes these again"
    return f"{verb} job {o.job} ({why}): {what}"


@app.command()
def prune(
    dry_run: Annotated[bool, flag("--dry-run", help="Show what would be removed; remove nothing.")] = False,
    older_than: Annotated[
        float | None,
        typer.Option(
            "--older-than",
            min=0,
            max=MAX_DAYS,
            metavar="DAYS",
            help="Only jobs that ended at least DAYS days ago (default: every ended job).",
        ),
    ] = None,
    as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False,
) -> None:
    """Remove what remote-debug wrote for ended jobs: job dirs, keys, ssh entries, launch.json configs.

    Running jobs, and jobs whose end no backend can confirm, are kept (their key and job dir stay).
    Your own ssh config and launch.json entries are left byte for byte as they are.
    """
    result = Pruner().run(dry_run=dry_run, older_than_days=older_than)
    if as_json:
        print_json(result.to_json())
    else:
        for o in result.outcomes:
            (err_console if o.error else console).print(_sentence(o, dry_run), markup=False, highlight=False)
        for path, error in result.unreadable.items():
            err_console.print(
                f"could not read {path}, so entries of pruned jobs may remain there: {error}",
                markup=False,
                highlight=False,
            )
        pruned = [o for o in result.outcomes if o.pruned]
        if not result.outcomes:
            console.print("nothing to prune: remote-debug has no files of any job", markup=False)
        elif not pruned:
            console.print("nothing to prune: every job above is kept", markup=False)
        elif dry_run:
            console.print(
                f"nothing removed (--dry-run): 'remote-debug prune' would remove {plural(len(pruned), 'job')}",
                markup=False,
            )
    if result.failed:
        raise typer.Exit(1)
