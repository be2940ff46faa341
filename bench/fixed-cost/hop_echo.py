"""The Python end of bench/fixed-cost's architecture floor: a process that answers frames on fd 3
the way a torch worker does (tensorgate's own channel, framing and optional spin), with no model.

    python hop_echo.py [--spin-us N]

Every request gets an answer shaped like a worker's ``infer`` answer for the tabular model (one
output header and the timings), so the bytes on the channel and the JSON work per call match a
real call; nothing is read from or written to an arena.
"""

from __future__ import annotations

import argparse
import socket

from tensorgate._protocol import Channel

CONTROL_FD = 3


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spin-us", type=int, default=0)
    args = parser.parse_args()
    channel = Channel(socket.socket(fileno=CONTROL_FD), args.spin_us / 1e6)
    while True:
        message = channel.read_message()
        if message is None:
            return 0
        channel.write_message(
            {
                "id": message.get("id"),
                "ok": True,
                "result": {
                    "outputs": [
                        {
                            "name": "probabilities",
                            "dtype": "float32",
                            "shape": [1, 3],
                            "offset": 0,
                            "nbytes": 12,
                        }
                    ],
                    "timings": {"h2d_ms": 0.0, "compute_ms": 0.0, "d2h_ms": 0.0},
                },
            }
        )


if __name__ == "__main__":
    raise SystemExit(main())
