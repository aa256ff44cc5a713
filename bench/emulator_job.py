"""``python -m bench.emulator_job``: create one debuggable single-node job for the emulator rows.

The same request ``templates/launchers/boto3_request.py`` makes (plain boto3 CreateTrainingJob; the code
and remote_debug's bundle as S3 channels; ``remote_debug.enable(request, package_uri=...)`` wraps the
entry with the hook, every rank waiting up to 10 minutes for a debugger), with the bench's own script:
a loop of 10 ms steps, slow enough to step through with a debugger and to outlive several sessions.
Run it with ``AWS_ENDPOINT_URL`` set to the emulator and a throwaway ``HOME``: ``enable()`` keeps the
job's key pair under ``~/.remote-debug``.
"""

from __future__ import annotations

import argparse
import os
import textwrap
from collections.abc import Sequence

import boto3

import remote_debug
from remote_debug.laptop.aws.enable.bundle import bundle_dir
from remote_debug.laptop.aws.enable.request import upload_bundle

CODE_CHANNEL = "/opt/ml/input/data/code"
SCRIPT_NAME = "bench_rank.py"
BREAK_MARK = "BENCH-BREAK"
SCRIPT = textwrap.dedent(
    f"""
    import os, sys, time
    rank = int(os.environ.get("RANK", "0"))
    for step in range(int(sys.argv[1])):
        value = rank * 1000 + step  # {BREAK_MARK}
        time.sleep(0.01)
    """
)


def break_line() -> int:
    return next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if BREAK_MARK in line)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True)
    parser.add_argument("--role", required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--steps", type=int, default=6000, help="10 ms steps the rank runs once released")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    args = parser.parse_args(argv)
    session = boto3.Session(region_name=args.region)
    s3 = session.client("s3")
    s3.put_object(Bucket=args.bucket, Key=f"{args.job}/code/{SCRIPT_NAME}", Body=SCRIPT.encode())
    package_uri = f"s3://{args.bucket}/{args.job}/remote-debug"
    upload_bundle(s3, bundle_dir(), package_uri)
    request = {
        "TrainingJobName": args.job,
        "RoleArn": args.role,
        "AlgorithmSpecification": {
            "TrainingImage": args.image,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python3", f"{CODE_CHANNEL}/{SCRIPT_NAME}", str(args.steps)],
        },
        "InputDataConfig": [
            {
                "ChannelName": "code",
                "DataSource": {
                    "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{args.bucket}/{args.job}/code"}
                },
                "InputMode": "File",
            }
        ],
        "OutputDataConfig": {"S3OutputPath": f"s3://{args.bucket}/{args.job}/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }
    enabled = remote_debug.enable(request, ide="vscode", wait=600, package_uri=package_uri, boto_session=session)
    session.client("sagemaker").create_training_job(**enabled)
    print(f"started {args.job}")


if __name__ == "__main__":
    main()
