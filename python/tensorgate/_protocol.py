"""Framing of the control channel: a 4-byte little-endian length, then that many bytes of UTF-8
JSON holding one object.

Only small headers travel here (tensor bytes live in the shared-memory arenas), so a frame larger
than ``MAX_FRAME_BYTES`` means the stream is corrupt, not that a message is big.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

_LENGTH = struct.Struct("<I")

#: Headers are a few hundred bytes; anything near this size is a broken stream.
MAX_FRAME_BYTES = 16 * 1024 * 1024


class ProtocolError(Exception):
    """The byte stream does not hold a valid frame; the channel cannot be trusted any more."""


def encode(message: dict[str, Any]) -> bytes:
    """One frame: length prefix and compact JSON (no NaN: JSON has none)."""
    payload = json.dumps(
        message, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")
    if len(payload) > MAX_FRAME_BYTES:
        raise ProtocolError(f"message of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    return _LENGTH.pack(len(payload)) + payload


def decode(payload: bytes) -> dict[str, Any]:
    """The JSON object inside one frame's payload."""
    try:
        message = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError(f"frame holds a JSON {type(message).__name__}, not an object")
    return message


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    """``n`` bytes, or None when the peer closed the stream before the first byte."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            if got == 0:
                return None
            raise ProtocolError(f"stream ended inside a frame ({got} of {n} bytes)")
        got += k
    return bytes(buf)


def read_message(sock: socket.socket) -> dict[str, Any] | None:
    """The next message, or None on a clean end of stream (the peer went away)."""
    head = _read_exactly(sock, _LENGTH.size)
    if head is None:
        return None
    (length,) = _LENGTH.unpack(head)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame length {length} exceeds {MAX_FRAME_BYTES}")
    payload = _read_exactly(sock, length) if length else b""
    if payload is None:
        raise ProtocolError("stream ended after a frame length")
    return decode(payload)


def write_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Sends one message as a single ``sendall`` so frames never interleave."""
    sock.sendall(encode(message))
