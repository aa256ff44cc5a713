"""An AWS API error as the emulator answers it: the service's error code, message and HTTP status.

botocore turns the JSON body ``{"__type": code, "message": message}`` into a ``ClientError`` with
that code, as it does for AWS; the code names are AWS's (``ValidationException``,
``ResourceNotFound``, ``ResourceInUse``, ``TargetNotConnected``, ...).
"""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
