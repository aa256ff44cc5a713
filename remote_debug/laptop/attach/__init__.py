"""The attach loop: from a job name to IDE-ready ranks, kept reachable (and the demo built on it)."""
