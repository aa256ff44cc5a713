"""A raw CreateTrainingJob as the SageMaker SDK's own requests look, written by hand: the image's ``train`` (AWS's
training toolkit) is the entry, the code comes as ``sagemaker_submit_directory`` (a sourcedir.tar.gz), and
remote-debug's hook comes in its own input channel (``package_uri``) and through ``PYTHONPATH``.

    python toolkit_raw_launcher.py JOB_NAME SOURCE_DIR torchrun|mpi BUCKET
"""

import io
import json
import sys
import tarfile
from pathlib import Path

import boto3

import remote_debug
from remote_debug.laptop.aws.enable.bundle import bundle_dir
from remote_debug.laptop.aws.enable.request import upload_bundle

job, source, how, bucket = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
session = boto3.Session()
region = session.region_name
s3 = session.client("s3")
archive = io.BytesIO()
with tarfile.open(fileobj=archive, mode="w:gz") as tar:
    for path in sorted(source.rglob("*.py")):
        tar.add(path, arcname=str(path.relative_to(source)))
s3.put_object(Bucket=bucket, Key=f"{job}/source/sourcedir.tar.gz", Body=archive.getvalue())
upload_bundle(s3, bundle_dir(), f"s3://{bucket}/{job}/remote-debug")

hyperparameters = {  # JSON-encoded values, as the SDK sends them and the toolkit decodes them
    "sagemaker_program": json.dumps("train.py"),
    "sagemaker_submit_directory": json.dumps(f"s3://{bucket}/{job}/source/sourcedir.tar.gz"),
    "sagemaker_container_log_level": "20",
    "sagemaker_job_name": json.dumps(job),
    "sagemaker_region": json.dumps(region),
}
if how == "mpi":
    hyperparameters.update(
        {
            "sagemaker_mpi_enabled": "true",
            "sagemaker_mpi_num_of_processes_per_host": "2",
            "sagemaker_mpi_custom_mpi_options": json.dumps(""),
        }
    )
    instance_type = "ml.c5.xlarge"
else:
    hyperparameters["sagemaker_torch_distributed_enabled"] = "true"
    instance_type = "ml.g5.12xlarge"  # 2 "GPUs" in the emulator's image map: 2 processes per node
request = {
    "TrainingJobName": job,
    "RoleArn": "arn:aws:iam::123456789012:role/TeamTraining",
    "AlgorithmSpecification": {
        "TrainingImage": f"763104351884.dkr.ecr.{region}.amazonaws.com/pytorch-training:2.5.1-cpu-py311-ubuntu22.04-"
        "sagemaker",
        "TrainingInputMode": "File",
    },
    "HyperParameters": hyperparameters,
    "OutputDataConfig": {"S3OutputPath": f"s3://{bucket}/{job}/output"},
    "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": 2, "VolumeSizeInGB": 30},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
}
request = remote_debug.enable(request, wait=300, package_uri=f"s3://{bucket}/{job}/remote-debug")
session.client("sagemaker").create_training_job(**request)
print(f"created {job}")
