"""``remote-debug demo``: a SageMaker-shaped DDP job on this machine, attached in every rank."""

from __future__ import annotations

import typer

from remote_debug.cli.app import app
from remote_debug.cli.output import console, event_printer, print_json
from remote_debug.local.demo import run_demo
from remote_debug.local.errors import UserError
from remote_debug.local.pycharm_session import PyCharmOptions


@app.command()
def demo(
    headless: bool = typer.Option(False, "--headless", help="Use the built-in DAP client instead of VS Code."),
    nodes: int = typer.Option(1, "--nodes", help="Nodes (algo-1..N)."),
    nproc_per_node: int = typer.Option(2, "--nproc-per-node", help="Ranks per node."),
    wait: float = typer.Option(
        None, "--wait", help="Seconds ranks wait for a debugger (default 120 headless, 600 IDE)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (events are not printed)."),
    ide: str = typer.Option(
        "vscode", "--ide", help="vscode or pycharm (headless: the built-in DAP client or pydevd server)."
    ),
    pycharm_port: int = typer.Option(0, "--pycharm-port", help="--ide pycharm: port of PyCharm's debug server."),
    pycharm_build: str = typer.Option(
        None, "--pycharm-build", help="--ide pycharm: your PyCharm build (default: detected); 'any' skips the check."
    ),
) -> None:
    """Run the example DDP job locally and stop in every rank."""
    if nodes < 1 or nproc_per_node < 1:
        raise UserError("--nodes and --nproc-per-node must be at least 1")
    if ide not in ("vscode", "pycharm"):
        raise UserError(f"unknown IDE {ide!r}: use vscode or pycharm")
    wait_seconds = wait if wait is not None else (120.0 if headless else 600.0)
    quiet = as_json
    emit = (lambda _e: None) if quiet else event_printer(False)
    if not headless and not as_json and ide == "vscode":
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
