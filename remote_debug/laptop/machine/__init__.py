"""Jobs on this machine: the machine backend, its job dirs, and the supervisor programs."""
