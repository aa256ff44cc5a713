"""``remote-debug adopt --pid PID`` / ``adopt JOB``: make a running job that was started without remote_debug
debuggable (a job of this machine / a SageMaker training job)."""

from __future__ import annotations

from typing import Annotated

import typer

from remote_debug.cli.application import app, flag
from remote_debug.cli.output import console, print_json, progress
from remote_debug.laptop.core.errors import UserError


@app.command()
def adopt(
    job: Annotated[
        str | None,
        typer.Argument(
            help="A running SageMaker training job (name or ARN) to adopt through SageMaker's remote debugging (SSM).",
            show_default=False,
        ),
    ] = None,
    pid: Annotated[
        list[int] | None,
        typer.Option(
            "--pid",
            min=1,
            help="A torchrun/mpirun launcher or a single Python process of this machine; one --pid per node.",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Job name (default: adopted-PID-HHMMSS).")] = None,
    list_them: Annotated[bool, flag("--list", help="List the running Python jobs that can be adopted.")] = False,
    as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False,
) -> None:
    """Adopt a running job started without remote-debug: inject the rank agent into every rank.

    Afterwards the job is listed by 'jobs' and attach, stacks, ssh and stop work on it as on a launched
    job.  Needs the same user as the job and the right to ptrace it; Python 3.10-3.13 ranks are entered with gdb
    where there is one, else with remote-debug's own ptrace call (x86-64), 3.14+ with sys.remote_exec.
    JOB: a SageMaker training job, reached through SageMaker's remote debugging (turned on if off).
    """
    if job is not None:
        if pid or name or list_them:
            raise UserError("adopt JOB takes no --pid, --name or --list: a SageMaker job keeps its own name")
        _adopt_sagemaker(job, as_json)
        return
    from remote_debug.laptop.adopt.local_job import adopt_local, adopted_jobs, plan_nodes
    from remote_debug.laptop.core.paths import StatePaths

    paths = StatePaths.default()
    if list_them:
        if pid:
            raise UserError("--list takes no --pid: use one or the other")
        from remote_debug.laptop.adopt.candidates import list_candidates

        found = list_candidates(adopted_jobs(paths))
        if as_json:
            print_json([c.to_dict() for c in found])
            return
        if not found:
            console.print("no running Python jobs of yours found", markup=False)
        for c in found:
            what = f"{c.ranks} rank{'s' if c.ranks != 1 else ''}" if c.ranks else c.kind
            state = "adoptable" if c.adoptable else f"not adoptable: {c.reason}"
            console.print(
                f"{c.pid:>8}  {what:<9} python {c.python or '?':<5} {state}\n          {c.command}", markup=False
            )
        return
    if not pid:
        raise UserError(
            "give the job's process: remote-debug adopt --pid PID (see remote-debug adopt --list), "
            "or a SageMaker job: remote-debug adopt JOB"
        )
    # every rank checked before a word of progress: a refusal is the one line the user sees
    plans = None if set(pid) & set(adopted_jobs(paths)) else plan_nodes(pid, paths)
    with progress(f"adopting pid {', '.join(map(str, pid))}", enabled=not as_json):
        outcome = adopt_local(pid, name, paths=paths, plans=plans)
    if as_json:
        print_json(outcome.to_dict())
        return
    if outcome.already:
        console.print(f"pid {pid[0]} was adopted before: job {outcome.job}", markup=False)
    else:
        console.print(f"adopted as job {outcome.job}", markup=False)
    for r in outcome.ranks:
        note = f" ({r.note})" if r.note else ""
        console.print(f"  rank {r.rank}  pid {r.pid}  {r.node}  {r.state}{note}", markup=False)
    console.print(f"next: remote-debug attach {outcome.job}", markup=False)


def _adopt_sagemaker(job: str, as_json: bool) -> None:
    from remote_debug.laptop.adopt.sagemaker_job import adopt_sagemaker
    from remote_debug.laptop.aws import clients as aws
    from remote_debug.laptop.aws.enable.owner import resolve_owner
    from remote_debug.laptop.aws.ssm_shell import ShellSession

    name, arn_region = aws.parse_training_job(job)
    region, source = aws.resolve_region()
    if arn_region and source != "--region":  # the ARN names the job's region; --region still wins
        region = arn_region
    if not region:
        raise UserError(aws.NO_REGION)
    profile = aws.profile()
    sagemaker = aws.client("sagemaker", profile_name=profile, region=region)
    ssm_client = aws.client("ssm", profile_name=profile, region=region)
    owner = resolve_owner(None, aws.session(profile, region))  # the owner tag an untagged job gets

    def open_shell(node: str) -> ShellSession:
        shell = ShellSession.for_node(ssm_client, name, node, profile=profile or "")
        shell.start()
        return shell

    def say(line: str) -> None:
        if not as_json:
            console.print(line, markup=False)

    with progress(f"adopting SageMaker job {name}", enabled=not as_json):
        outcome = adopt_sagemaker(name, sagemaker=sagemaker, open_shell=open_shell, owner=owner, say=say)
    if as_json:
        print_json(outcome.to_dict())
        return
    console.print(
        f"job {name} was adopted before" if outcome.already else f"adopted SageMaker job {name}", markup=False
    )
    for r in outcome.ranks:
        note = f" ({r.note})" if r.note else ""
        console.print(f"  rank {r.rank}  pid {r.pid}  {r.node}  {r.state}{note}", markup=False)
    console.print(f"next: remote-debug attach {name}", markup=False)
