"""Launch a debuggable training job with plain boto3 (CreateTrainingJob), no SageMaker SDK.

    python boto3_request.py --role arn:aws:iam::123456789012:role/SageMakerExecution \\
        --bucket my-bucket --image <account>.dkr.ecr.<region>.amazonaws.com/pytorch-training:2.5-gpu-py311
    python boto3_request.py ... --nodes 2 --procs-per-node 4 --instance-type ml.g5.12xlarge   # torchrun
    remote-debug attach <job name printed above>

``--wait S`` (default 600): how long each rank waits for a debugger at start.  ``--keep-alive S`` (default 0):
every node stays up S seconds after the training command ends, so that ``remote-debug sync`` / ``run`` can
iterate on the same nodes, until ``remote-debug release <job>`` (or ``stop``); SageMaker bills that time, and it
counts against the job's MaxRuntimeInSeconds (4 h here).  It works here because the request names its
``ContainerEntrypoint``, which the hook wraps.

The code (``code/``) and remote_debug's bundle (remote_debug + debugpy, see
``remote_debug.sagemaker.bundle_dir``) go to S3 and become the ``code`` and ``remote_debug`` channels.
``remote_debug.enable(request, package_uri=...)`` returns a new request with the debug spec, native
remote debugging, owner tags and the entry (python / torchrun) wrapped by the debug hook.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3

import remote_debug
from remote_debug.sagemaker import bundle_dir, upload_bundle

CODE_DIR = Path(__file__).resolve().parent / "code"
CODE_CHANNEL = "/opt/ml/input/data/code"


def _request(
    job: str, role: str, image: str, code_uri: str, output_uri: str, instance_type: str, nodes: int, entry: list[str]
) -> dict[str, Any]:
    return {
        "TrainingJobName": job,
        "RoleArn": role,
        "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": "File", "ContainerEntrypoint": entry},
        "InputDataConfig": [
            {
                "ChannelName": "code",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": code_uri}},
                "InputMode": "File",
            }
        ],
        "OutputDataConfig": {"S3OutputPath": output_uri},
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": nodes, "VolumeSizeInGB": 50},
        "StoppingCondition": {"MaxRuntimeInSeconds": 4 * 3600},
        "Environment": {"SM_HP_STEPS": "1000"},
    }


def single_node(
    job: str,
    role: str,
    image: str,
    bucket: str,
    instance_type: str = "ml.g5.xlarge",
    session: Any = None,
    wait: float = 600,
    keep_alive: float = 0,
) -> dict[str, Any]:
    request = _request(
        job,
        role,
        image,
        f"s3://{bucket}/{job}/code",
        f"s3://{bucket}/{job}/output",
        instance_type,
        1,
        ["python3", f"{CODE_CHANNEL}/train.py"],
    )
    # session: whose STS identity becomes the owner tag (default: the usual AWS profile/region).
    return dict(
        remote_debug.enable(
            request,
            ide="vscode",
            wait=wait,
            keep_alive=keep_alive,
            package_uri=f"s3://{bucket}/{job}/remote-debug",
            boto_session=session,
        )
    )


def torchrun_multi_node(
    job: str,
    role: str,
    image: str,
    bucket: str,
    nodes: int = 2,
    procs_per_node: int = 4,
    instance_type: str = "ml.g5.12xlarge",
    session: Any = None,
    wait: float = 600,
    keep_alive: float = 0,
) -> dict[str, Any]:
    # Every node gets the same command; c10d rendezvous on algo-1 assigns the node ranks.
    entry = [
        "torchrun",
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(procs_per_node),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "algo-1:29400",
        "--rdzv-id",
        job,
        f"{CODE_CHANNEL}/train.py",
    ]
    request = _request(
        job, role, image, f"s3://{bucket}/{job}/code", f"s3://{bucket}/{job}/output", instance_type, nodes, entry
    )
    return dict(
        remote_debug.enable(
            request,
            ide="vscode",
            ranks="all",
            wait=wait,
            keep_alive=keep_alive,
            package_uri=f"s3://{bucket}/{job}/remote-debug",
            boto_session=session,
        )
    )


def upload(session: Any, bucket: str, job: str) -> None:
    """The code and the remote-debug bundle, under s3://bucket/job/{code,remote-debug}/."""
    s3 = session.client("s3")
    for path in sorted(p for p in CODE_DIR.rglob("*.py")):
        s3.upload_file(str(path), bucket, f"{job}/code/{path.relative_to(CODE_DIR).as_posix()}")
    upload_bundle(s3, bundle_dir(), f"s3://{bucket}/{job}/remote-debug")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--image", required=True, help="a training image with python3 (and torch)")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    parser.add_argument("--job", default=f"rd-boto3-{time.strftime('%Y%m%d-%H%M%S')}")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--procs-per-node", type=int, default=1)
    parser.add_argument("--instance-type", default=None)
    parser.add_argument(
        "--wait",
        type=float,
        default=600,
        metavar="SECONDS",
        help="how long each rank waits for a debugger at start (0: never)",
    )
    parser.add_argument(
        "--keep-alive",
        type=float,
        default=0,
        metavar="SECONDS",
        help="every node stays up SECONDS after the training command ends, for remote-debug "
        "sync/run, until remote-debug release (billed; 0: the job ends with the command)",
    )
    args = parser.parse_args(argv)
    # The region explicitly: boto3 here reads AWS_DEFAULT_REGION but not AWS_REGION.
    session = boto3.Session(region_name=args.region)
    upload(session, args.bucket, args.job)
    if args.nodes > 1:
        request = torchrun_multi_node(
            args.job,
            args.role,
            args.image,
            args.bucket,
            args.nodes,
            args.procs_per_node,
            args.instance_type or "ml.g5.12xlarge",
            session,
            wait=args.wait,
            keep_alive=args.keep_alive,
        )
    else:
        request = single_node(
            args.job,
            args.role,
            args.image,
            args.bucket,
            args.instance_type or "ml.g5.xlarge",
            session,
            wait=args.wait,
            keep_alive=args.keep_alive,
        )
    session.client("sagemaker").create_training_job(**request)
    print(f"started {args.job}: remote-debug attach {args.job}")


if __name__ == "__main__":
    main()
