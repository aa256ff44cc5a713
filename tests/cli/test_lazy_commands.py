"""``remote-debug CMD`` imports only CMD's module (``remote_debug.cli.load_commands``): ``stacks`` or
``jobs`` must not pay for every other command's imports.  The name -> module table is checked against
what the modules really register, so a new command cannot be missing from it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer

from remote_debug.cli import COMMAND_MODULES, app, invoked_command


def test_the_table_names_every_command_and_the_module_that_registers_it() -> None:
    group = typer.main.get_command(app)
    registered = {
        name: command.callback.__module__.rsplit(".", 1)[1]
        for name, command in group.commands.items()  # type: ignore[attr-defined]
    }
    assert registered == COMMAND_MODULES


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["stacks", "my-job"], "stacks"),
        (["--profile", "dev", "--region", "eu-west-1", "attach", "j"], "attach"),
        (["--region=eu-west-1", "ssh-config", "j"], "ssh-config"),
        (["--help"], None),
        ([], None),
    ],
)
def test_the_command_on_the_command_line(argv: list[str], command: str | None) -> None:
    assert invoked_command(argv) == command


# what one run of the CLI imported, with a given command line
PROBE = """
import json, sys
sys.argv = ["remote-debug", *json.loads(sys.argv[1])]
from remote_debug.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _run(*argv: str) -> tuple[int, set[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True, timeout=60)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return int(result["code"] or 0), set(result["modules"])


def test_stacks_imports_only_its_own_command() -> None:
    code, modules = _run("stacks", "--help")
    assert code == 0
    commands = {m.rsplit(".", 1)[1] for m in modules if m.startswith("remote_debug.cli.")} - {"application", "output"}
    assert commands == {"stacks"}
    assert "json5" not in modules  # launch.json editing: attach's, not stacks'


def test_an_unknown_command_still_lists_them_all() -> None:
    code, modules = _run("stcks")
    assert code == 2
    assert {f"remote_debug.cli.{m}" for m in COMMAND_MODULES.values()} <= modules
