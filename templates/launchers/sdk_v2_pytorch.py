"""Launch a debuggable PyTorch job with the SageMaker Python SDK v2 (``pip install 'sagemaker>=2.222,<3'``).

    python sdk_v2_pytorch.py --role arn:aws:iam::123456789012:role/SageMakerExecution            # 1 node
    python sdk_v2_pytorch.py --role ... --nodes 2 --instance-type ml.g5.12xlarge                 # torchrun
    remote-debug attach <job name printed above>

``remote_debug.enable`` ships remote_debug (and debugpy) with the code, turns on SageMaker's native
remote debugging and adds the debug spec when ``fit()`` creates the job; ``code/train.py`` is not
changed.  The training toolkit runs it with torchrun on every node when ``torch_distributed`` is on.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
import sagemaker
from sagemaker.pytorch import PyTorch

import remote_debug

CODE_DIR = Path(__file__).resolve().parent / "code"
FRAMEWORK = {"framework_version": "2.5.1", "py_version": "py311"}  # torch_distributed needs x.y.z


def single_node(role: str, instance_type: str = "ml.g5.xlarge", session: Any = None) -> PyTorch:
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(CODE_DIR),
        role=role,
        instance_type=instance_type,
        instance_count=1,
        base_job_name="rd-v2-single",
        sagemaker_session=session,
        **FRAMEWORK,
    )
    # wait: each rank waits up to 10 minutes for a debugger before it runs on.
    return remote_debug.enable(estimator, ide="vscode", wait=600)


def torchrun_multi_node(
    role: str, nodes: int = 2, instance_type: str = "ml.g5.12xlarge", session: Any = None
) -> PyTorch:
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(CODE_DIR),
        role=role,
        instance_type=instance_type,
        instance_count=nodes,
        distribution={"torch_distributed": {"enabled": True}},
        base_job_name="rd-v2-torchrun",
        sagemaker_session=session,
        **FRAMEWORK,
    )
    return remote_debug.enable(estimator, ide="vscode", ranks="all", wait=600)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default=os.environ.get("SAGEMAKER_ROLE"), required="SAGEMAKER_ROLE" not in os.environ)
    parser.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--instance-type", default=None)
    args = parser.parse_args(argv)
    # The region explicitly: boto3 here reads AWS_DEFAULT_REGION but not AWS_REGION.
    session = sagemaker.Session(boto_session=boto3.Session(region_name=args.region))
    if args.nodes > 1:
        estimator = torchrun_multi_node(args.role, args.nodes, args.instance_type or "ml.g5.12xlarge", session)
    else:
        estimator = single_node(args.role, args.instance_type or "ml.g5.xlarge", session)
    estimator.fit(wait=False)
    print(f"started {estimator.latest_training_job.name}: remote-debug attach {estimator.latest_training_job.name}")


if __name__ == "__main__":
    main()
