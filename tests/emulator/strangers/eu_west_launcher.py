"""A launcher as a stranger writes it: its own region in the code, its own bucket, its own torchrun line.

Nothing here comes from templates/launchers: the region is hard-coded (``boto3.Session(region_name=...)``, as
many teams pin theirs), whatever AWS_REGION / AWS_DEFAULT_REGION the shell has; the job is a plain BYOC
request with the hook added by ``remote_debug.enable``.

    python eu_west_launcher.py JOB_NAME CODE_DIR
"""

import sys
from pathlib import Path

import boto3

import remote_debug
from remote_debug.laptop.aws.enable.bundle import bundle_dir
from remote_debug.laptop.aws.enable.request import upload_bundle

REGION = "eu-west-1"
BUCKET = "stranger-eu-bucket"

job, code = sys.argv[1], Path(sys.argv[2])
session = boto3.Session(region_name=REGION)
s3 = session.client("s3")
try:
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
except s3.exceptions.BucketAlreadyOwnedByYou:
    pass
for path in code.rglob("*.py"):
    s3.upload_file(str(path), BUCKET, f"{job}/src/{path.relative_to(code)}")
upload_bundle(s3, bundle_dir(), f"s3://{BUCKET}/{job}/rd")

request = {
    "TrainingJobName": job,
    "RoleArn": "arn:aws:iam::123456789012:role/TeamTraining",
    "AlgorithmSpecification": {
        "TrainingImage": f"763104351884.dkr.ecr.{REGION}.amazonaws.com/pytorch-training:2.5-cpu-py311",
        "TrainingInputMode": "File",
        "ContainerEntrypoint": [
            "torchrun",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "algo-1:29500",
            "--rdzv-id",
            job,
            "/opt/ml/input/data/src/train.py",
        ],
    },
    "InputDataConfig": [
        {
            "ChannelName": "src",
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/{job}/src"}},
        }
    ],
    "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/{job}/out"},
    "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    "Environment": {"SM_HP_STEPS": "30"},
}
request = remote_debug.enable(request, wait=300, package_uri=f"s3://{BUCKET}/{job}/rd", boto_session=session)
session.client("sagemaker").create_training_job(**request)
print(f"created {job} in {REGION}")
