"""``python -m remote_debug.container [--] CMD...``: run a training command under the debug hook.

``python -m remote_debug.container --node-daemon --parent-pid PID`` runs the node's services for
a job whose entry command could not be wrapped (see ``bootstrap``).

``python -m remote_debug.container --adopt-node [--probe | REQUEST]`` adopts the ranks of the node it runs
on (``remote-debug adopt JOB`` runs it over an SSM shell session; see ``adopt/node.py``).

The hook is Python 3.10+ code, but a training image may ship an older interpreter, and the hook
must never break training.  So this file checks the version before importing any of it, and on an
older Python logs one line and ``exec``s the command as it is: same process, stdio, signals and
exit code, exactly as if the job had no hook.  For that check to run at all, this file and the
package ``__init__`` files Python imports before it must load on Python 3.6+: no
``from __future__ import annotations`` (3.7+), no syntax newer than 3.6, and annotations only as
strings or plain names (older interpreters evaluate them when the function is defined).
``tests/container/test_old_python.py`` checks all of that.
"""

import os
import sys
from collections.abc import Callable, Sequence

MIN_PYTHON = (3, 10)
DAEMON_FLAG = "--node-daemon"  # bootstrap.DAEMON_FLAG, which is 3.10+ code (a test keeps them equal)
ADOPT_FLAG = "--adopt-node"
# Set for the command's processes, so that our sitecustomize (when the job's environment injects it)
# does not repeat the line in each of them.
OLD_PYTHON_REPORTED = "REMOTE_DEBUG_OLD_PYTHON_REPORTED"
USAGE = "usage: python -m remote_debug.container [--] COMMAND [ARGS...]"


def old_python(version: "Sequence[int] | None" = None) -> "str | None":
    """The line to log when ``version`` (default: this interpreter's) is too old for the hook, else None."""
    found = tuple(sys.version_info[:3] if version is None else version[:3])
    if found[:2] >= MIN_PYTHON:
        return None
    needed = ".".join(str(part) for part in MIN_PYTHON)
    return (
        f"[remote-debug] remote_debug needs Python >= {needed}, found {'.'.join(str(part) for part in found)}; "
        "running the training command without debugging"
    )


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not stop the training command
        pass


def run_without_debugging(args: "list[str]", execvp: "Callable[[str, list[str]], object]" = os.execvp) -> int:
    """Replace this process with the command (``[--] CMD...``), as the job would run it without the hook."""
    if args[:1] == [DAEMON_FLAG]:
        return 0  # nothing to serve without the hook
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        _say(USAGE)
        return 2
    os.environ[OLD_PYTHON_REPORTED] = "1"
    for stream in (sys.stdout, sys.stderr):  # exec drops what Python still buffers
        try:
            stream.flush()
        except Exception:
            pass
    try:
        execvp(args[0], args)
    except OSError as exc:  # what a shell reports: 127 not found, 126 not executable
        _say(f"[remote-debug] cannot run {args[0]}: {exc.strerror or exc}")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 0  # only a stand-in execvp returns


def main(
    argv: "Sequence[str] | None" = None,
    version: "Sequence[int] | None" = None,
    execvp: "Callable[[str, list[str]], object]" = os.execvp,
) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    problem = old_python(version)
    if problem is not None:
        if args[:1] == [ADOPT_FLAG]:
            _say(problem)  # the adopter asked for this interpreter: there is no command to run instead
            return 2
        if args[:1] != [DAEMON_FLAG]:
            _say(problem)
        return run_without_debugging(args, execvp)
    if args[:1] == [ADOPT_FLAG]:
        from remote_debug.container.node.adopt.on_node import main as adopt_main

        return adopt_main(args[1:])
    from remote_debug.container.node.bootstrap import main as daemon_main
    from remote_debug.container.node.hook import main as hook_main

    if args[:1] == [DAEMON_FLAG]:
        return daemon_main(args[1:])
    return hook_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
