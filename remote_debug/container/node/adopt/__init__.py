"""Adopting a job started without remote_debug: its ranks found in /proc, checked, and given the rank agent
(``procs`` -> ``checks`` -> ``inject`` -> ``agent`` inside the rank; ``node`` runs the steps for one node)."""
