"""Reaching a job: ssh config, the ProxyCommand, tunnels per node, reverse forwards, the ranks' control channel."""
