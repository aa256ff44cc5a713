"""Code that runs inside the training job: stdlib + debugpy only (never import ``remote_debug.laptop``)."""
