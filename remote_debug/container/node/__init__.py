"""The node side: the hook that wraps the entry command, the node daemon, sshd, manifests, keep-alive, adopt."""
