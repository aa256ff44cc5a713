"""``remote-debug enable JOB``: turn on SageMaker's native remote debugging for a running job."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from remote_debug.cli.application import app, flag
from remote_debug.cli.output import console, err_console, print_json
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws.enable import update
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.wire.documents import EnableReport


def open_client(region: str) -> Any:
    """The SageMaker client (a seam: tests hand in a botocore Stubber'd client)."""
    return aws.client("sagemaker", region=region)


def caller_id() -> str:
    """Who the caller is (``aws:userid``): the owner tag of a job nobody owns yet (a seam for tests)."""
    from remote_debug.laptop.aws.enable.owner import resolve_owner

    return resolve_owner(None)


@app.command(name="enable")
def enable_command(
    job: Annotated[str, typer.Argument(help="Training job name or ARN.")],
    as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False,
) -> None:
    """Turn on remote debugging for a running SageMaker job (UpdateTrainingJob; Downloading or Training only).

    New jobs: use remote_debug.enable(...) in the launcher instead, which also adds the debug hook.
    """
    name, arn_region = aws.parse_training_job(job)
    region, source = aws.resolve_region()
    if arn_region and source != "--region":  # the ARN names the job's region; --region still wins
        region, source = arn_region, "the job ARN"
    if not region:
        raise UserError(aws.NO_REGION)
    try:
        result = update.enable_running_job(open_client(region), name, owner=caller_id)
    except UserError:
        raise
    except Exception as exc:
        if not aws.is_error(exc):
            raise
        if aws.error_code(exc) in ("ValidationException", "ResourceNotFound") and "not found" in str(exc).lower():
            raise UserError(
                f"no training job {name} in {region} (region from {source}): check the name and --region"
            ) from None
        raise UserError(aws.describe_error(exc, f"enabling remote debugging on {name}")) from None
    if as_json:
        print_json(EnableReport(**result.to_json(), region=region, region_source=source).to_json())
        return
    if result.claimed:
        err_console.print(f"tagged {name} with {aws.TAG_OWNER} = you: nobody owned it (templates/iam/README.md)")
    what = "enabled" if result.updated else "already enabled"
    console.print(f"remote debugging {what} on job {name} ({result.secondary_status}; region {region} from {source})")
    if not result.has_spec:
        err_console.print(
            f"note: {name} was not created with remote_debug.enable(), so it runs no debug hook: SSM shell access "
            f"only (aws ssm start-session --target sagemaker-training-job:{name}_algo-1); attach needs the hook"
        )
