"""Iterating on a kept-alive job: sync the workspace, run the entry again, release."""
