"""``remote-debug demo``: a SageMaker-shaped DDP job on this machine, attached in every rank."""

from __future__ import annotations

from typing import Annotated

import typer

from remote_debug.cli.application import MAX_PORT, PycharmBuild, app, flag
from remote_debug.cli.output import console, event_printer, print_json
from remote_debug.contract import spec
from remote_debug.laptop.attach.demo import run_demo
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.pycharm import PyCharmOptions
from remote_debug.laptop.machine.backend import MAX_NODES, MAX_NPROC_PER_NODE
from remote_debug.laptop.wire.events import ignore


@app.command()
def demo(
    headless: Annotated[bool, flag("--headless", help="Use the built-in DAP client instead of VS Code.")] = False,
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=MAX_NODES, help="Nodes (algo-1..N).")] = 1,
    nproc_per_node: Annotated[
        int, typer.Option("--nproc-per-node", min=1, max=MAX_NPROC_PER_NODE, help="Ranks per node.")
    ] = 2,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait",
            min=0,
            max=spec.MAX_WAIT_SECONDS,
            metavar="SECONDS",
            help="How long ranks wait for a debugger (default: 120 with --headless, else 600).",
        ),
    ] = None,
    as_json: Annotated[bool, flag("--json", help="Print the result as JSON (events are not printed).")] = False,
    ide: Annotated[
        Editor,
        typer.Option("--ide", help="The IDE you debug from (headless: the built-in DAP client or pydevd server)."),
    ] = Editor.VSCODE,
    pycharm_port: Annotated[
        int, typer.Option("--pycharm-port", min=0, max=MAX_PORT, help="--ide pycharm: port of PyCharm's debug server.")
    ] = 0,
    pycharm_build: PycharmBuild = None,
) -> None:
    """Run the example DDP job locally and stop in every rank."""
    wait_seconds = wait if wait is not None else (120.0 if headless else 600.0)
    quiet = as_json
    emit = ignore if quiet else event_printer(False)
    if not headless and not as_json and ide == Editor.VSCODE:
        console.print(
            "Launching the demo job; when 'ready' appears, attach from VS Code:\n"
            "  1. open the workspace printed below (File > Open Folder),\n"
            "  2. set a breakpoint in train_ddp.py (ranks wait for a debugger before they start),\n"
            "  3. Run and Debug > pick 'remote-debug: <job> all ranks' > Start: every rank stops there.",
            markup=False,
        )
    result = run_demo(
        nodes=nodes,
        nproc_per_node=nproc_per_node,
        headless=headless,
        wait_seconds=wait_seconds,
        emit=emit,
        ide=ide,
        pycharm=PyCharmOptions(port=pycharm_port, build=pycharm_build),
    )
    if as_json:
        print_json(result.to_json())
    else:
        for r in result.attach.reports:
            first = r.stops[0] if r.stops else None
            where = f"{first.file}:{first.line} {first.variables}" if first else f"no stop ({r.error})"
            console.print(f"rank {r.rank} ({r.node}): {where}", markup=False)
            for s in r.stops[1:]:
                console.print(f"   after step -> line {s.line} {s.variables}", markup=False)
        console.print(
            f"job {result.job}: {result.attach.job.status}, exit code {result.exit_code}, "
            f"{result.seconds:.1f} s; workspace {result.workspace}",
            markup=False,
        )
    ok = result.exit_code == 0 and (
        not headless
        or (len(result.attach.reports) == nodes * nproc_per_node and all(r.stops for r in result.attach.reports))
    )
    raise typer.Exit(0 if ok else 1)
