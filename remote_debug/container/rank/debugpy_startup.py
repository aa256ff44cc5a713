"""debugpy's start-up without the report nobody reads: most of what ``listen`` costs a rank.

debugpy (1.8) describes the environment when a rank calls ``debugpy.listen()`` and again when its
adapter subprocess starts: every installed distribution's metadata is parsed (``importlib.metadata``,
one e-mail-header parse each) to build an "info" log message.  It builds the text even when no log
sink takes "info" (no ``DEBUGPY_LOG_DIR``, stderr at its default "warning error"), and then drops it.
Measured here with ~220 distributions: 0.12 s of the rank's 0.18 s CPU for ``listen``, and nearly all
of the adapter's 0.09 s - per rank, so 64 ranks on one machine paid ~13 s of CPU for nothing.

:func:`skip_unread_environment_report` makes ``describe_environment`` build the text only when some
log sink would write it, so ``DEBUGPY_LOG_DIR=...`` still gets the full report.  It runs where
:mod:`remote_debug.container.rank.nodelay` patches: in a rank before ``listen`` and in the adapter of one of
our ranks (from ``sitecustomize``).  Never raises: a failure only costs that CPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from remote_debug.container.log import describe, log

_MARK = "_remote_debug_reads_first"


def skip_unread_environment_report() -> bool:
    """Patch THIS process's ``debugpy.common.log``; True when it is patched (now or before)."""
    try:
        from debugpy.common import log as debugpy_log

        original: Callable[[str], None] = debugpy_log.describe_environment
        if getattr(original, _MARK, False):
            return True

        def describe_environment(header: str) -> None:
            # the set of levels any log sink (files, stderr) writes; the report is an "info" message
            if "info" in getattr(debugpy_log, "_levels", ("info",)):
                original(header)

        setattr(describe_environment, _MARK, True)
        debugpy_log.describe_environment = describe_environment
        return True
    except Exception as exc:  # a debugpy without that function: it just costs the CPU
        log(f"debugpy start-up left as it is in pid {os.getpid()}: {describe(exc)}")
        return False


def in_adapter(argv: Sequence[str] | None = None) -> bool:
    """From ``sitecustomize``: patch debugpy's adapter subprocess of one of our ranks
    (:func:`remote_debug.container.rank.nodelay.our_rank_adapter`); anything else returns False at once."""
    try:
        from remote_debug.container.rank import nodelay

        parent = nodelay.our_rank_adapter(argv)
        if parent is None:
            return False
        nodelay.import_adapter_debugpy(parent)  # the adapter's own copy, which its __main__ then uses
    except Exception as exc:
        log(f"debugpy adapter start-up left as it is in pid {os.getpid()}: {describe(exc)}")
        return False
    return skip_unread_environment_report()
