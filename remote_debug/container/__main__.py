"""``python -m remote_debug.container [--] CMD...``: run a training command under the debug hook."""

from remote_debug.container.hook import main

if __name__ == "__main__":
    raise SystemExit(main())
