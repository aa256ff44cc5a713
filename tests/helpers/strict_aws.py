"""Every boto3 call a test makes in-process is held to what AWS checks on its servers.

botocore validates a request's types and required members before sending it, but not the model's
``pattern`` and maximum lengths, which SageMaker, SSM and CloudWatch Logs enforce on their side: a
request they refuse (a newline in a ``ContainerEntrypoint`` item) sailed through moto and
``Stubber`` alike.  :func:`install` adds :mod:`remote_debug.emulator.constraints` to botocore's own
validation, so the client raises ``ParamValidationError`` with AWS's wording wherever the service
would answer ``ValidationException``: whatever path built the request (``enable()``, the launchers,
``enable JOB``, ``adopt``, the hybrid activation, stubbed or against moto), it is checked as AWS
checks it.  Requests sent from other processes meet the same checks in the emulator's front.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ParamValidationError
from botocore.validate import ParamValidationDecorator

from remote_debug.emulator.constraints import constraint_errors, validation_message

_installed = False


def install() -> None:
    """Make every botocore client's parameter validation as strict as the services' (idempotent).

    Only clients: the emulator's front, which may run in a test's process, keeps its own checks and words
    its refusals as the service does."""
    global _installed
    if _installed:
        return
    plain = ParamValidationDecorator.serialize_to_request

    def serialize_to_request(self: ParamValidationDecorator, parameters: Any, operation_model: Any) -> Any:
        shape = operation_model.input_shape
        errors = constraint_errors(shape, parameters) if isinstance(parameters, dict) else []
        if errors:
            raise ParamValidationError(report=f"AWS would refuse it: {validation_message(errors)}")
        return plain(self, parameters, operation_model)

    ParamValidationDecorator.serialize_to_request = serialize_to_request
    _installed = True
