"""One-line diagnostics for the job side.

Everything the container side has to say goes to the training job's stderr (on SageMaker that is
CloudWatch, the one place a user looks when a job misbehaves), prefixed so that it can be grepped
out of the training output, and always on ONE line: log collectors split records on newlines, and
a multi-line traceback from a debugging aid would drown the training script's own messages.
"""

from __future__ import annotations

import sys

PREFIX = "[remote-debug]"


def one_line(text: object, limit: int = 500) -> str:
    """``text`` with all whitespace runs (newlines included) folded into single spaces."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def describe(exc: BaseException) -> str:
    """A one-line description of an exception: ``"OSError: [Errno 2] ..."`` (type kept for grep)."""
    detail = one_line(exc)
    return type(exc).__name__ + (f": {detail}" if detail else "")


def log(message: object) -> None:
    """Write ``[remote-debug] message`` to stderr; never raises (stderr may be closed or a broken pipe)."""
    try:
        sys.stderr.write(f"{PREFIX} {one_line(message)}\n")
        sys.stderr.flush()
    except Exception:  # a debugging aid must not turn a closed stderr into a training failure
        pass
