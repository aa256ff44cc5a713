"""``[rank N] `` before every line a rank prints: all ranks of a node write into one pipe (the node's log, its
CloudWatch stream, a ``remote-debug run``'s ssh session), and a reader (``remote-debug logs``, ``run``) must tell
them apart.  Only Python-level writes (``print``, logging, tracebacks) get the prefix; what C code writes to the
file descriptors directly does not.  Never raises into the rank.

When (:func:`wanted`): in every rank of a job of more than one rank, by default.  Untagged, a line of a 64-rank
job's log can only be attributed to its node, and lines of two ranks can even land in one another (each line is
written whole here).  The cost is a visible change of the job's output, in its CloudWatch log too: a job whose
readers cannot take it (a metric regex anchored with ``^``, a launcher that tags lines itself) sets
``REMOTE_DEBUG_OUTPUT_PREFIX=0``; ``remote-debug run`` sets ``1`` (a run of one rank is tagged too).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from remote_debug.contract.spec import RANK_OUTPUT_PREFIX

PREFIX_ENV = "REMOTE_DEBUG_OUTPUT_PREFIX"


class PrefixedStream(io.TextIOBase):
    """A text stream that puts ``prefix`` at the start of each line and passes the rest through.

    Every rank of a node writes into the same pipe, so a line must reach it in one write: ``print`` writes
    its text and its newline separately, and between the two another rank's line could land in the middle
    of this one (``loss nan[rank 2] rank 2 ...``), which the laptop then reads as one rank's line.  A line is
    held until its newline (or a ``flush``) and written whole, prefix included; one write of a line under
    PIPE_BUF bytes is atomic on a pipe."""

    def __init__(self, inner: TextIO, prefix: str) -> None:
        self._inner = inner
        self._prefix = prefix
        self._pending = ""  # the current line so far, prefix included, until its newline or a flush
        self._at_line_start = True

    def write(self, text: str) -> int:
        if not text:
            return 0
        parts = text.split("\n")
        out = [self._pending]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part and self._at_line_start:
                out.append(self._prefix)
            out.append(part)
            if not last:
                out.append("\n")
                self._at_line_start = True
            elif part:
                self._at_line_start = False
        whole, newline, self._pending = "".join(out).rpartition("\n")
        if newline:
            # and flushed: a block-buffered pipe would otherwise cut its 8 KiB writes mid-line (one syscall a
            # printed line, and only while ``remote-debug run`` asks for prefixes)
            self._inner.write(whole + newline)
            self._inner.flush()
        return len(text)

    def flush(self) -> None:
        if self._pending:  # print(..., end="", flush=True), a prompt: shown now, the line goes on after it
            self._inner.write(self._pending)
            self._pending = ""
        self._inner.flush()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._inner.fileno()

    def isatty(self) -> bool:
        return self._inner.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self._inner, "encoding", "utf-8"))

    def __getattr__(self, name: str) -> Any:  # buffer, errors, reconfigure...: the real stream's
        return getattr(self._inner, name)


def wanted(env: Mapping[str, str], world_size: int) -> bool:
    """Whether a rank tags its lines: ``REMOTE_DEBUG_OUTPUT_PREFIX`` 1 or 0 decides, else whether the job has
    more than one rank."""
    value = env.get(PREFIX_ENV, "").strip()
    if value in ("0", "1"):
        return value == "1"
    return world_size > 1


def prefix_output(rank: int) -> None:
    prefix = RANK_OUTPUT_PREFIX.format(rank=rank)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is not None and not isinstance(stream, PrefixedStream):
            setattr(sys, name, PrefixedStream(stream, prefix))
