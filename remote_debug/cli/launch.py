"""``remote-debug launch --local [...] -- CMD...``: start a SageMaker-shaped job on this machine."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from remote_debug.cli.application import MAX_PORT, PycharmBuild, app, flag
from remote_debug.cli.output import console, print_json
from remote_debug.contract import spec
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.jobinfo import Isolation, MachineJobDetails
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.pycharm_setup import check_local_pydevd, choose_build
from remote_debug.laptop.machine.backend import MAX_NODES, MAX_NPROC_PER_NODE, LaunchRequest
from remote_debug.laptop.platforms import MachineBackend


def default_job_name() -> str:
    return time.strftime("local-%Y%m%d-%H%M%S")


def parse_hyperparameters(items: Iterable[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"bad hyperparameter {item!r}: use KEY=VALUE")
        out[key] = value
    return out


@app.command(context_settings={"allow_interspersed_args": False})
def launch(
    command: Annotated[list[str] | None, typer.Argument(help="The training command, after '--'.")] = None,
    local: Annotated[
        bool, flag("--local", help="Run the job on this machine (SageMaker jobs: a later release).")
    ] = False,
    name: Annotated[str | None, typer.Option("--name", help="Job name (default: local-<timestamp>).")] = None,
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=MAX_NODES, help="Number of nodes (algo-1..N).")] = 1,
    nproc_per_node: Annotated[
        int,
        typer.Option(
            "--nproc-per-node",
            min=1,
            max=MAX_NPROC_PER_NODE,
            help="Ranks per node (torchrun when > 1; a single rank gets torchrun's RANK/WORLD_SIZE/MASTER_* too).",
        ),
    ] = 1,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=0,
            max=spec.MAX_WAIT_SECONDS,
            metavar="SECONDS",
            help="How long each rank waits for a debugger at start (0 = never).",
        ),
    ] = 0.0,
    ide: Annotated[Editor, typer.Option("--ide", help="The IDE you debug from.")] = Editor.VSCODE,
    ranks: Annotated[str, typer.Option("--ranks", help="Ranks that get a debugger: all, or e.g. 0,2.")] = "all",
    source_dir: Annotated[
        Path | None, typer.Option("--source-dir", help="Code to copy into the job (default: current dir).")
    ] = None,
    debug_port: Annotated[
        int,
        typer.Option(
            "--debug-port", min=0, max=MAX_PORT, help="Listener port base (rank r uses base+r); 0 = free ports."
        ),
    ] = 0,
    sshd_port: Annotated[
        int, typer.Option("--sshd-port", min=0, max=MAX_PORT, help="sshd port in the job; 0 = a free port.")
    ] = 0,
    hyperparameter: Annotated[
        list[str] | None, typer.Option("--hyperparameter", "-H", help="KEY=VALUE, repeatable.")
    ] = None,
    hold_on_failure: Annotated[
        float,
        typer.Option(
            "--hold-on-failure",
            min=0,
            max=spec.MAX_WAIT_SECONDS,
            metavar="SECONDS",
            help="A rank that dies of an uncaught exception stays up to SECONDS, stopped at the exception for a "
            "debugger (attach to inspect it), then exits with the same failure (0 = exit at once).",
        ),
    ] = 0.0,
    keep_alive: Annotated[
        float,
        typer.Option(
            "--keep-alive",
            min=0,
            max=spec.MAX_WAIT_SECONDS,
            metavar="SECONDS",
            help="Every node stays up SECONDS after the training command ends, success or failure (for sync and "
            "run; 'remote-debug release JOB' or 'stop JOB' ends it sooner); 0 = the job ends with the command.",
        ),
    ] = 0.0,
    no_netns: Annotated[
        bool,
        flag(
            "--no-netns",
            help="Multi-node: keep nodes on this machine's loopback (default as root: a network namespace per node).",
        ),
    ] = False,
    as_json: Annotated[bool, flag("--json", help="Print the job as JSON.")] = False,
    pycharm_build: PycharmBuild = None,
) -> None:
    """Start a training job with debugging enabled, in the background."""
    if not local:
        raise UserError("only --local jobs can be launched in this version: add --local")
    request = LaunchRequest(
        command=list(command or []),
        name=name or default_job_name(),
        source_dir=(source_dir or Path.cwd()).absolute(),
        nodes=nodes,
        nproc_per_node=nproc_per_node,
        options=spec.DebugOptions(
            ide=ide.debugger,  # the job runs what the editor needs; it never learns which editor
            ranks=spec.parse_ranks(ranks),
            port_base=debug_port,
            sshd_port=sshd_port,
            wait_seconds=wait,
            hold_on_failure=hold_on_failure,
            keep_alive=keep_alive,
        ),
        hyperparameters=parse_hyperparameters(hyperparameter),
        netns=not no_netns,
    )
    if pycharm_build and ide != Editor.PYCHARM:
        raise UserError("--pycharm-build needs --ide pycharm")
    if ide == Editor.PYCHARM:
        # A local job runs in this interpreter: its pydevd-pycharm must match the user's PyCharm.
        check_local_pydevd(choose_build(pycharm_build))
        if wait <= 0 and not as_json:
            console.print(
                "note: with --ide pycharm ranks connect to PyCharm only during --wait; with 0 they try once at start",
                markup=False,
            )
    info = MachineBackend().launch(request)
    if as_json:
        print_json(info.to_json())
        return
    console.print(f"launched job [bold]{info.name}[/] ({len(info.nodes)} node(s) x {info.nproc_per_node} rank(s))")
    machine = info.details_of(MachineJobDetails)
    if machine is not None and machine.isolation == Isolation.NETNS:
        console.print("nodes run in their own network namespaces: reachable only through remote-debug's relay")
    pycharm = " --ide pycharm" if ide == Editor.PYCHARM else ""
    console.print(f"attach with:  remote-debug attach {info.name}{pycharm}")
