"""``remote-debug launch --local [...] -- CMD...``: start a SageMaker-shaped job on this machine."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from remote_debug import spec
from remote_debug.cli.app import app
from remote_debug.cli.output import console, print_json
from remote_debug.local.backends import MachineBackend
from remote_debug.local.backends.machine import LaunchRequest
from remote_debug.local.errors import UserError
from remote_debug.local.pycharm import check_local_pydevd, choose_build


def default_job_name() -> str:
    return time.strftime("local-%Y%m%d-%H%M%S")


def parse_hyperparameters(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"bad hyperparameter {item!r}: use KEY=VALUE")
        out[key] = value
    return out


@app.command(context_settings={"allow_interspersed_args": False})
def launch(
    command: list[str] = typer.Argument(None, help="The training command, after '--'."),
    local: bool = typer.Option(False, "--local", help="Run the job on this machine (SageMaker jobs: a later release)."),
    name: str = typer.Option(None, "--name", help="Job name (default: local-<timestamp>)."),
    nodes: int = typer.Option(1, "--nodes", help="Number of nodes (algo-1..N)."),
    nproc_per_node: int = typer.Option(1, "--nproc-per-node", help="Ranks per node (torchrun when > 1)."),
    wait: float = typer.Option(0.0, "--wait", help="Seconds each rank waits for a debugger at start (0 = never)."),
    ide: str = typer.Option("vscode", "--ide", help="vscode or pycharm."),
    ranks: str = typer.Option("all", "--ranks", help="Ranks that get a debugger: all, or e.g. 0,2."),
    source_dir: Path = typer.Option(None, "--source-dir", help="Code to copy into the job (default: current dir)."),
    debug_port: int = typer.Option(0, "--debug-port", help="Listener port base (rank r uses base+r); 0 = free ports."),
    sshd_port: int = typer.Option(0, "--sshd-port", help="sshd port in the job; 0 = a free port."),
    hyperparameter: list[str] = typer.Option([], "--hyperparameter", "-H", help="KEY=VALUE, repeatable."),
    hold_on_failure: float = typer.Option(
        0.0,
        "--hold-on-failure",
        metavar="SECONDS",
        help="A rank that dies of an uncaught exception stays up to SECONDS, stopped at the exception for a "
        "debugger (attach to inspect it), then exits with the same failure (0 = exit at once).",
    ),
    no_netns: bool = typer.Option(
        False,
        "--no-netns",
        help="Multi-node: keep nodes on this machine's loopback (default as root: a network namespace per node).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the job as JSON."),
    pycharm_build: str = typer.Option(
        None, "--pycharm-build", help="--ide pycharm: your PyCharm build (default: detected); 'any' skips the check."
    ),
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
        wait_seconds=wait,
        ide=ide,
        ranks=spec.parse_ranks(ranks),
        port_base=debug_port,
        sshd_port=sshd_port,
        hyperparameters=parse_hyperparameters(hyperparameter),
        netns=not no_netns,
        hold_on_failure=hold_on_failure,
    )
    spec.check_port(debug_port, "debug port")
    spec.check_port(sshd_port, "sshd port")
    if ide not in spec.IDES:
        raise UserError(f"unknown IDE {ide!r}: use one of {', '.join(spec.IDES)}")
    if pycharm_build and ide != "pycharm":
        raise UserError("--pycharm-build needs --ide pycharm")
    if ide == "pycharm":
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
    if info.extra.get("isolation") == "netns":
        console.print("nodes run in their own network namespaces: reachable only through remote-debug's relay")
    console.print(f"attach with:  remote-debug attach {info.name}" + (" --ide pycharm" if ide == "pycharm" else ""))
