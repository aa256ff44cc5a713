"""Launch a debuggable PyTorch job with the SageMaker Python SDK v3 ``ModelTrainer`` (``pip install 'sagemaker>=3'``).

    python sdk_v3_model_trainer.py --role arn:aws:iam::123456789012:role/SageMakerExecution      # 1 node
    python sdk_v3_model_trainer.py --role ... --nodes 2 --instance-type ml.g5.12xlarge           # torchrun
    remote-debug attach <job name printed above>

``remote_debug.enable`` adds a ``remote_debug`` input channel with the package, turns on native
remote debugging (``with_remote_debug_config``) and, when ``train()`` creates the job, adds the
spec and runs the SDK's ``sm_train.sh`` under the debug hook.  ``code/train.py`` is not changed.
(With SDK 2.2xx the same classes live in ``sagemaker.modules.train`` / ``sagemaker.modules.configs``.)
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
from sagemaker.core import image_uris
from sagemaker.core.helper.session_helper import Session
from sagemaker.train import ModelTrainer
from sagemaker.train.configs import Compute, SourceCode
from sagemaker.train.distributed import Torchrun

import remote_debug

CODE_DIR = Path(__file__).resolve().parent / "code"


def pytorch_image(region: str, instance_type: str) -> str:
    return str(
        image_uris.retrieve(
            framework="pytorch",
            region=region,
            version="2.5",
            py_version="py311",
            instance_type=instance_type,
            image_scope="training",
        )
    )


def single_node(role: str, region: str, instance_type: str = "ml.g5.xlarge", session: Any = None) -> ModelTrainer:
    trainer = ModelTrainer(
        training_image=pytorch_image(region, instance_type),
        role=role,
        base_job_name="rd-v3-single",
        source_code=SourceCode(source_dir=str(CODE_DIR), entry_script="train.py"),
        compute=Compute(instance_type=instance_type, instance_count=1),
        sagemaker_session=session,
    )
    return remote_debug.enable(trainer, ide="vscode", wait=600)


def torchrun_multi_node(
    role: str, region: str, nodes: int = 2, instance_type: str = "ml.g5.12xlarge", session: Any = None
) -> ModelTrainer:
    trainer = ModelTrainer(
        training_image=pytorch_image(region, instance_type),
        role=role,
        base_job_name="rd-v3-torchrun",
        source_code=SourceCode(source_dir=str(CODE_DIR), entry_script="train.py"),
        distributed=Torchrun(),  # one process per GPU on every node
        compute=Compute(instance_type=instance_type, instance_count=nodes),
        sagemaker_session=session,
    )
    return remote_debug.enable(trainer, ide="vscode", ranks="all", wait=600)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default=os.environ.get("SAGEMAKER_ROLE"), required="SAGEMAKER_ROLE" not in os.environ)
    parser.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--instance-type", default=None)
    args = parser.parse_args(argv)
    if not args.region:
        parser.error("no region: pass --region or set AWS_REGION")
    # The region explicitly: boto3 here reads AWS_DEFAULT_REGION but not AWS_REGION.
    session = Session(boto_session=boto3.Session(region_name=args.region))
    if args.nodes > 1:
        instance_type = args.instance_type or "ml.g5.12xlarge"
        trainer = torchrun_multi_node(args.role, args.region, args.nodes, instance_type, session)
    else:
        trainer = single_node(args.role, args.region, args.instance_type or "ml.g5.xlarge", session)
    trainer.train(wait=False)
    print("started: `remote-debug jobs` lists it; then remote-debug attach <job name>")


if __name__ == "__main__":
    main()
