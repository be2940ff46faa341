"""Entry point: ``python -m tensorgate.worker --arena-in P --arena-out P --out-bytes N``.

The gateway spawns this with one end of a Unix socket pair on fd 3 (Node's ``stdio[3] = 'pipe'``)
as the control channel, or a fork server (``tensorgate.forkserver``) forks a process that runs
``main`` with a socket on fd 3; see docs/worker-protocol.md. Everything here is process set-up;
the request loop is ``_worker.Worker``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


def _prctl(option: int, value: object) -> None:
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value)


def die_with_parent() -> None:
    """On Linux, asks the kernel to SIGKILL this process when its parent (the gateway, or the fork
    server that forked it) dies.

    A worker otherwise sees its gateway gone when the control socket closes, which it only reads
    once set up: importing torch and loading a model take seconds on a busy machine, and a worker
    whose gateway was killed meanwhile would live on that long, holding memory. Done before
    torch is imported, for that reason. A fork does not inherit the request: a forked worker
    makes it again.
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def name_process(name: str) -> None:
    """The name ``ps -e``, ``top`` and /proc/PID/comm show (15 bytes at most), on Linux."""
    _prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))


die_with_parent()
# The gateway may have died before the request was made: then init (or a subreaper) is the
# parent already, and no signal will come.
if sys.platform.startswith("linux") and os.getppid() == 1:
    sys.exit(0)

import torch  # noqa: E402 (after die_with_parent: see its docstring)

from ._arena import InArena, OutArena  # noqa: E402
from ._worker import Worker  # noqa: E402

__all__ = ["die_with_parent", "main", "name_process"]

#: The control channel's file descriptor, fixed by the protocol.
CONTROL_FD = 3

log = logging.getLogger("tensorgate.worker")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tensorgate.worker",
        description="tensorgate's torch worker; the gateway spawns it, control socket on fd 3.",
    )
    parser.add_argument("--arena-in", required=True, help="input arena file (made by the gateway)")
    parser.add_argument("--arena-out", required=True, help="output arena file (created here)")
    parser.add_argument("--out-bytes", type=int, required=True, help="initial output arena size")
    parser.add_argument(
        "--gateway-pid",
        type=int,
        help="the gateway's pid, whose descriptors the worker opens (default: the parent's)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Runs the worker until EOF on fd 3 or ``shutdown``; returns the exit status."""
    args = _parse_args(argv)
    name_process("tg-worker")
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("TENSORGATE_WORKER_LOG", "INFO").upper(),
        format=f"tensorgate.worker[{os.getpid()}] %(levelname)s %(message)s",
    )
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # model prints reach the gateway's log promptly
    # Ctrl-C in a terminal reaches the whole process group; the gateway decides when we stop
    # (shutdown or EOF), so an interrupt must not kill requests in flight.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # One request at a time: no inter-op parallelism. torch refuses the call once parallel work
    # has started; that only happens if someone set it before us, so there is nothing to fight.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
    try:
        sock = socket.socket(fileno=CONTROL_FD)
    except OSError as exc:
        log.error("fd %d is not the control socket (%s); the gateway starts this", CONTROL_FD, exc)
        return 2
    worker = Worker(
        sock, InArena(args.arena_in), OutArena(args.arena_out, args.out_bytes), args.gateway_pid
    )
    try:
        return worker.serve()
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
