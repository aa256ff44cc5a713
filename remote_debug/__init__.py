"""remote_debug: debug live SageMaker training jobs (and SageMaker-shaped local jobs) from your IDE.

The package is split by where code runs: ``container/`` inside the training job (stdlib + debugpy),
``local/`` on the laptop, and :mod:`remote_debug.spec` as the one contract between them.
"""

__version__ = "0.1.0"
