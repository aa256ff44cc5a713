"""``remote-debug emulator``: SageMaker in a box, in the foreground, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from remote_debug.cli.application import MAX_PORT, app, flag
from remote_debug.cli.output import print_json
from remote_debug.laptop.core import interrupts
from remote_debug.laptop.core.errors import BadInputError, LocalStateError, UserError
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.wire.documents import EmulatorStarted

DEFAULT_REGION = "us-east-1"


@app.command()
def emulator(
    port: Annotated[int, typer.Option("--port", min=0, max=MAX_PORT, help="Port on 127.0.0.1 (0 = any free one).")] = 0,
    state: Annotated[
        Path | None, typer.Option("--state", help="Where jobs and nodes live (default: ~/.remote-debug/emulator).")
    ] = None,
    region: Annotated[
        str,
        typer.Option(
            "--region",
            help="The region printed as AWS_DEFAULT_REGION. Every region is served, each with its own jobs, logs "
            "and sessions, as in AWS.",
        ),
    ] = DEFAULT_REGION,
    images: Annotated[
        Path | None,
        typer.Option("--images", help="JSON file mapping training image URIs to local Python environments."),
    ] = None,
    log_delay: Annotated[
        float,
        typer.Option(
            "--log-delay", min=0, max=60, metavar="SECONDS", help="How long a node's output takes to reach CloudWatch."
        ),
    ] = 0.5,
    agent_delay: Annotated[
        float,
        typer.Option(
            "--agent-delay",
            min=0,
            max=600,
            metavar="SECONDS",
            help="How long after a job reaches Training (or remote debugging is turned on) its SSM agent comes "
            "online: StartSession answers TargetNotConnected until then, as in AWS.",
        ),
    ] = 3.0,
    no_ssh_document: Annotated[
        bool,
        flag(
            "--no-ssh-document",
            help="Refuse AWS-StartSSHSession on training-job targets (AWS documents only shell "
            "sessions and port forwarding there): the product then forwards a port instead.",
        ),
    ] = False,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            metavar="FILE",
            help="IAM identity policy (JSON; a list for several) every caller is held to, as AWS would: e.g. "
            "templates/iam/user-policy.json. Callers are moto's IAM users (create-user, create-access-key).",
        ),
    ] = None,
    as_json: Annotated[bool, flag("--json", help="Print the endpoint and the keys as one JSON line.")] = False,
) -> None:
    """Serve SageMaker's training-job API, SSM sessions, S3, CloudWatch Logs, STS and IAM on one local URL.

    Point anything at it with the AWS_ENDPOINT_URL and the keys it prints (made at each start; it refuses
    any other signature, and connections from other users): a SageMaker SDK launcher runs its jobs here, on
    this machine, and `remote-debug attach JOB` debugs them through AWS's real Session Manager plugin.
    Ctrl-C stops the emulator and its jobs.
    """
    # Imported here: moto's server takes ~1 s to import, which no other command should pay.
    from remote_debug.emulator.access import StateDirError
    from remote_debug.emulator.enforce import load_policies
    from remote_debug.emulator.iam_policy import PolicyError
    from remote_debug.emulator.images import ImageMap, ImageMapError
    from remote_debug.emulator.nodes import available
    from remote_debug.emulator.service import CREDENTIALS_FILE, Emulator

    why_not = available()
    if why_not is not None:
        raise UserError(f"the emulator cannot run nodes here: {why_not}")
    try:
        image_map = ImageMap.load(images) if images is not None else ImageMap.default()
    except ImageMapError as exc:
        raise BadInputError(str(exc)) from None
    try:
        policies = load_policies(policy) if policy is not None else None
    except PolicyError as exc:
        raise BadInputError(str(exc)) from None
    state_dir = (state or StatePaths.default().root / "emulator").absolute()
    service = Emulator(
        state_dir,
        port=port,
        region=region,
        images=image_map,
        log_delay=log_delay,
        policy=policies,
        agent_delay=agent_delay,
        ssh_document=not no_ssh_document,
    )

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # the same orderly end as Ctrl-C

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        try:
            url = service.start()
        except StateDirError as exc:
            raise LocalStateError(str(exc)) from None
        except OSError as exc:
            raise UserError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}; pick another --port") from None
        keys = service.keys
        if as_json:
            started = EmulatorStarted(
                endpoint_url=url,
                region=region,
                state=str(state_dir),
                access_key_id=keys.access_key_id,
                secret_access_key=keys.secret_access_key,
            )
            print_json(started.to_json())
        else:
            for name, value in {**service.credentials_env(), "AWS_DEFAULT_REGION": region}.items():
                print(f"{name}={value}")
        sys.stdout.flush()
        print(
            f"remote-debug emulator: serving on {url} (state {state_dir}) to requests signed with the keys above "
            f"(also in {state_dir / CREDENTIALS_FILE}); Ctrl-C stops it and its jobs",
            file=sys.stderr,
            flush=True,
        )
        while True:
            time.sleep(0.5)
            interrupts.check()
    except KeyboardInterrupt:
        print("remote-debug emulator: stopping jobs", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
        service.close()
