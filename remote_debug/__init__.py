"""remote_debug: debug live SageMaker training jobs (and SageMaker-shaped local jobs) from your IDE.

The package is split by where code runs: ``container/`` inside the training job (stdlib + debugpy),
``laptop/`` on the laptop, and :mod:`remote_debug.contract.spec` as the one contract between them.

``remote_debug.enable(target, ...)`` makes a SageMaker training job debuggable (a CreateTrainingJob
request dict, an SDK v2 estimator or a ModelTrainer; see :mod:`remote_debug.laptop.aws.enable.api`).

``python -m remote_debug.container`` imports this file before it checks the interpreter's version
(and runs the training command without debugging on Python < 3.10), so it must load on Python 3.6+:
no ``from __future__ import annotations``, no newer syntax, plain-name annotations.
"""

from typing import Any

__version__ = "0.1.0"
# The name to ``pip install``: PyPI's "remote-debug" is an unrelated project (an HPC tool).  The import
# package stays ``remote_debug`` and the command ``remote-debug``.
DISTRIBUTION = "remote-debug-training"
__all__ = ["DISTRIBUTION", "__version__", "enable"]


def __getattr__(name: str) -> Any:
    # Lazy: this package is imported inside training jobs (the container side), where neither
    # boto3 nor the SageMaker SDK may exist, and on every CLI start, which must stay fast.
    if name == "enable":
        from remote_debug.laptop.aws.enable.api import enable

        return enable
    raise AttributeError(f"module 'remote_debug' has no attribute {name!r}")
