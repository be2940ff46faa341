"""Entry point: ``python -m tensorgate.forkserver --connect PATH``: starts workers by forking one
process that has imported torch once.

A spawned worker imports torch anew: about a second of CPU, and with PyPI's CUDA wheel some
290 MB of memory private to that process, before any model is loaded, and another second when it
loads a ``.pt2`` program (Dynamo and Inductor). This process imports all that once, then forks a
worker per ``fork`` request: the child is ready in
milliseconds and shares those pages with this process and its siblings (copy-on-write). It runs
nothing in parallel and never touches CUDA, so each fork starts where a spawned worker starts:
no thread pool begun and CUDA not initialised; each worker sets its own threads and picks its
own device.

The gateway spawns this with one end of a Unix socket pair on fd 3 as its control channel,
framed as the workers' channel (``_protocol``), and listens on the Unix socket at ``--connect``
for the forked workers' streams. Requests, and what is sent back (docs/worker-protocol.md):

- ``{"id", "op": "fork", "argv", "env", "token"}``: forks a worker, answered with its ``pid``.
  The worker connects three times to ``--connect`` and sends ``"<token> <stream>\\n"`` first on
  each, ``stream`` being ``channel``, ``stdout`` and ``stderr``: they become its fd 3, 1 and 2.
  ``env`` becomes its environment; it runs ``tensorgate.worker.main(argv)``.
  It refuses (``FORK_UNSAFE``) if this process runs a Python thread besides its own or has
  initialised CUDA: a fork would not begin as a spawned worker begins.
- ``{"id", "op": "kill", "pid"}``: SIGKILL to a worker this process forked and has not reaped
  (so never to a pid the system has given to another process since), answered with ``killed``.
- ``{"op": "exit", "pid", "code"}`` or ``{"op": "exit", "pid", "signal"}``, unasked: a worker
  ended. This process reaps them all.

It ends at EOF on its channel. Its workers then end too: each asks the kernel for SIGKILL when
this process dies, as this one does when the gateway dies.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import importlib
import os
import random
import select
import signal
import socket
import sys
import threading
import traceback

from tensorgate import worker  # imports torch; asks for SIGKILL when the gateway dies
from tensorgate._protocol import Channel, ProtocolError

CONTROL_FD = 3
#: Imported before the first fork: what loading a ``.pt2`` program brings in (Dynamo, Inductor,
#: and the sympy and networkx they use). About 0.9 s of CPU here, once, that each worker loading
#: one would otherwise pay itself (``torch.export.load`` then takes 0.05 s instead of 1 s).
PRELOAD = (
    "torch.export",
    "torch._dynamo",
    "torch._inductor",
    "torch._export.serde.serialize",
    "torch._functorch.aot_autograd",
    "torch._functorch.partitioners",
    "networkx",
)
STREAMS = {"stdout": 1, "stderr": 2, "channel": CONTROL_FD}
#: Descriptors at or above this are out of the way of the three a worker's streams go to.
_HIGH_FD = 10


def preload() -> None:
    """Imports ``PRELOAD``, each where this torch has it."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _become_worker(request: dict, connect: str, server_pid: int) -> int:
    """In the forked child: the worker's death signal, streams, environment and seeds, then its
    run. Returns the exit status."""
    worker.die_with_parent()
    if os.getppid() != server_pid:  # the fork server died before the request above
        return 1
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    high = {}
    for name in STREAMS:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(connect)
            sock.sendall(f"{request['token']} {name}\n".encode())
            # Above fd 10 first: a socket may have been given fd 1, 2 or 3 (the fork server's
            # channel, closed in this process, freed fd 3), which a dup2 below would overwrite.
            high[name] = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
    sys.stdout.flush()
    sys.stderr.flush()
    for name, fd in STREAMS.items():
        os.dup2(high[name], fd)  # inheritable, as a spawned worker's descriptors are
        os.close(high[name])
    os.environ.clear()
    os.environ.update(request["env"])
    # A fork copies the random generators' state: without new seeds every worker of the fork
    # server would draw the same numbers, where spawned workers each draw their own.
    random.seed()
    worker.torch.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    sys.argv = ["-m tensorgate.worker", *request["argv"]]
    return worker.main(request["argv"])


def _fork(request: dict, connect: str, closing: list[int]) -> int:
    """Forks a worker; in the parent returns its pid. The child never returns from here."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid != 0:
        return pid
    code = 1
    try:
        for fd in closing:
            os.close(fd)
        code = _become_worker(request, connect, os.getppid())
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return to the loop
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)


def unsafe_to_fork() -> str | None:
    """Why a fork of this process would not begin as a spawned worker begins, or None.

    A fork copies only the thread that calls it, and CUDA once initialised cannot be used in a
    forked child. This process starts no thread and never touches CUDA; this keeps it so. Native
    pools begun at load shut themselves down at a fork (numpy's OpenBLAS starts one at import
    and stops it in its ``pthread_atfork`` handler); torch's own begin only when a parallel op
    runs, which never happens here.
    """
    threads = threading.active_count()
    if threads > 1:
        return f"the fork server runs {threads} Python threads, and a fork copies only one"
    if worker.torch.cuda.is_initialized() or _cuda_driver_loaded():
        return "CUDA is initialised in the fork server, and a forked child cannot use it"
    return None


def _cuda_driver_loaded() -> bool:
    """Whether the CUDA driver (``libcuda.so``, loaded at its first use) is in this process."""
    try:
        with open("/proc/self/maps") as f:
            return "libcuda.so" in f.read()
    except OSError:
        return False


def _exit_message(pid: int, status: int) -> dict:
    if os.WIFSIGNALED(status):
        return {"op": "exit", "pid": pid, "signal": signal.Signals(os.WTERMSIG(status)).name}
    return {"op": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)}


def serve(sock: socket.socket, connect: str) -> int:
    """Forks workers on request until EOF on ``sock``; reports each one's end."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd is what tells the loop
    # What is imported now lives as long as this process: out of the collector's sight, so a
    # worker's collections do not write to (and so copy) the pages it shares with its siblings.
    gc.freeze()
    live: set[int] = set()
    channel = Channel(sock)
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
            while live:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                live.discard(pid)
                channel.write_message(_exit_message(pid, status))
        if sock not in readable:
            continue
        while (request := channel.poll_message()) is not None:
            op = request.get("op")
            unsafe = unsafe_to_fork() if op == "fork" else None
            if unsafe:
                message = f"{unsafe}; TENSORGATE_WORKER_START=spawn starts workers without it"
                error = {"code": "FORK_UNSAFE", "message": message}
                reply = {"id": request["id"], "ok": False, "error": error}
            elif op == "fork":
                pid = _fork(request, connect, [sock.fileno(), wake_r, wake_w])
                live.add(pid)
                reply = {"id": request["id"], "ok": True, "result": {"pid": pid}}
            elif op == "kill" and request.get("pid") in live:
                os.kill(request["pid"], signal.SIGKILL)
                reply = {"id": request["id"], "ok": True, "result": {"killed": True}}
            elif op == "kill":
                reply = {"id": request["id"], "ok": True, "result": {"killed": False}}
            else:
                error = {"code": "BAD_REQUEST", "message": f"unknown op {op!r}"}
                reply = {"id": request.get("id"), "ok": False, "error": error}
            channel.write_message(reply)
        if channel.ended:
            return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tensorgate.forkserver",
        description="forks tensorgate's torch workers; the gateway starts it, channel on fd 3.",
    )
    parser.add_argument("--connect", required=True, help="Unix socket the workers connect to")
    args = parser.parse_args(argv)
    worker.name_process("tg-forkserver")
    # The gateway decides when this stops (EOF), as for its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sock = socket.socket(fileno=CONTROL_FD)
    except OSError as exc:
        print(f"fd {CONTROL_FD} is not the control socket ({exc})", file=sys.stderr)
        return 2
    # torch.cuda.is_available(), should anything imported here ask, by NVML: the CUDA driver, once
    # initialised, cannot be used in a forked child, and NVML leaves it untouched. Read at each
    # call; a worker runs with the environment it is given, without this.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    preload()
    try:
        return serve(sock, args.connect)
    except ProtocolError as exc:
        print(f"tensorgate.forkserver: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
