"""The ``remote-debug`` console script and ``python -m remote_debug``.

Not ``remote_debug.cli:main`` directly: importing the CLI and its command takes 0.1-0.3 s, and
a Ctrl-C in that window must be recorded too (see ``remote_debug.laptop.core.interrupts``), while callers that
import the CLI in-process (tests, the SageMaker integration) keep their own SIGINT handling.
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["proxy"]:
        # The ProxyCommand of every ssh connection: a fast path that skips the CLI's imports (and
        # handles SIGINT itself while the session-manager-plugin runs).
        from remote_debug.laptop.connection.proxy import main as proxy_main

        code = proxy_main(sys.argv[2:])
        if code is not None:  # None: --help or a usage error, which the full CLI words like every command's
            raise SystemExit(code)
    from remote_debug.laptop.core import interrupts
    from remote_debug.laptop.core.errors import EXIT_INTERRUPTED

    interrupts.install()
    try:
        from remote_debug.cli import main as cli_main
    except BaseException:
        # A Ctrl-C while the commands import surfaces wherever the import was: inside a class body's
        # ``__set_name__`` Python 3.11 wraps it in a RuntimeError (seen in CI), so it is recognised
        # by the recorded request, not by its type.
        if interrupts.requested():
            # as remote_debug.cli.exit_for words a Ctrl-C, which cannot be imported here: that import was cut short
            sys.stderr.write("remote-debug: error: interrupted\n")
            raise SystemExit(EXIT_INTERRUPTED) from None
        raise

    cli_main()
