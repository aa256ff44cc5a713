"""The typer application every subcommand module registers on, and the options every command shares."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption
from typer.models import CommandFunctionType

from remote_debug.laptop.aws import clients as aws

MAX_PORT = 65535


def flag(*names: str, help: str) -> Any:
    """A bool option shown as a flag: ``--json`` in ``--help``, not ``--json <bool>`` (typer 0.29's default).

    Use it as ``as_json: Annotated[bool, flag("--json", help="...")] = False``.
    """
    return typer.Option(*names, help=help, metavar="")


def positive_seconds(param: typer.CallbackParam, value: float) -> float:
    """A wait the user gives us (``--timeout``): positive and finite (nan and inf would never time out).

    A callback rather than ``min=``: typer 0.29 has no open bound (0 must be refused) and lets inf through.
    """
    if not math.isfinite(value) or value <= 0:
        option = param.opts[0] if param.opts else str(param.name)
        raise typer.BadParameter(f"{value:g} is not a number of seconds: use a positive number, e.g. {option} 60")
    return value


# Options several commands declare alike: one declaration each.
PycharmBuild = Annotated[
    str | None,
    typer.Option(
        "--pycharm-build", help="--ide pycharm: your PyCharm build (default: detected); 'any' skips the check."
    ),
]


def _shown_as_flag(option: TyperOption | None) -> TyperOption | None:
    if option is not None:
        option.metavar = ""  # -h/--help without "<bool>", like every flag()
    return option


class Command(TyperCommand):
    """Every subcommand (:class:`App` makes it the default): ``-h/--help`` shown as a flag."""

    def get_help_option(self, ctx: Any) -> TyperOption | None:
        return _shown_as_flag(super().get_help_option(ctx))


class Group(TyperGroup):
    """``remote-debug`` itself: ``-h/--help`` shown as a flag."""

    def get_help_option(self, ctx: Any) -> TyperOption | None:
        return _shown_as_flag(super().get_help_option(ctx))


class App(typer.Typer):
    """``typer.Typer`` whose commands are :class:`Command` unless one asks for another class."""

    def command(
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        return super().command(name, cls=cls or Command, **kwargs)


app = App(
    name="remote-debug",
    cls=Group,
    help="Debug live SageMaker training jobs (and SageMaker-shaped local jobs) from VS Code or PyCharm.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def global_options(
    profile: Annotated[
        str | None, typer.Option("--profile", help="AWS profile (default: AWS_PROFILE, then the default).")
    ] = None,
    region: Annotated[
        str | None,
        typer.Option("--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, then the profile's)."),
    ] = None,
) -> None:
    """Debug live SageMaker training jobs (and SageMaker-shaped local jobs) from VS Code or PyCharm."""
    # Only recorded here: AWS is contacted (and boto3 imported) when a command needs a SageMaker job.
    aws.configure(profile=profile, region=region)
