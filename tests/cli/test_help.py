"""``--help`` of every command reads the same way: typer's layout (the proxy's too), bool options as flags
(``--json``, not ``--json <bool>``), and every duration in one unit written one way (``SECONDS``)."""

from __future__ import annotations

import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

from remote_debug.cli import app


def cli_group() -> TyperGroup:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    return group


COMMANDS = sorted(cli_group().commands)

# what argparse prints and typer never does
ARGPARSE_MARKS = ("usage: ", "positional arguments:", "show this help message", "[-h]", "options:\n")
# a duration's unit is its metavar, SECONDS (DAYS for the day-sized ones): never "120 s", "secs",
# "Seconds to wait", "minutes" or "ms" in the prose
OTHER_UNIT_SPELLINGS = re.compile(
    r"\b\d+(?:\.\d+)?\s?(?:s|ms|sec|secs|min|mins|h)\b|\b(?:[Ss]econds?|[Ss]ecs?|[Mm]inutes?|[Mm]illiseconds?|[Hh]ours?)\b"
)
DAY_OPTIONS = {"--days", "--older-than"}


def test_every_command_is_here() -> None:
    assert set(COMMANDS) >= {
        "attach",
        "demo",
        "doctor",
        "jobs",
        "launch",
        "proxy",
        "prune",
        "ssh",
        "ssh-config",
        "stop",
    }


@pytest.mark.parametrize("argv", [["--help"], ["-h"], *([name, "--help"] for name in COMMANDS)], ids=" ".join)
def test_help_renders_in_typer_style_without_bool_metavars(argv: list[str]) -> None:
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.output
    assert "Usage: remote-debug" in result.output
    assert "<bool>" not in result.output, result.output
    assert "Traceback" not in result.output
    for mark in ARGPARSE_MARKS:
        assert mark not in result.output, (mark, result.output)


def test_every_bool_option_is_a_flag() -> None:
    """Each bool option is declared with ``cli.application.flag`` (-h/--help too: ``cli.application.Command``)."""
    group = cli_group()
    ctx = typer.Context(group)
    flags = 0
    for name, command in group.commands.items():
        for param in command.get_params(ctx):
            if getattr(param, "is_flag", False) or _annotated(param, bool):
                assert param.metavar == "", (name, param.opts)
                flags += 1
    assert flags > len(group.commands)  # every command has --help, most --json


def _annotated(param: Any, kind: type) -> bool:
    """Whether the parameter's Python annotation is ``kind`` (or ``kind | None``)."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    return annotation is kind or kind in typing.get_args(annotation)


def _texts(command: Any) -> list[tuple[str, str]]:
    """(where, text) of every help text of a command: its own and each parameter's."""
    out = [("help", command.help or ""), ("short help", command.short_help or "")]
    out += [("/".join(p.opts), getattr(p, "help", None) or "") for p in command.params]
    return out


@pytest.mark.parametrize("name", COMMANDS)
def test_durations_are_in_seconds_written_one_way(name: str) -> None:
    command = cli_group().commands[name]
    for param in command.params:
        if not isinstance(param, TyperOption):
            continue
        if set(param.opts) & DAY_OPTIONS:
            assert param.metavar == "DAYS", (name, param.opts, param.metavar)
        elif _annotated(param, float):
            # every float option of ours is a duration (a wait, a timeout, a delay)
            assert param.metavar == "SECONDS", (name, param.opts, param.metavar)
    for where, text in _texts(command):
        found = OTHER_UNIT_SPELLINGS.search(text)
        assert found is None, f"remote-debug {name} {where}: {found.group(0)!r} in {text!r}: write SECONDS"


def _console(*args: str) -> subprocess.CompletedProcess[str]:
    # the installed entry point, as users and ssh run it: ``proxy`` goes through its fast path (no typer) first
    return subprocess.run(
        [str(Path(sys.executable).with_name("remote-debug")), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"},
    )


def test_proxy_help_and_usage_errors_are_typer_style_through_the_fast_path() -> None:
    for flag_name in ("--help", "-h"):
        shown = _console("proxy", flag_name)
        assert shown.returncode == 0, shown.stderr
        assert "Usage: remote-debug proxy [OPTIONS] {host} {port}" in shown.stdout, shown.stdout
        for mark in ARGPARSE_MARKS:
            assert mark not in shown.stdout, (mark, shown.stdout)
    for args in (["proxy"], ["proxy", "algo-1.job"], ["proxy", "algo-1.job", "port"], ["proxy", "--bogus", "a", "1"]):
        refused = _console(*args)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1, (args, refused.stderr)
        assert lines[0].startswith("remote-debug: error: ") and "(see 'remote-debug proxy -h')" in lines[0], lines


@pytest.mark.parametrize("command", COMMANDS)
def test_brackets_in_the_help_are_printed_not_taken_for_markup(command: str) -> None:
    """rich reads ``[rank 3]`` as a style tag and drops it: "from the start of the run:  for a line" was printed."""
    cmd = cli_group().commands[command]
    texts = [cmd.help or ""] + [p.help or "" for p in cmd.params if isinstance(p, TyperOption)]
    words = {m for text in texts for m in re.findall(r"\\?\[([a-z][\w-]*)[^\]\n]*\]", text)}
    if not words:
        return
    out = CliRunner().invoke(app, [command, "--help"], terminal_width=200).output
    assert all(f"[{word}" in out for word in words), (sorted(words), out)
