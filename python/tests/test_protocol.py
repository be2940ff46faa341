"""Framing: 4-byte little-endian length + UTF-8 JSON object."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from tensorgate import _protocol


def test_encode_is_length_prefixed_compact_utf8_json():
    frame = _protocol.encode({"op": "ping", "id": 7, "name": "café"})
    payload = '{"op":"ping","id":7,"name":"café"}'.encode()
    assert frame == struct.pack("<I", len(payload)) + payload


def test_encode_refuses_what_json_cannot_hold():
    for value in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="JSON compliant"):
            _protocol.encode({"x": value})


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


def test_channel_reassembles_fragmented_frames_and_reads_joined_ones():
    a, b = socket.socketpair()
    messages = [{"id": i, "op": "infer", "inputs": [{"shape": [1, i]}]} for i in range(50)]
    stream = b"".join(_protocol.encode(m) for m in messages)
    a.sendall(stream[:100])  # several frames in one read, the last one cut short

    def trickle() -> None:
        for i in range(100, len(stream), 7):
            a.sendall(stream[i : i + 7])
        a.close()

    writer = threading.Thread(target=trickle)
    writer.start()
    channel = _protocol.Channel(b, spin_s=0.001)
    got = []
    while (message := channel.read_message()) is not None:
        got.append(message)
    writer.join()
    b.close()
    assert got == messages


def test_channel_eof_inside_a_frame_is_a_protocol_error():
    a, b = socket.socketpair()
    a.sendall(_protocol.encode({"op": "ping"})[:-2])
    a.close()
    with pytest.raises(_protocol.ProtocolError, match="inside a frame"):
        _protocol.Channel(b).read_message()
    b.close()


def test_channel_spins_only_while_messages_come_within_the_spin():
    a, b = socket.socketpair()
    channel = _protocol.Channel(b, spin_s=0.2)
    a.sendall(_protocol.encode({"id": 1}))
    assert channel.read_message() == {"id": 1}
    assert channel.stats()["spins"] == 0  # no wait measured yet: block
    # Arrives 20 ms into the next wait: the spin catches it.
    threading.Timer(0.02, lambda: a.sendall(_protocol.encode({"id": 2}))).start()
    assert channel.read_message() == {"id": 2}
    assert channel.stats() == {"spin_us": 200_000, "spins": 1, "spin_hits": 1}
    # Arrives after the spin gave up (0.2 s): caught by the blocking read instead.
    threading.Timer(0.5, lambda: a.sendall(_protocol.encode({"id": 3}))).start()
    started = time.perf_counter()
    assert channel.read_message() == {"id": 3}
    assert time.perf_counter() - started >= 0.5
    assert channel.stats() == {"spin_us": 200_000, "spins": 2, "spin_hits": 1}
    # The last wait was longer than the spin: the next one blocks at once.
    a.sendall(_protocol.encode({"id": 4}))
    assert channel.read_message() == {"id": 4}
    assert channel.stats()["spins"] == 2
    a.close()
    assert channel.read_message() is None
    b.close()


def test_channel_without_spin_never_polls():
    a, b = socket.socketpair()
    channel = _protocol.Channel(b)
    for i in range(3):
        a.sendall(_protocol.encode({"id": i}))
        assert channel.read_message() == {"id": i}
    assert channel.stats() == {"spin_us": 0, "spins": 0, "spin_hits": 0}
    a.close()
    b.close()
