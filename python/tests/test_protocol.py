"""Framing: 4-byte little-endian length + UTF-8 JSON object."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from tensorgate import _protocol


def test_encode_is_length_prefixed_compact_utf8_json():
    frame = _protocol.encode({"op": "ping", "id": 7, "name": "café"})
    payload = '{"op":"ping","id":7,"name":"café"}'.encode()
    assert frame == struct.pack("<I", len(payload)) + payload


def test_round_trip_over_a_socket_pair_with_fragmented_writes():
    a, b = socket.socketpair()
    messages = [{"id": i, "op": "infer", "inputs": [{"shape": [1, i]}]} for i in range(50)]
    stream = b"".join(_protocol.encode(m) for m in messages)

    def trickle() -> None:  # the reader must reassemble frames split at any byte
        for i in range(0, len(stream), 7):
            a.sendall(stream[i : i + 7])
        a.close()

    writer = threading.Thread(target=trickle)
    writer.start()
    got = []
    while (message := _protocol.read_message(b)) is not None:
        got.append(message)
    writer.join()
    b.close()
    assert got == messages


def test_write_message_then_read_message():
    a, b = socket.socketpair()
    _protocol.write_message(a, {"op": "hello", "formats": ["torchscript"]})
    assert _protocol.read_message(b) == {"op": "hello", "formats": ["torchscript"]}
    a.close()
    assert _protocol.read_message(b) is None  # clean EOF between frames
    b.close()


def test_eof_inside_a_frame_is_a_protocol_error():
    a, b = socket.socketpair()
    a.sendall(_protocol.encode({"op": "ping"})[:-2])
    a.close()
    with pytest.raises(_protocol.ProtocolError, match="inside a frame"):
        _protocol.read_message(b)
    b.close()


@pytest.mark.parametrize(
    ("payload", "match"),
    [(b"[1, 2]", "not an object"), (b"{nope", "not UTF-8 JSON"), (b"\xff\xfe", "not UTF-8 JSON")],
)
def test_bad_payloads_are_protocol_errors(payload, match):
    with pytest.raises(_protocol.ProtocolError, match=match):
        _protocol.decode(payload)


def test_oversized_length_is_refused_without_reading_it():
    a, b = socket.socketpair()
    a.sendall(struct.pack("<I", _protocol.MAX_FRAME_BYTES + 1))
    with pytest.raises(_protocol.ProtocolError, match="exceeds"):
        _protocol.read_message(b)
    a.close()
    b.close()
