"""Which SageMaker Python SDK is installed, asked without importing it."""

from __future__ import annotations

import importlib.metadata
import re

from remote_debug.laptop.aws.enable.terms import EnableError

INSTALL_HINT = "pip install 'remote-debug-training[sagemaker]' (or the sagemaker version your launcher needs)"


def sdk_version() -> tuple[int, ...] | None:
    """The installed ``sagemaker`` distribution's version as numbers, or None when it is not installed."""
    try:
        text = importlib.metadata.version("sagemaker")
    except importlib.metadata.PackageNotFoundError:
        return None
    numbers: list[int] = []
    for part in text.split("."):  # "2.257.7rc1" -> (2, 257, 7)
        leading = re.match(r"\d+", part)
        if leading is None:
            break
        numbers.append(int(leading.group()))
        if leading.end() != len(part):
            break
    return tuple(numbers)


def require_sdk(major: int, what: str, minimum: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The installed SDK version, if its major is ``major`` (and at least ``minimum``); else EnableError."""
    version = sdk_version()
    if version is None:
        raise EnableError(f"{what} needs the SageMaker Python SDK {major}.x, which is not installed: {INSTALL_HINT}")
    shown = ".".join(str(n) for n in version)
    if version[:1] != (major,):
        raise EnableError(f"{what} needs the SageMaker Python SDK {major}.x, but sagemaker {shown} is installed")
    if minimum and version < minimum:
        wanted = ".".join(str(n) for n in minimum)
        raise EnableError(f"{what} needs sagemaker >= {wanted}, but sagemaker {shown} is installed: upgrade it")
    return version
