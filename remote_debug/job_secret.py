"""The per-job secret and what it proves (contract between the laptop and the job; stdlib only).

Every debug job carries a 256-bit secret in its environment (``REMOTE_DEBUG_JOB_SECRET``), next to
the client public key.  The laptop does not store it: it is derived from the job's private client
key (``local/keys.py``), so whoever can attach (holds the private key) can recompute it, and the job
can prove things to that laptop without a second file to keep.

Trust boundary: the secret is as private as the job's environment.  On SageMaker, that is whoever
may call DescribeTrainingJob on the job; on this machine, the user who launched it (and root).  Two
independent keys are derived from it, so a value that travels (the control token, sent to a rank
over its loopback port) never gives away the other:

* :func:`control_token` - the proof a control request carries (``container/control.py``): a local
  process that cannot read the job's environment cannot make a rank listen, pause-safe or dump stacks;
* :func:`manifest_mac` - the MAC on each manifest log line (``manifest_lines.py``): whoever may write
  to the job's CloudWatch log group, but not read its environment, cannot move a host key, an SSM
  target or a port.
"""

from __future__ import annotations

import hashlib
import hmac
import re

SECRET_BYTES = 32
_SECRET_RE = re.compile(r"[0-9a-f]{64}")
_CONTROL_LABEL = b"remote-debug control token v1"
_MANIFEST_LABEL = b"remote-debug manifest mac v1"


class SecretError(ValueError):
    pass


def check_job_secret(secret: str) -> str:
    if not isinstance(secret, str) or not _SECRET_RE.fullmatch(secret):
        raise SecretError("the job secret must be 64 lowercase hex digits")
    return secret


def derive_job_secret(private_key: bytes) -> str:
    """The job secret of the client key whose private key file holds ``private_key``."""
    return hmac.new(private_key, b"remote-debug job secret v1", hashlib.sha256).hexdigest()


def _subkey(secret: str, label: bytes) -> bytes:
    return hmac.new(bytes.fromhex(check_job_secret(secret)), label, hashlib.sha256).digest()


def control_token(secret: str) -> str:
    """What a control request carries as ``"auth"``."""
    return _subkey(secret, _CONTROL_LABEL).hex()


def token_matches(secret: str, offered: object) -> bool:
    """Whether ``offered`` is the control token of ``secret`` (in constant time)."""
    return isinstance(offered, str) and hmac.compare_digest(control_token(secret).encode(), offered.encode())


def manifest_mac(secret: str, payload: bytes) -> str:
    """The MAC of one manifest line's canonical payload."""
    return hmac.new(_subkey(secret, _MANIFEST_LABEL), payload, hashlib.sha256).hexdigest()


def mac_matches(secret: str, payload: bytes, offered: object) -> bool:
    return isinstance(offered, str) and hmac.compare_digest(manifest_mac(secret, payload).encode(), offered.encode())
