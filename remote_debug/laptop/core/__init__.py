"""The laptop side's base: errors, state paths, locks, Ctrl-C, JobInfo, keys and the Backend interface."""
