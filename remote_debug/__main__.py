"""``python -m remote_debug`` is the CLI (the ProxyCommand uses this form: no PATH needed)."""

import sys

if sys.argv[1:2] == ["proxy"]:
    # The ProxyCommand of every ssh connection: a fast path that skips the CLI's imports.
    from remote_debug.local.proxy import main as proxy_main

    raise SystemExit(proxy_main(sys.argv[2:]))

from remote_debug.cli import main

main()
