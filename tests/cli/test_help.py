"""``--help`` of every command renders, and shows bool options as flags (``--json``, not ``--json <bool>``)."""

from __future__ import annotations

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from remote_debug.cli import app


def cli_group() -> TyperGroup:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    return group


COMMANDS = sorted(cli_group().commands)


def test_every_command_is_here() -> None:
    assert set(COMMANDS) >= {"attach", "demo", "doctor", "jobs", "launch", "proxy", "ssh", "ssh-config", "stop"}


@pytest.mark.parametrize("argv", [["--help"], ["-h"], *([name, "--help"] for name in COMMANDS)], ids=" ".join)
def test_help_renders_without_bool_metavars(argv: list[str]) -> None:
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.output
    assert "Usage: remote-debug" in result.output
    assert "<bool>" not in result.output, result.output
    assert "Traceback" not in result.output


def test_every_bool_option_is_a_flag() -> None:
    """Each bool option is declared with ``cli.app.flag`` (-h/--help too: ``cli.app.Command``)."""
    group = cli_group()
    ctx = typer.Context(group)
    flags = 0
    for name, command in group.commands.items():
        for param in command.get_params(ctx):
            if getattr(param, "is_flag", False):
                assert param.metavar == "", (name, param.opts)
                flags += 1
    assert flags > len(group.commands)  # every command has --help, most --json
