"""Framing: 4-byte little-endian length + UTF-8 JSON object."""

from __future__ import annotations

import importlib.util
import json
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


_HAS_ORJSON = importlib.util.find_spec("orjson") is not None
_NEEDS_ORJSON = pytest.mark.skipif(not _HAS_ORJSON, reason="this interpreter has no orjson")
ENCODERS = [
    pytest.param(_protocol.encode_stdlib, id="stdlib"),
    pytest.param(_protocol.encode_orjson, id="orjson", marks=_NEEDS_ORJSON),
]
DECODERS = [
    pytest.param(_protocol.decode_stdlib, id="stdlib"),
    pytest.param(_protocol.decode_orjson, id="orjson", marks=_NEEDS_ORJSON),
]
#: What travels on the channel: a request, an infer reply with its timings, a load reply, an error.
MESSAGES = [
    {
        "id": 2,
        "op": "infer",
        "inputs": [{"name": "x", "dtype": "float32", "shape": [1, 4], "offset": 0, "nbytes": 16}],
        "parameters": {"precision": "fp32"},
        "release": [64, 128],
    },
    {
        "id": 2,
        "ok": True,
        "result": {
            "outputs": [
                {"name": "y", "dtype": "float32", "shape": [1, 3], "offset": 0, "nbytes": 12}
            ],
            "timings": {"h2d_ms": 0.0, "compute_ms": 0.046, "d2h_ms": 1e-07},
        },
    },
    {
        "id": 1,
        "ok": True,
        "result": {
            "device": "cuda:0",
            "variants": [
                {"precision": "fp16", "error": None, "max_abs": 0.000123, "reason": "naïve ✓"}
            ],
            "weights_bytes": 2**40,
        },
    },
    {"id": 3, "ok": False, "error": {"code": "BAD_TENSOR", "message": 'shape [1, -3] "x"\n'}},
]


@pytest.mark.parametrize("encode", ENCODERS)
@pytest.mark.parametrize("message", MESSAGES)
def test_encoders_write_json_of_the_message(encode, message):
    assert json.loads(encode(message)) == message


@pytest.mark.parametrize("encode", ENCODERS)
def test_encoders_write_compact_utf8(encode):
    message = {"op": "ping", "id": 7, "shape": [1, 4], "name": "café"}
    assert encode(message) == '{"op":"ping","id":7,"shape":[1,4],"name":"café"}'.encode()


@pytest.mark.parametrize("encode", ENCODERS)
def test_a_float_json_cannot_hold_becomes_null(encode):
    # A processing handler's answers may hold one; the reply must still parse on the other end.
    message = {"answers": [{"score": float("nan")}, [float("inf"), -float("inf"), 0.5]]}
    assert json.loads(encode(message)) == {"answers": [{"score": None}, [None, None, 0.5]]}


@_NEEDS_ORJSON
def test_orjson_hands_what_it_refuses_to_the_stdlib():
    message = {"answers": [2**70, {1: "int key"}]}
    assert _protocol.encode_orjson(message) == _protocol.encode_stdlib(message)
    assert json.loads(_protocol.encode_orjson(message)) == {"answers": [2**70, {"1": "int key"}]}


def test_frames_use_orjson_where_the_interpreter_has_it():
    expected = _protocol.encode_orjson if _HAS_ORJSON else _protocol.encode_stdlib
    assert _protocol._payload_of is expected


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


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("payload", [b"{nope", b"\xff\xfe", b'{"a": 1'])
def test_decoders_raise_what_decode_turns_into_protocol_errors(decode, payload):
    with pytest.raises((UnicodeDecodeError, json.JSONDecodeError)):
        decode(payload)


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("message", MESSAGES)
def test_decoders_read_what_either_encoder_wrote(decode, message):
    assert decode(_protocol.encode_stdlib(message)) == message
    if _HAS_ORJSON:
        assert decode(_protocol.encode_orjson(message)) == message


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
