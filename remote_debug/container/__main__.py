"""``python -m remote_debug.container [--] CMD...``: run a training command under the debug hook.

``python -m remote_debug.container --node-daemon --parent-pid PID`` runs the node's services for
a job whose entry command could not be wrapped (see ``bootstrap``).
"""

import sys

from remote_debug.container.bootstrap import DAEMON_FLAG
from remote_debug.container.bootstrap import main as daemon_main
from remote_debug.container.hook import main

if __name__ == "__main__":
    if sys.argv[1:2] == [DAEMON_FLAG]:
        raise SystemExit(daemon_main(sys.argv[2:]))
    raise SystemExit(main())
