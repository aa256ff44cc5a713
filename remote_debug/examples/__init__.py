"""Example training scripts shipped with remote_debug (the demo runs ``train_ddp.py``)."""
