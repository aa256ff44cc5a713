"""The public SageMaker integration: ``from remote_debug.sagemaker import enable``.

A stable name for launchers and notebooks; the code lives in the AWS wing
(:mod:`remote_debug.laptop.aws.enable`).  Lazy, like that package: importing this module loads
neither boto3 nor the SageMaker SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names, for type checkers and linters; at run time __getattr__ loads them
    from remote_debug.contract.spec import DebugOptions
    from remote_debug.laptop.aws.enable.api import enable
    from remote_debug.laptop.aws.enable.bundle import bundle_dir
    from remote_debug.laptop.aws.enable.request import enable_request, upload_bundle
    from remote_debug.laptop.aws.enable.terms import EnableError, JobTransport, RemoteDebugWarning

__all__ = [
    "DebugOptions",
    "EnableError",
    "JobTransport",
    "RemoteDebugWarning",
    "bundle_dir",
    "enable",
    "enable_request",
    "upload_bundle",
]


def __getattr__(name: str) -> Any:
    if name in ("bundle_dir", "upload_bundle"):  # a boto3 launcher ships the bundle itself
        from remote_debug.laptop.aws.enable import bundle, request

        return bundle.bundle_dir if name == "bundle_dir" else request.upload_bundle
    if name in __all__:
        from remote_debug.laptop.aws import enable

        return getattr(enable, name)
    raise AttributeError(f"module 'remote_debug.sagemaker' has no attribute {name!r}")
