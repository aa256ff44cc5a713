"""The rank agent: what runs inside every training process.

The strictest rules of the package: the standard library, debugpy/pydevd, the contract, ``oskit`` and
the few container modules both rooms share (``log``, ``knobs``, ``threads``, ``node_env``) - never the
node side.
"""
