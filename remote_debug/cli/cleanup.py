"""``remote-debug cleanup [--yes] [--days N] [--owner ID] [--json]``: the hybrid transport's leftovers.

Lists what hybrid jobs left in AWS that is no longer needed - SSM activations and managed instances
tagged with your owner id whose job has ended (or never started), activations of running jobs whose
nodes have all registered, and the ``ssm-activation.json`` / ``.txt`` objects of those jobs - and
deletes them with ``--yes``.  Without ``--yes`` nothing is deleted.  A running job's managed
instances are never touched.  See :mod:`remote_debug.laptop.aws.enable.leftovers`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

import typer

from remote_debug.cli.application import app, flag
from remote_debug.cli.output import console, err_console, print_json
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws.enable.leftovers import Leftovers
from remote_debug.laptop.aws.enable.owner import resolve_owner
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.wire.documents import CleanupReport, LeftoverItem

MAX_DAYS = 365


def open_session(region: str) -> Any:
    """The boto3 session (a seam: tests hand in one whose SSM client is a botocore Stubber's)."""
    return aws.session(region=region)


@app.command()
def cleanup(
    yes: Annotated[bool, flag("--yes", help="Delete what is listed (without it, nothing is deleted).")] = False,
    days: Annotated[
        int,
        typer.Option(
            "--days",
            min=1,
            max=MAX_DAYS,
            metavar="DAYS",
            help="Look for activation files of jobs of the last DAYS days.",
        ),
    ] = 7,
    owner: Annotated[
        str | None, typer.Option("--owner", help="Owner tag to clean up after (default: your aws:userid, as enable()).")
    ] = None,
    as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False,
) -> None:
    """List (and with --yes delete) the hybrid transport's leftovers: activations, managed instances, S3 files."""
    region, source = aws.resolve_region()
    if not region:
        raise UserError(aws.NO_REGION)
    session = open_session(region)
    who = resolve_owner(owner, session)
    finder = Leftovers(
        sagemaker=session.client("sagemaker"), ssm=session.client("ssm"), s3=session.client("s3"), owner=who
    )
    found = finder.find(timedelta(days=days))
    results = [(item, finder.delete(item) if yes else None) for item in found]
    failed = [error for _, error in results if error]
    if as_json:
        leftovers = [LeftoverItem(**item.to_json(), error=error) for item, error in results]
        print_json(CleanupReport(region=region, owner=who, days=days, deleted=yes, leftovers=leftovers).to_json())
    else:
        if not found:
            console.print(f"no leftovers of hybrid jobs of {who} in {region} (region from {source})", markup=False)
        for item, error in results:
            if error:
                err_console.print(f"could not delete: {error}", markup=False)
            else:
                console.print(f"{'deleted' if yes else 'leftover'}: {item}", markup=False)
        if found and not yes:
            console.print(
                f"nothing deleted: run 'remote-debug cleanup --yes' to delete these {len(found)}", markup=False
            )
    if failed:
        raise typer.Exit(1)
