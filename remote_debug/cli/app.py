"""The typer application every subcommand module registers on, and the options every command shares."""

from __future__ import annotations

import typer

from remote_debug.local import aws

app = typer.Typer(
    name="remote-debug",
    help="Debug live SageMaker training jobs (and SageMaker-shaped local jobs) from VS Code or PyCharm.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def global_options(
    profile: str = typer.Option(None, "--profile", help="AWS profile (default: AWS_PROFILE, then the default)."),
    region: str = typer.Option(
        None, "--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, then the profile's)."
    ),
) -> None:
    """Debug live SageMaker training jobs (and SageMaker-shaped local jobs) from VS Code or PyCharm."""
    # Only recorded here: AWS is contacted (and boto3 imported) when a command needs a SageMaker job.
    aws.configure(profile=profile, region=region)
