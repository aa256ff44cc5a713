"""``remote-debug jobs``: list debuggable jobs."""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated

from rich.table import Table

from remote_debug.cli.application import app, flag
from remote_debug.cli.output import console, error_line, print_json
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.core.errors import AwsAccessError, UserError
from remote_debug.laptop.core.jobinfo import JobInfo
from remote_debug.laptop.platforms import all_backends
from remote_debug.laptop.wire.documents import ListingProblem, ListingProblemKind
from remote_debug.laptop.wire.events import plural

HEADERS = ("job", "backend", "status", "secondary", "nodes", "ranks per node", "created")


def _row(j: JobInfo) -> tuple[str, ...]:
    return (
        j.name,
        j.backend,
        j.status,
        j.secondary_status,
        str(len(j.nodes)),
        str(j.nproc_per_node or "?"),  # SageMaker: unknown until a rank reports
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.created)),
    )


def _table(rows: list[tuple[str, ...]]) -> Table:
    # The job name is what users copy into every other command: it never wraps and is never cut.  The
    # other columns wrap between words, never inside one, so no value loses characters to an ellipsis;
    # :func:`jobs` prints sentences instead when even that does not fit.
    table = Table(box=None, header_style="bold underline", pad_edge=False)
    for i, header in enumerate(HEADERS):
        cells = [header, *(row[i] for row in rows)]
        longest_word = max(len(word) for cell in cells for word in cell.split() or [""])
        if i == 0:
            table.add_column(header, no_wrap=True, min_width=longest_word)
        else:
            table.add_column(header, min_width=longest_word, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _narrowest(table: Table) -> int:
    """The width the table needs to show every word whole (no borders; 1 blank each side of a column
    but the outer ones)."""
    widths = [column.min_width or 0 for column in table.columns]
    return sum(widths) + 2 * (len(widths) - 1)


def _line(j: JobInfo) -> str:
    """One job as a sentence: for terminals too narrow for the table."""
    name, backend, status, secondary, nodes, ranks, created = _row(j)
    detail = f" ({secondary})" if secondary and secondary != status else ""
    ranks_phrase = "ranks not known yet" if ranks == "?" else plural(int(ranks), "rank") + " each"
    return f"{name}: {backend}, {status}{detail}, {plural(int(nodes), 'node')} x {ranks_phrase}, created {created}"


def unlisted(backend: str, exc: UserError) -> ListingProblem:
    """What ``jobs --json`` prints on stderr for a backend it could not list (one JSON object a line)."""
    error = exc if isinstance(exc, AwsAccessError) else None
    return ListingProblem(
        unlisted=backend,
        problem=_problem_kind(error.problem if error else None),
        message=" ".join(str(exc).split()),
        fix=error.fix if error else None,
        profile=error.profile if error else aws.profile(),
        region=error.region if error else aws.settings().region,
    )


def _problem_kind(problem: str | None) -> ListingProblemKind:
    try:
        return ListingProblemKind(problem)
    except ValueError:  # not one of access.PROBLEMS (a test pins them to the kinds): still a listing problem
        return ListingProblemKind.ERROR


@app.command()
def jobs(as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False) -> None:
    """List debuggable jobs, local and (when AWS is configured) SageMaker, with their status."""
    found = []
    for backend in all_backends():
        try:
            found += backend.list_jobs()
        except UserError as exc:  # AWS unreachable or not allowed: still list the local jobs
            if not backend.capabilities.remote:  # this machine's own jobs: a real error
                raise
            if as_json:  # for a program (the extension's warning): why, in one word, and the fix
                sys.stderr.write(json.dumps(unlisted(backend.name, exc).to_json()) + "\n")
            else:
                error_line(f"{backend.name} jobs not listed: {exc}")
    if as_json:
        print_json([j.to_json() for j in found])
        return
    if not found:
        console.print("no jobs yet: start one with  remote-debug launch --local -- python train.py")
        return
    table = _table([_row(j) for j in found])
    if _narrowest(table) <= console.width:
        console.print(table)
    else:
        for j in found:
            console.print(_line(j), markup=False, highlight=False)
    for j in found:  # what the status alone does not say: a rank held for a post-mortem, and for how long
        for note in j.notes:
            console.print(f"{j.name}: {note}", markup=False, highlight=False)
