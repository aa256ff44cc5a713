"""remote_debug's per-process hook: Python imports this at startup because the hook puts this
directory first on PYTHONPATH.  It gives each rank a debug listener without any change to the
training script or its launcher (see ``remote_debug.container.rank.agent``).

Two duties besides that:
* never fail the process: our part runs inside a catch-all and logs one line;
* never hide the user's (or the image's) own ``sitecustomize``: ours shadows it by being first on
  the path, so we find the next one on ``sys.path`` and execute it, as Python would have.

This file is imported as a top-level module, so it keeps its own imports minimal and names private.
Every Python process of the job runs it, whatever its version, while the hook is 3.10+ code: on an
older interpreter it only chains the next sitecustomize, after one line saying why debugging is
off.  So it must load on Python 3.6+ (no ``from __future__ import annotations``, no newer syntax,
plain-name annotations; ``tests/container/test_old_python.py``).
"""

import contextlib
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_INJECT_SUFFIX = os.path.join("remote_debug", "container", "inject")
# Copies of remote_debug.contract.spec.ENV_VERSION, .ENV_CLAIMED_BY and
# remote_debug.container.__main__.OLD_PYTHON_REPORTED:
# importing either module is what an old interpreter must not do (a test keeps them equal).
_SPEC_VERSION_ENV = "REMOTE_DEBUG_SPEC_VERSION"
_OLD_PYTHON_REPORTED = "REMOTE_DEBUG_OLD_PYTHON_REPORTED"
_CLAIMED_BY_ENV = "REMOTE_DEBUG_CLAIMED_BY"  # remote_debug.contract.spec.ENV_CLAIMED_BY


def _old_python() -> bool:
    """True on an interpreter older than the hook supports; says so once per process tree of a debug job."""
    if tuple(sys.version_info[:2]) >= (3, 10):
        return False
    if _SPEC_VERSION_ENV in os.environ and not os.environ.get(_OLD_PYTHON_REPORTED):
        os.environ[_OLD_PYTHON_REPORTED] = "1"  # this process's children stay quiet
        found = ".".join(str(part) for part in sys.version_info[:3])
        with contextlib.suppress(Exception):
            sys.stderr.write(
                "[remote-debug] remote_debug needs Python >= 3.10, found "
                + found
                + "; debugging is off in this process\n"
            )
            sys.stderr.flush()
    return True


def _remote_debug_activate() -> None:
    if _old_python():
        return
    try:
        import importlib.util

        if importlib.util.find_spec("remote_debug") is None:
            # Installed as a plain directory (e.g. shipped with the training code) rather than a
            # package: make it importable.  Appended, so it never shadows the user's modules.
            sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(_HERE))))
        from remote_debug.container.rank.debugpy_gate import gate_adapter
        from remote_debug.container.rank.debugpy_startup import in_adapter as lighten_adapter_startup
        from remote_debug.container.rank.nodelay import enable as enable_nodelay

        enable_nodelay()  # only acts in debugpy's adapter for one of our ranks (before rank's claim guard)
        lighten_adapter_startup()  # the same: no environment report that nobody reads (0.1 s CPU)
        gate_adapter()  # the same: our uid gate on the adapter's listeners (exits if it cannot)
        if os.environ.get(_CLAIMED_BY_ENV):
            # a rank's child (its debugpy adapter, a DataLoader worker): neither a node daemon nor a rank,
            # so the modules that decide those are not even imported (half this file's cost there)
            return
        from remote_debug.container.node.bootstrap import maybe_start_node_daemon
        from remote_debug.container.rank.agent import activate

        maybe_start_node_daemon()  # only when no hook serves this node (env-only injection)
        activate()
    except Exception as exc:  # activate() never raises; this covers a broken install
        with contextlib.suppress(Exception):
            sys.stderr.write(f"[remote-debug] debug listener not started: {type(exc).__name__}: {exc}\n")


def _is_ours(entry: str) -> bool:
    path = os.path.realpath(entry or os.getcwd())
    return path == os.path.realpath(_HERE) or path.endswith(os.sep + _INJECT_SUFFIX)


def _chain_next_sitecustomize() -> None:
    """Execute the ``sitecustomize`` that comes after ours on sys.path, if any.

    Errors in it propagate like they would without us (``site`` reports "Error in sitecustomize").
    """
    import importlib.machinery
    import importlib.util

    entries = list(sys.path)
    ours = [i for i, entry in enumerate(entries) if _is_ours(entry)]
    later = entries[ours[-1] + 1 :] if ours else entries
    for entry in later:
        if _is_ours(entry):  # another copy of this package's inject dir
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module  # later `import sitecustomize` sees theirs
        spec.loader.exec_module(module)
        return


_remote_debug_activate()
_chain_next_sitecustomize()
