"""Adopting a job started without remote_debug: on this machine, or on SageMaker."""
