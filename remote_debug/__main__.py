"""``python -m remote_debug`` is the CLI (the ProxyCommand uses this form: no PATH needed)."""

from remote_debug.console import main

main()
