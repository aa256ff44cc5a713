"""The PyCharm part of the contract between the laptop (``laptop/``) and the job (``container/``).

With ``ide="pycharm"`` the direction of the debug connection flips: each rank connects OUT to a
port on its node's loopback, which the laptop's SSH connection reverse-forwards to PyCharm's
"Python Debug Server".  Two things cross the boundary besides the spec's environment variables:

* a **hello line** the laptop's forwarder writes first on every forwarded connection, before any
  byte from the IDE: whether the IDE answered on the laptop (so a rank never waits on a tunnel
  with nobody behind it), the IDE project root for path mapping, and the PyCharm build the rank's
  pydevd-pycharm should match.  A plain ``ssh -R`` sends no hello; ranks accept that too.
* the **version policy**: pydevd-pycharm must match the IDE build (``pydevd-pycharm~=<build>``,
  JetBrains' own advice); the laptop computes the requirement, the job installs and checks it.

Stdlib only, like ``contract/spec.py``: the container side imports this inside the training image.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from remote_debug.contract.spec import ContractError

HELLO_VERSION = 1
HELLO_PREFIX = b"REMOTE-DEBUG-PYCHARM/"  # + version + " " + JSON + "\n"
HELLO_MAX_BYTES = 8192  # a hello is one short line; more means the far end is not our forwarder
PYDEVD_DIST = "pydevd-pycharm"

# PyCharm builds as product-info.json / build.txt / Help > About show them: "PY-241.14494.241",
# "PC-233.13135.95", "241.14494.241".  Only numeric builds map to a pydevd-pycharm release.
_BUILD_RE = re.compile(r"^(?:(?:PY|PC|PCA|PCC|PCP)-)?(\d{3})\.(\d+)(?:\.(\d+))?$")


@dataclass(frozen=True)
class Hello:
    """What the laptop tells a rank on each forwarded connection, before the IDE speaks."""

    ok: bool  # the IDE answered on the laptop; False: the line is followed by EOF
    ide_root: str = ""  # the IDE project path that maps to the job's code dir ("" = no mapping)
    build: str = ""  # the PyCharm build the laptop detected or was told ("" = unknown/not checked)
    error: str = ""  # why not ok, one line, for the rank's log
    version: int = HELLO_VERSION

    def encode(self) -> bytes:
        body = {"ok": self.ok, "ide_root": self.ide_root, "build": self.build, "error": self.error}
        line = HELLO_PREFIX + f"{self.version} ".encode() + json.dumps(body, separators=(",", ":")).encode()
        if b"\n" in line or len(line) >= HELLO_MAX_BYTES:
            raise ContractError("PyCharm hello line is too long or not one line")
        return line + b"\n"

    @classmethod
    def decode(cls, line: bytes) -> Hello:
        if not line.startswith(HELLO_PREFIX):
            raise ContractError("not a remote-debug PyCharm hello line")
        head, _, body = line[len(HELLO_PREFIX) :].strip().partition(b" ")
        try:
            version = int(head)
            data: Any = json.loads(body)
        except ValueError:
            raise ContractError("malformed remote-debug PyCharm hello line") from None
        if version != HELLO_VERSION:
            raise ContractError(
                f"PyCharm hello version {version} is not supported (this remote_debug speaks {HELLO_VERSION}): "
                "use the same remote-debug version in the job and on the laptop"
            )
        if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
            raise ContractError("malformed remote-debug PyCharm hello line")
        return cls(
            ok=data["ok"],
            ide_root=str(data.get("ide_root") or ""),
            build=str(data.get("build") or ""),
            error=str(data.get("error") or ""),
            version=version,
        )


# --- version policy ------------------------------------------------------------------------------


def normalize_build(build: str) -> str:
    """``"PY-241.14494.241"`` -> ``"241.14494.241"``; ContractError for builds pip cannot match."""
    text = build.strip()
    m = _BUILD_RE.fullmatch(text)
    if not m:
        raise ContractError(
            f"PyCharm build {text[:60]!r} is not a release build like 241.14494.241 "
            "(see Help > About in PyCharm): pass --pycharm-build with that number"
        )
    return ".".join(part for part in m.groups() if part is not None)


def requirement(build: str) -> str:
    """The pip requirement for a job debugged from PyCharm ``build``: ``pydevd-pycharm~=241.14494.241``.

    ``~=`` (JetBrains' advice) accepts later bug-fix releases of the same build line and nothing
    from another IDE version, whose wire protocol may differ silently.
    """
    return f"{PYDEVD_DIST}~={normalize_build(build)}"


def _numbers(version: str) -> tuple[int, ...] | None:
    parts = version.strip().split(".")
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def satisfies(installed: str, build: str) -> bool:
    """Whether pydevd-pycharm ``installed`` meets ``~=<build>`` (PEP 440 compatible release).

    ``~=A.B.C`` means ``>=A.B.C, ==A.B.*``; ``~=A.B`` means ``>=A.B, ==A.*``.  pydevd-pycharm versions
    are plain dotted numbers, so this needs no ``packaging`` in the training image.
    """
    have = _numbers(installed)
    want = _numbers(normalize_build(build))
    if have is None or want is None:
        return False
    prefix = want[:-1]
    padded = have + (0,) * max(0, len(want) - len(have))
    return padded[: len(prefix)] == prefix and padded >= want
