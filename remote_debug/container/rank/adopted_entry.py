"""The rank agent's entry inside an adopted process: the same rank as if the hook had started it.

``inject`` queues a bootstrap (:func:`bootstrap_source`) that the target's main thread runs between two
bytecodes.  It puts our bundle (``remote_debug`` and ``debugpy``, nothing else) on ``sys.path`` and calls
:func:`start`, which adds the job's spec to the environment and runs :func:`remote_debug.container.rank.agent.activate`
exactly as ``sitecustomize`` does at the start of a hooked rank: lazy by default (no debugpy, no tracer
until a debugger asks through the control channel), a rank document in the node's manifest dir, the
control channel on 127.0.0.1 behind the uid gate and the job's token, the tracer removed after the last
debugger detaches.

Idempotent: a process that already has a rank claim (adopted before, or started under the hook) is
left as it is.  It never raises (see ``inject``'s docstring): errors are one log line on the rank's
stderr, and the adopter, which confirms through the rank document and not through gdb's exit code,
reports the rank as not adopted.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from remote_debug.container.log import describe, log
from remote_debug.contract.spec import ENV_CLAIMED_BY


def bootstrap_source(bundle: Path, config: Path) -> str:
    """The file a rank executes: our bundle first on sys.path (only our two packages live there, so
    nothing of the user's is shadowed but an older debugpy), then :func:`start`."""
    return (
        "import sys\n"
        f"if {str(bundle)!r} not in sys.path:\n"
        f"    sys.path.insert(0, {str(bundle)!r})\n"
        "from remote_debug.container.rank.adopted_entry import start\n"
        f"start({str(config)!r})\n"
    )


def start(config_path: str) -> None:
    """Activate this process as a rank of the adopted job described in ``config_path``; never raises."""
    try:
        if os.environ.get(ENV_CLAIMED_BY):
            log(f"pid {os.getpid()} is already debuggable (claimed by {os.environ[ENV_CLAIMED_BY]}): left as it is")
            return
        config = json.loads(Path(config_path).read_text())
        added = {str(k): str(v) for k, v in dict(config["env"]).items()}
        # in os.environ too: what the rank starts from now on (debugpy's adapter, workers) must see the
        # claim and the spec, as under the hook
        os.environ.update(added)
        from remote_debug.container.rank.agent import activate

        reporter = activate(dict(os.environ), sys.orig_argv)
        if reporter is None:
            log(f"pid {os.getpid()} was not adopted: it is not a rank (a launcher?)")
        else:
            log(f"pid {os.getpid()} adopted as rank {reporter.endpoint.rank}: the debugger attaches on request")
    except BaseException as exc:  # this runs inside the user's training step
        log(f"adopting pid {os.getpid()} failed: {describe(exc)}")
