"""When the hook is the container's PID 1, it must also be its init: reap orphans, pass signals on.

SageMaker runs the image's entry as the container's first process, and a wrapped ``ContainerEntrypoint``
``exec``s into the hook: the hook is PID 1.  Every process whose parent dies is then re-parented to it - a
daemonized helper, the grandchild of a shell, a DataLoader worker whose rank crashed - and stays a zombie until
PID 1 waits for it.  The hook's own waits are for its own children (the command, sshd), so such orphans piled
up in the process table for the job's whole life.

The fix is tini's: at start, PID 1 forks.  The child goes on as the hook (its pid is what the node manifest
names; its children, the command included, are its own as before); PID 1 stays behind as a minimal init that
forwards the stop signals it receives to the hook, reaps every child that reaches it, and exits with the hook's
status when the hook ends.  Anywhere else (not PID 1) nothing changes.  A failed fork is logged and the hook
runs as before: never a reason for training not to run.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

from remote_debug.container.log import log

# what the platform (or docker) may send to PID 1, and the hook's own control signals (run_slot.py)
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def become_init_if_pid1(pid: Callable[[], int] = os.getpid) -> None:
    """Returns in the process that goes on as the hook; when this is PID 1, PID 1 itself never returns."""
    if pid() != 1:
        return
    try:
        hook = os.fork()
    except OSError as exc:
        log(f"running as the container's PID 1 without an init: cannot fork ({exc}); orphans stay unreaped")
        return
    if hook == 0:
        return  # the hook, as before
    _serve_as_init(hook)


def _serve_as_init(hook: int) -> None:
    def pass_on(signum: int, _frame: object) -> None:
        try:
            os.kill(hook, signum)
        except ProcessLookupError:
            pass

    for sig in PASSED_ON:
        signal.signal(sig, pass_on)
    while True:
        try:
            reaped, status = os.waitpid(-1, 0)  # the hook and every orphan that reaches PID 1
        except ChildProcessError:
            os._exit(1)  # not possible while the hook lives: it is our child
        if reaped == hook:
            sys.stdout.flush()
            os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status))
