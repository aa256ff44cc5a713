"""Launch the MPI job of the end-to-end tests with the SageMaker Python SDK v2 (run by the SDK v2 venv).

    python mpi_launcher.py --role ARN --nodes 2 --processes-per-host 2 --instance-type ml.c5.xlarge

The SDK v2 ``PyTorch`` estimator with ``distribution={"mpi": {"enabled": True, "processes_per_host": N}}``:
the training toolkit on algo-1 runs ``mpirun`` over every node's sshd (port 22, as in AWS's DLC images)
and each rank runs ``mpi_code/train_mpi.py``.  ``remote_debug.enable`` is applied as in
``templates/launchers/sdk_v2_pytorch.py``; the script itself is not changed.  Prints
``started <job name>``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import boto3
import sagemaker
from sagemaker.pytorch import PyTorch

import remote_debug

CODE_DIR = Path(__file__).resolve().parent / "mpi_code"
ENTRY_POINT = "train_mpi.py"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", required=True)
    parser.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--processes-per-host", type=int, default=2)
    parser.add_argument("--instance-type", default="ml.c5.xlarge")
    args = parser.parse_args(argv)
    session = sagemaker.Session(boto_session=boto3.Session(region_name=args.region))
    estimator = PyTorch(
        entry_point=ENTRY_POINT,
        source_dir=str(CODE_DIR),
        role=args.role,
        instance_type=args.instance_type,
        instance_count=args.nodes,
        framework_version="2.5.1",
        py_version="py311",
        distribution={"mpi": {"enabled": True, "processes_per_host": args.processes_per_host}},
        base_job_name="rd-v2-mpi",
        sagemaker_session=session,
    )
    estimator = remote_debug.enable(estimator, ide="vscode", ranks="all", wait=600)
    estimator.fit(wait=False)
    print(f"started {estimator.latest_training_job.name}")


if __name__ == "__main__":
    main()
