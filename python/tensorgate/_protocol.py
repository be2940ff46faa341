"""Framing of the control channel: a 4-byte little-endian length, then that many bytes of UTF-8
JSON holding one object.

Only small headers travel here (tensor bytes live in the shared-memory arenas), so a frame larger
than ``MAX_FRAME_BYTES`` means the stream is corrupt, not that a message is big.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - exercised on interpreters without it
    orjson = None  # type: ignore[assignment]

_LENGTH = struct.Struct("<I")

#: Headers are a few hundred bytes; anything near this size is a broken stream.
MAX_FRAME_BYTES = 16 * 1024 * 1024


class ProtocolError(Exception):
    """The byte stream does not hold a valid frame; the channel cannot be trusted any more."""


#: Compact JSON. Built once: ``json.dumps`` with any non-default option builds a new encoder per
#: call. ``allow_nan=False``: JSON has no NaN or infinity, and a reply must parse on the other end.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _finite(value: Any) -> Any:
    """``value`` with every float JSON cannot hold (NaN, infinities) as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def encode_stdlib(message: dict[str, Any]) -> bytes:
    """The payload by the standard library's encoder. A float JSON cannot hold (a NaN in the
    answers a processing handler returned) becomes null, as orjson writes it."""
    try:
        return _JSON.encode(message).encode("utf-8")
    except ValueError:
        return _JSON.encode(_finite(message)).encode("utf-8")


def encode_orjson(message: dict[str, Any]) -> bytes:
    """The payload by orjson: the same JSON as ``encode_stdlib`` (floats may be spelt differently,
    ``1e-7`` for ``1e-07``), in a tenth of the time (0.24 against 3.5 µs for an infer reply). What
    orjson refuses (an int past 64 bits) goes to the standard library."""
    try:
        return orjson.dumps(message, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return encode_stdlib(message)


def decode_stdlib(payload: bytes) -> Any:
    return json.loads(payload.decode("utf-8"))


def decode_orjson(payload: bytes) -> Any:
    return orjson.loads(payload)


# Every request pays for one decode and one encode: orjson where the interpreter has it (the
# runtime's requirements do), the standard library otherwise (a TENSORGATE_PYTHON of the user's).
_payload_of, _message_of = (
    (encode_orjson, decode_orjson) if orjson is not None else (encode_stdlib, decode_stdlib)
)


def encode(message: dict[str, Any]) -> bytes:
    """One frame: length prefix and compact JSON."""
    payload = _payload_of(message)
    if len(payload) > MAX_FRAME_BYTES:
        raise ProtocolError(f"message of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    return _LENGTH.pack(len(payload)) + payload


def decode(payload: bytes) -> dict[str, Any]:
    """The JSON object inside one frame's payload."""
    try:
        message = _message_of(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:  # orjson's error is a JSONDecodeError
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


#: Bytes asked of the kernel per read: a whole header, usually with its length prefix, in one call.
_READ_CHUNK = 64 * 1024


class Channel:
    """The worker's end of the control channel: frames read through one buffer (one ``recv``
    per message rather than two), and an optional adaptive spin before blocking.

    Blocking in ``recv`` costs a sleep and a wake-up per request, and the sleep lets the core's
    caches and clock go cold, so the next forward runs slower too (on a 2-core VM a 0.09 ms
    forward took 0.19 ms after 1 ms asleep, 0.12 ms after 1 ms of spinning). While requests
    arrive closer together than ``spin_s``, the channel polls the socket without blocking for up
    to ``spin_s`` after each reply. It spins only when the previous wait was short enough that a
    spin would have caught it: a model called rarely never spins, and one hit back to back does,
    at the price of one core busy during the gaps (measured in bench/fixed-cost).
    """

    def __init__(self, sock: socket.socket, spin_s: float = 0.0) -> None:
        self.sock = sock
        self.spin_s = spin_s
        self._buffer = bytearray()
        #: Seconds the last wait for a message lasted (None: no wait measured yet).
        self._last_wait_s: float | None = None
        #: The peer closed its end: seen by a look that could not hand the end over at once.
        self._ended = False
        self.spins = 0
        self.spin_hits = 0

    @property
    def ended(self) -> bool:
        """Whether a look that never waits (``poll_message``) has seen the peer close its end."""
        return self._ended

    def set_spin(self, spin_s: float) -> None:
        self.spin_s = max(0.0, spin_s)

    def stats(self) -> dict[str, Any]:
        """The spin setting, how many waits began with a spin and how many of those it caught."""
        return {
            "spin_us": round(self.spin_s * 1e6),
            "spins": self.spins,
            "spin_hits": self.spin_hits,
        }

    def write_message(self, message: dict[str, Any]) -> None:
        self.sock.sendall(encode(message))

    def read_message(self) -> dict[str, Any] | None:
        """The next message, or None on a clean end of stream (the peer went away)."""
        while True:
            frame = self._take_frame()
            if frame is not None:
                return decode(frame)
            if not self._fill():
                if self._buffer:
                    raise ProtocolError(
                        f"stream ended inside a frame ({len(self._buffer)} bytes buffered)"
                    )
                return None

    def poll_message(self) -> dict[str, Any] | None:
        """The next message if it has arrived whole, else None at once: a look that never waits
        (the pipelining worker's, while the device runs the request before). A frame begun and
        not yet whole stays buffered for the next read; so does the end of the stream."""
        frame = self._take_frame()
        if frame is None and not self._ended:
            try:
                data = self.sock.recv(_READ_CHUNK, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            if not data:
                self._ended = True
                return None
            self._buffer += data
            frame = self._take_frame()
        return None if frame is None else decode(frame)

    def _take_frame(self) -> bytes | None:
        buffer = self._buffer
        if len(buffer) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(buffer)
        if length > MAX_FRAME_BYTES:
            raise ProtocolError(f"frame length {length} exceeds {MAX_FRAME_BYTES}")
        end = _LENGTH.size + length
        if len(buffer) < end:
            return None
        frame = bytes(buffer[_LENGTH.size : end])
        del buffer[:end]
        return frame

    def _fill(self) -> bool:
        """Appends what the socket has to the buffer, spinning first when that pays.

        False on end of stream."""
        if self._ended:
            return False
        start = time.perf_counter()
        spin = self.spin_s
        if spin > 0 and self._last_wait_s is not None and self._last_wait_s <= spin:
            self.spins += 1
            deadline = start + spin
            while True:
                try:
                    data = self.sock.recv(_READ_CHUNK, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    if time.perf_counter() < deadline:
                        continue
                    break
                self.spin_hits += 1
                self._last_wait_s = time.perf_counter() - start
                self._buffer += data
                return bool(data)
        data = self.sock.recv(_READ_CHUNK)
        self._last_wait_s = time.perf_counter() - start
        self._buffer += data
        return bool(data)
