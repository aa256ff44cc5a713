"""``remote-debug ranks ACTION JOB``: one action for every rank of a running attach (Continue All, Pause All, ...)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from remote_debug.cli.application import app, flag
from remote_debug.cli.output import console, print_json
from remote_debug.laptop.attach.group_socket import STATUS, ask
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.platforms import job_ref
from remote_debug.laptop.wire.documents import GroupReply
from remote_debug.laptop.wire.events import format_rank_list


class RanksAction(str, Enum):
    STATUS = STATUS
    CONTINUE = "continue"
    PAUSE = "pause"
    STEP = "step"
    DETACH = "detach"


@app.command()
def ranks(
    action: Annotated[RanksAction, typer.Argument(help="status, continue, pause, step (over) or detach.")],
    job: Annotated[str, typer.Argument(help="Job name (or SageMaker training-job ARN).")],
    as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False,
) -> None:
    """Act on every rank a running attach debugs, as one program: continue, pause, step over or detach them
    all (status: where each one is).

    Needs `remote-debug attach JOB` (or VS Code's Attach) running for the job; acts in every such attach.
    """
    name = job_ref(job).name
    reply = ask(StatePaths.default(), name, action.value)
    if as_json:
        print_json(reply.to_json())
        return
    _print(reply)


def _print(reply: GroupReply) -> None:
    if reply.action != STATUS:
        reached = format_rank_list(reply.ranks) if reply.ranks else "no rank (none was in a state it applies to)"
        console.print(f"{reply.action}: {reached}", markup=False)
    if not reply.status:
        console.print(f"no rank of job {reply.job} has a debugger attached yet", markup=False)
    for s in reply.status:
        why = " (paused by the group)" if s.by_group else f" ({s.reason})" if s.reason else ""
        console.print(f"rank {s.rank}: {s.phase}{why}", markup=False)
