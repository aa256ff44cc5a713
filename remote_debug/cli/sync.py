"""``remote-debug sync JOB``: the workspace into every node's code dir, incrementally (``--watch``: on every save)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from remote_debug.cli.application import app, flag, positive_seconds
from remote_debug.cli.output import print_json
from remote_debug.laptop.core.errors import EXIT_INTERRUPTED
from remote_debug.laptop.iterate.sync import Syncer, SyncMethod
from remote_debug.laptop.iterate.sync_files import FileList
from remote_debug.laptop.wire.event_text import synced_line, with_text
from remote_debug.laptop.wire.events import Synced, plural


def _note(message: str) -> None:
    typer.echo(f"remote-debug: {message}", err=True)


# typer keeps a docstring's line breaks: one string per paragraph
SYNC_HELP = (
    "Copy your workspace into the code dir of every node of a running job.\n\n"
    "Only changed files move (size or modification time). .gitignore and .remote-debugignore files (git's "
    "rules, at any depth) and --exclude patterns are honoured, .git is never sent, and a symlink is sent as "
    "what it points to unless it leads out of the workspace (then it is skipped). A file is replaced whole: "
    "a rank importing mid-sync never sees half of it.\n\n"
    "Nothing on the nodes is deleted: files you removed here stay there."
)


@app.command(help=SYNC_HELP)
def sync(
    job: Annotated[str, typer.Argument(help="Job name (or SageMaker training-job ARN).")],
    source: Annotated[
        Path | None,
        typer.Option(
            "--source",
            metavar="DIR",
            help="Folder to copy (default: the folder the job was launched from if it still exists, else the "
            "current folder).",
        ),
    ] = None,
    node: Annotated[
        list[str] | None,
        typer.Option("--node", metavar="NODE", help="Only this node; repeat for more (default: every node)."),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            metavar="PATTERN",
            help="Also skip what this .gitignore-style pattern matches (relative to the source); repeatable.",
        ),
    ] = None,
    method: Annotated[
        SyncMethod,
        typer.Option(
            "--method",
            help="rsync over the job's ssh entries, or sftp over its SSH connection (auto: rsync when this "
            "machine and the node both have it).",
        ),
    ] = SyncMethod.AUTO,
    watch: Annotated[
        bool, flag("--watch", help="After the first sync, sync again on every change until Ctrl-C.")
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="How long to wait for the nodes to publish sshd.",
            callback=positive_seconds,
        ),
    ] = 60.0,
    as_json: Annotated[bool, flag("--json", help="Print each sync as a JSON line (the 'synced' event).")] = False,
) -> None:
    """Copy your workspace into the code dir of every node of a running job (see SYNC_HELP)."""
    shown_links: list[str] = []

    def show(event: Synced, files: FileList) -> None:
        nonlocal shown_links
        if files.leaving_links != shown_links:
            shown_links = list(files.leaving_links)
            if shown_links:
                names = ", ".join(shown_links[:5]) + (", ..." if len(shown_links) > 5 else "")
                _note(f"skipped {plural(len(shown_links), 'symlink')} pointing out of {files.root}: {names}")
        if as_json:
            print_json(with_text(event))
        else:
            typer.echo(synced_line(event))

    try:
        with Syncer.open(
            job, source=source, nodes=node or [], excludes=exclude or [], method=method, timeout=timeout
        ) as syncer:
            files = syncer.collect()
            show(syncer.sync(files), files)
            if watch:
                if not as_json:
                    _note(f"watching {syncer.source} for changes (Ctrl-C to stop)")
                syncer.watch(files, show, lambda message: _note(f"warning: {message}"))
    except KeyboardInterrupt:
        # one line, as attach's Ctrl-C; 130 so that a script running sync stops too
        _note("stopped watching: the job keeps running" if watch else "sync interrupted: no partial file was left")
        raise typer.Exit(EXIT_INTERRUPTED) from None
