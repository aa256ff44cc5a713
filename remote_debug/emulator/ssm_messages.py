"""The Session Manager data channel's wire format, as AWS's ``session-manager-plugin`` speaks it.

Every binary WebSocket frame is one ``ClientMessage`` (upstream ``src/message/clientmessage.go`` and
``messageparser.go``), big-endian::

    | HL u32 | MessageType 32 B | SchemaVersion u32 | CreatedDate u64 (epoch ms) | SequenceNumber i64 |
    | Flags u64 | MessageId 16 B | PayloadDigest 32 B (SHA-256) | PayloadType u32 | PayloadLength u32 | Payload |

``HL`` is 116, the offset of PayloadLength, so the payload starts at byte 120. The message type is
space-padded ASCII. The message id is a UUID written as its low 8 bytes then its high 8 bytes (the Go
code puts "least significant" first). Payloads are JSON for the control payloads (handshake,
acknowledge, channel_closed) and raw bytes for stream data.

Port-forwarding sessions carry smux v1 (github.com/xtaci/smux) inside the stream bytes: frames of
``ver u8 | cmd u8 | length u16 LE | stream id u32 LE | data``; :class:`SmuxParser` splits them.

Decoding never trusts a length the peer sent: the header must be whole, ``HL`` exact, the payload
length equal to what is actually there and under a cap, and the digest right.
"""

from __future__ import annotations

import enum
import hashlib
import json
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

# Message types (the 32-byte MessageType field).
INPUT_STREAM_DATA = "input_stream_data"  # client -> agent
OUTPUT_STREAM_DATA = "output_stream_data"  # agent -> client
ACKNOWLEDGE = "acknowledge"
CHANNEL_CLOSED = "channel_closed"
START_PUBLICATION = "start_publication"
PAUSE_PUBLICATION = "pause_publication"

HEADER_LENGTH = 116  # the value of the HL field
PAYLOAD_OFFSET = HEADER_LENGTH + 4
_HEADER = struct.Struct(">I32sIQqQ16s32sII")
assert _HEADER.size == PAYLOAD_OFFSET
DEFAULT_MAX_PAYLOAD = 64 * 1024  # the plugin sends 1 KiB chunks; handshake JSON is far smaller

# Flags on a stream message (bit 0 SYN: first of the stream; bit 1 FIN). Acknowledge and
# channel_closed messages carry 3, as the agent sends them.
FLAG_SYN = 1
FLAG_FIN = 2
CONTROL_FLAGS = FLAG_SYN | FLAG_FIN


class PayloadType(enum.IntEnum):
    OUTPUT = 1
    ERROR = 2
    SIZE = 3
    PARAMETER = 4
    HANDSHAKE_REQUEST = 5
    HANDSHAKE_RESPONSE = 6
    HANDSHAKE_COMPLETE = 7
    ENC_CHALLENGE_REQUEST = 8
    ENC_CHALLENGE_RESPONSE = 9
    FLAG = 10
    STDERR = 11
    EXIT_CODE = 12


class PayloadTypeFlag(enum.IntEnum):
    """The u32 carried by a ``PayloadType.FLAG`` payload."""

    DISCONNECT_TO_PORT = 1  # basic port forwarding: the local connection closed
    TERMINATE_SESSION = 2  # the user pressed Ctrl-C (port sessions)
    CONNECT_TO_PORT_ERROR = 3  # agent -> client: dialing the target port failed (smux sessions)


class ClientMessageError(ValueError):
    """A frame that is not a well-formed ClientMessage (or a payload that is not what it claims)."""


@dataclass(frozen=True)
class ClientMessage:
    message_type: str
    sequence_number: int
    payload_type: int
    payload: bytes
    flags: int = 0
    schema_version: int = 1
    created_date: int = 0  # epoch ms; 0 means "now" when encoding
    message_id: uuid.UUID | None = None  # None means a fresh uuid4 when encoding


def encode(message: ClientMessage) -> bytes:
    kind = message.message_type.encode("ascii")
    if not kind or len(kind) > 32:
        raise ClientMessageError(f"message type {message.message_type!r} does not fit 32 bytes")
    mid = (message.message_id or uuid.uuid4()).bytes
    header = _HEADER.pack(
        HEADER_LENGTH,
        kind.ljust(32, b" "),
        message.schema_version,
        message.created_date or int(time.time() * 1000),
        message.sequence_number,
        message.flags,
        mid[8:] + mid[:8],
        hashlib.sha256(message.payload).digest(),
        message.payload_type,
        len(message.payload),
    )
    return header + message.payload


def decode(raw: bytes, max_payload: int = DEFAULT_MAX_PAYLOAD) -> ClientMessage:
    if len(raw) < PAYLOAD_OFFSET:
        raise ClientMessageError(f"truncated message: {len(raw)} bytes, the header alone is {PAYLOAD_OFFSET}")
    (hl, kind, schema, created, seq, flags, mid, digest, ptype, plen) = _HEADER.unpack_from(raw)
    if hl != HEADER_LENGTH:
        raise ClientMessageError(f"header length {hl}, expected {HEADER_LENGTH}")
    if plen > max_payload:
        raise ClientMessageError(f"payload length {plen} over the limit of {max_payload}")
    if plen != len(raw) - PAYLOAD_OFFSET:
        raise ClientMessageError(f"payload length field says {plen}, the frame holds {len(raw) - PAYLOAD_OFFSET}")
    try:
        message_type = kind.strip(b"\x00").decode("ascii").strip()
    except UnicodeDecodeError:
        raise ClientMessageError("message type is not ASCII") from None
    if not message_type or not message_type.isprintable():
        raise ClientMessageError("message type missing")
    payload = bytes(raw[PAYLOAD_OFFSET:])
    publication = message_type in (START_PUBLICATION, PAUSE_PUBLICATION)
    if not publication and created == 0:
        raise ClientMessageError("CreatedDate missing")
    # Like both ends upstream, an empty payload's digest is not checked.
    if plen and hashlib.sha256(payload).digest() != digest:
        raise ClientMessageError("payload digest does not match")
    return ClientMessage(message_type, seq, ptype, payload, flags, schema, created, uuid.UUID(bytes=mid[8:] + mid[:8]))


def _json_object(payload: bytes | str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise ClientMessageError(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise ClientMessageError(f"{what} is not a JSON object")
    return value


def _json_bytes(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# --- OpenDataChannel (the first, text, frame) ------------------------------------------------------


@dataclass(frozen=True)
class OpenDataChannel:
    token_value: str
    client_id: str
    client_version: str


def parse_open_data_channel(text: str | bytes) -> OpenDataChannel:
    body = _json_object(text, "OpenDataChannel")
    token = body.get("TokenValue")
    if not isinstance(token, str) or not token:
        raise ClientMessageError("OpenDataChannel without TokenValue")
    client_id, version = body.get("ClientId", ""), body.get("ClientVersion", "")
    return OpenDataChannel(
        token, client_id if isinstance(client_id, str) else "", version if isinstance(version, str) else ""
    )


# --- payloads ---------------------------------------------------------------------------------------


def handshake_request(agent_version: str, session_type: str, properties: dict[str, str]) -> bytes:
    return _json_bytes(
        {
            "AgentVersion": agent_version,
            "RequestedClientActions": [
                {
                    "ActionType": "SessionType",
                    "ActionParameters": {"SessionType": session_type, "Properties": properties},
                },
            ],
        }
    )


@dataclass(frozen=True)
class HandshakeResponse:
    client_version: str
    errors: tuple[str, ...]  # the client's Errors plus any action that did not succeed


def parse_handshake_response(payload: bytes) -> HandshakeResponse:
    body = _json_object(payload, "HandshakeResponse")
    version = body.get("ClientVersion")
    errors = [str(e) for e in body.get("Errors") or [] if e]
    actions = body.get("ProcessedClientActions") or []
    if not isinstance(actions, list):
        raise ClientMessageError("ProcessedClientActions is not a list")
    for action in actions:
        if isinstance(action, dict) and action.get("ActionStatus") != 1:  # 1 = Success
            errors.append(f"{action.get('ActionType')} failed on the client: {action.get('Error') or 'no reason'}")
    return HandshakeResponse(version if isinstance(version, str) else "", tuple(errors))


def handshake_complete(elapsed_seconds: float, customer_message: str = "") -> bytes:
    # HandshakeTimeToComplete is a Go time.Duration: integer nanoseconds.
    return _json_bytes({"HandshakeTimeToComplete": int(elapsed_seconds * 1e9), "CustomerMessage": customer_message})


def flag_payload(flag: PayloadTypeFlag) -> bytes:
    return struct.pack(">I", flag)


def parse_flag(payload: bytes) -> int:
    if len(payload) != 4:
        raise ClientMessageError(f"flag payload of {len(payload)} bytes, expected 4")
    return int(struct.unpack(">I", payload)[0])


def acknowledge(message: ClientMessage) -> ClientMessage:
    """The acknowledge message for a received stream message (sequence 0, flags 3, as the agent sends)."""
    content = {
        "AcknowledgedMessageType": message.message_type,
        "AcknowledgedMessageId": str(message.message_id),
        "AcknowledgedMessageSequenceNumber": message.sequence_number,
        "IsSequentialMessage": True,
    }
    return ClientMessage(ACKNOWLEDGE, 0, 0, _json_bytes(content), flags=CONTROL_FLAGS)


def parse_acknowledge(payload: bytes) -> int:
    """The acknowledged sequence number."""
    seq = _json_object(payload, "acknowledge").get("AcknowledgedMessageSequenceNumber")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ClientMessageError("acknowledge without a sequence number")
    return seq


def channel_closed(session_id: str, target: str, output: str = "") -> ClientMessage:
    """The service's message that ends the session; the plugin prints ``output`` (if any) and exits."""
    message_id = uuid.uuid4()
    content = {
        "MessageId": str(message_id),
        "CreatedDate": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "DestinationId": target,
        "SessionId": session_id,
        "MessageType": CHANNEL_CLOSED,
        "SchemaVersion": 1,
        "Output": output,
    }
    return ClientMessage(CHANNEL_CLOSED, 0, 0, _json_bytes(content), flags=CONTROL_FLAGS, message_id=message_id)


# --- smux v1, inside port-forwarding stream data -----------------------------------------------------

SMUX_VERSION = 1
SMUX_SYN, SMUX_FIN, SMUX_PSH, SMUX_NOP = 0, 1, 2, 3
SMUX_HEADER = struct.Struct("<BBHI")
SMUX_MAX_DATA = 0xFFFF


@dataclass(frozen=True)
class SmuxFrame:
    cmd: int
    stream_id: int
    data: bytes = b""


def encode_smux(cmd: int, stream_id: int, data: bytes = b"") -> bytes:
    if len(data) > SMUX_MAX_DATA:
        raise ValueError("smux frame data over 65535 bytes")
    return SMUX_HEADER.pack(SMUX_VERSION, cmd, len(data), stream_id) + data


class SmuxParser:
    """Splits a byte stream into smux v1 frames; holds at most one partial frame (< 64 KiB + 8)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[SmuxFrame]:
        self._buffer += data
        while len(self._buffer) >= SMUX_HEADER.size:
            version, cmd, length, sid = SMUX_HEADER.unpack_from(self._buffer)
            if version != SMUX_VERSION or cmd not in (SMUX_SYN, SMUX_FIN, SMUX_PSH, SMUX_NOP):
                # v2's window updates (cmd 4) are never sent by the plugin, which runs v1.
                raise ClientMessageError(f"smux frame version {version} cmd {cmd} not supported")
            end = SMUX_HEADER.size + (length if cmd == SMUX_PSH else 0)
            if len(self._buffer) < end:
                return
            frame = SmuxFrame(cmd, sid, bytes(self._buffer[SMUX_HEADER.size : end]))
            del self._buffer[:end]
            yield frame
