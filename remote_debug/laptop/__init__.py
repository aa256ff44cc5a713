"""Code that runs on the user's machine: job backends, ssh config, tunnels, IDE configs."""
