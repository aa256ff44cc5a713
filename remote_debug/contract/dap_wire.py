"""DAP's wire format, once: ``Content-Length`` framed JSON messages (the headless client, the laptop's
forward that refuses a second debugger, and a rank's own DAP server that does the same all speak it).

Standard library only: it runs on both sides (``laptop/`` and ``container/``)."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Mapping
from typing import Any, BinaryIO

JsonDict = dict[str, Any]


def encode(message: Mapping[str, Any]) -> bytes:
    payload = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)


def read_message(reader: BinaryIO, *, max_header_line: int = -1, max_body: int | None = None) -> JsonDict | None:
    """One framed message, or None at a clean EOF between messages; ValueError when mangled.

    ``max_header_line`` / ``max_body`` bound what an untrusted peer can make us buffer.
    """
    length: int | None = None
    while True:
        line = reader.readline(max_header_line)
        if not line:
            if length is None:
                return None
            raise ValueError("EOF inside message headers")
        line = line.strip()
        if not line:
            if length is None:
                continue  # tolerate stray blank lines between messages
            break
        key, _, value = line.decode("ascii", "replace").partition(":")
        if key.strip().lower() == "content-length":
            length = int(value.strip())
    if max_body is not None and length > max_body:
        raise ValueError(f"DAP message of {length} bytes is over {max_body}")
    body = reader.read(length)
    if len(body) < length:
        raise ValueError("EOF inside message body")
    message = json.loads(body.decode("utf-8"))
    if not isinstance(message, dict):
        raise ValueError("DAP message is not a JSON object")
    return message


def refuse(client: socket.socket, message: str, timeout: float = 5.0) -> None:
    """Answer a DAP client's first request with ``success: false`` and ``message``, then close.

    An IDE shows a failed ``initialize`` as an error dialog with the message (VS Code does).
    """
    reader = None
    try:
        client.settimeout(timeout)
        reader = client.makefile("rb")
        request = read_message(reader, max_header_line=1024, max_body=1 << 20)
        if request is None:
            return
        response = {
            "seq": 1,
            "type": "response",
            "request_seq": int(request.get("seq", 0)),
            "success": False,
            "command": str(request.get("command", "")),
            "message": message,
            "body": {"error": {"id": 1, "format": message, "showUser": True}},
        }
        client.sendall(encode(response))
    except (OSError, ValueError, AttributeError):
        pass  # the client went away or spoke no DAP: closing is all that is left
    finally:
        if reader is not None:
            with contextlib.suppress(OSError):
                reader.close()
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)
        client.close()
