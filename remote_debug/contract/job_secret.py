"""The per-job secret and what it proves (contract between the laptop and the job; stdlib only).

Every debug job carries a 256-bit secret in its environment (``REMOTE_DEBUG_JOB_SECRET``), next to
the client public key.  The laptop does not store it: it is derived from the job's private client
key (``laptop/core/keys.py``), so whoever can attach (holds the private key) can recompute it, and the job
can prove things to that laptop without a second file to keep.

Trust boundary: the secret is as private as the job's environment.  On SageMaker, that is whoever
may call DescribeTrainingJob on the job; on this machine, the user who launched it (and root).  Two
independent keys are derived from it, so a value that travels (the control token, sent to a rank
over its loopback port) never gives away the other:

* :func:`control_token` - the proof a control request carries (``container/rank/control.py``): a local
  process that cannot read the job's environment cannot make a rank listen, pause-safe or dump stacks;
* :func:`rank_proof` - what a rank answers to a client's fresh challenge before the client sends its
  token or any request: a process that bound a dead rank's freed port (the rank document still names
  it) cannot answer, so it never sees the token;
* :func:`manifest_mac` - the MAC on each manifest log line (``contract/manifest_lines.py``): whoever may write
  to the job's CloudWatch log group, but not read its environment, cannot move a host key, an SSM
  target or a port.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

SECRET_BYTES = 32
_SECRET_RE = re.compile(r"[0-9a-f]{64}")
_CONTROL_LABEL = b"remote-debug control token v1"
_MANIFEST_LABEL = b"remote-debug manifest mac v1"
_PROOF_LABEL = b"remote-debug control proof v1"
_CHALLENGE_RE = re.compile(r"[0-9a-f]{64}")


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


def new_challenge() -> str:
    """A fresh nonce for :func:`rank_proof` (256 bits, hex)."""
    return secrets.token_hex(32)


def check_challenge(challenge: object) -> str:
    if not isinstance(challenge, str) or not _CHALLENGE_RE.fullmatch(challenge):
        raise SecretError("a control challenge must be 64 lowercase hex digits")
    return challenge


def rank_proof(secret: str, challenge: str, pid: int, port: int) -> str:
    """The rank's answer to ``challenge``: bound to the direction (rank to client), to the process (its
    pid as the rank document says) and to its control port, so an answer relayed from another rank of
    the job (a squatter passing the challenge on) does not fit the document the client read."""
    message = b"rank->client\0" + check_challenge(challenge).encode() + b"\0%d\0%d" % (pid, port)
    return hmac.new(_subkey(secret, _PROOF_LABEL), message, hashlib.sha256).hexdigest()


def proof_matches(secret: str, challenge: str, pid: int, port: int, offered: object) -> bool:
    """Whether ``offered`` is :func:`rank_proof` of these (in constant time)."""
    expected = rank_proof(secret, challenge, pid, port)
    return isinstance(offered, str) and hmac.compare_digest(expected.encode(), offered.encode())


def manifest_mac(secret: str, payload: bytes) -> str:
    """The MAC of one manifest line's canonical payload."""
    return hmac.new(_subkey(secret, _MANIFEST_LABEL), payload, hashlib.sha256).hexdigest()


def mac_matches(secret: str, payload: bytes, offered: object) -> bool:
    return isinstance(offered, str) and hmac.compare_digest(manifest_mac(secret, payload).encode(), offered.encode())
