"""Drives a real worker process the way the gateway does: a socket pair end on fd 3, an input
arena file in /dev/shm created before spawning, tensor bytes written and read with positioned
file I/O (no shared code with the worker's arena module)."""

from __future__ import annotations

import os
import secrets
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import torch

from tensorgate import _protocol

PYTHON_DIR = Path(__file__).resolve().parents[1]
PYTHON = os.environ.get("TENSORGATE_PYTHON", sys.executable)

WIRE = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int8: "int8", torch.uint8: "uint8", torch.int16: "int16",
    torch.int32: "int32", torch.int64: "int64", torch.bool: "bool",
}  # fmt: skip
TORCH = {name: dtype for dtype, name in WIRE.items()}


def tensor_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""


def spawn_with_channel(argv: list[str], channel: socket.socket, **popen: Any) -> subprocess.Popen:
    """Starts ``argv`` with ``channel`` as its fd 3, as Node's ``stdio[3] = 'pipe'`` does."""
    child_fd = channel.fileno()

    def control_on_fd_3() -> None:  # runs in the child between fork and exec
        if child_fd == 3:
            os.set_inheritable(3, True)
        else:
            os.dup2(child_fd, 3)  # dup2 makes fd 3 inheritable

    # close_fds would close fd 3 after preexec_fn made it
    return subprocess.Popen(argv, preexec_fn=control_on_fd_3, close_fds=False, **popen)


def wait_or_kill(proc: subprocess.Popen) -> int:
    """Its exit status once it has ended by itself (30 s at most); SIGKILL after that."""
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _drain(streams: list[socket.socket], log_path: Path) -> None:
    """Copies a forked worker's stdout and stderr to its log until the worker closes both."""
    with open(log_path, "ab") as log:
        while streams:
            for sock in select.select(streams, [], [])[0]:
                chunk = sock.recv(65536)
                if chunk:
                    log.write(chunk)
                    log.flush()
                else:
                    sock.close()
                    streams.remove(sock)


class ForkServer:
    """Drives a real fork server (``python -m tensorgate.forkserver``) as the gateway does: its
    channel on fd 3, and a Unix socket its workers connect back to with a token."""

    def __init__(self, directory: Path, log_path: Path) -> None:
        self.path = str(directory / "fork.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(16)
        self.listener.settimeout(60)
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        env = {**os.environ, "PYTHONPATH": str(PYTHON_DIR)}
        with open(log_path, "ab") as log:
            self.proc = spawn_with_channel(
                [PYTHON, "-m", "tensorgate.forkserver", "--connect", self.path],
                child,
                env=env,
                stdout=log,
                stderr=log,
            )
        child.close()
        #: Workers' ends reported so far, by pid.
        self.exits: dict[int, dict[str, Any]] = {}
        self._next_id = 0

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        self._next_id += 1
        _protocol.write_message(self.sock, {"id": self._next_id, "op": op, **fields})
        while True:
            message = self._read()
            if message.get("id") == self._next_id:
                return message

    def _read(self) -> dict[str, Any]:
        message = _protocol.read_message(self.sock)
        assert message is not None, "the fork server closed its channel"
        if message.get("op") == "exit":
            self.exits[message["pid"]] = message
        return message

    def fork(
        self, argv: list[str], env: dict[str, str], log_path: Path
    ) -> tuple[int, socket.socket]:
        """Forks a worker; returns its pid and its channel. Its stdout and stderr go to the log."""
        token = secrets.token_hex(16)
        reply = self.request("fork", argv=argv, env=env, token=token)
        assert reply["ok"], reply
        streams: dict[str, socket.socket] = {}
        while len(streams) < 3:
            conn, _ = self.listener.accept()
            head = b""
            while not head.endswith(b"\n"):
                head += conn.recv(1)
            got_token, name = head.decode().split()
            assert got_token == token, "a connection from a worker this test did not fork"
            streams[name] = conn
        outputs = [streams["stdout"], streams["stderr"]]
        threading.Thread(target=_drain, args=(outputs, log_path), daemon=True).start()
        streams["channel"].settimeout(60)
        return reply["result"]["pid"], streams["channel"]

    def wait_exit(self, pid: int) -> dict[str, Any]:
        """The fork server's report of the end of worker ``pid`` (waits for it)."""
        while pid not in self.exits:
            self._read()
        return self.exits[pid]

    def close(self) -> int:
        self.sock.close()
        self.listener.close()
        return wait_or_kill(self.proc)


class WorkerProcess:
    def __init__(self, arena_in: str, arena_out: str, log_path: Path, *, in_bytes: int = 1 << 20,
                 out_bytes: int = 1 << 20, env: dict[str, str] | None = None,
                 fork_server: ForkServer | None = None) -> None:  # fmt: skip
        """Spawned as the gateway spawns a worker, or forked by ``fork_server``."""
        self.arena_in, self.arena_out, self.log_path = arena_in, arena_out, log_path
        with open(arena_in, "wb") as f:
            f.truncate(in_bytes)
        self.in_fd = os.open(arena_in, os.O_RDWR)
        argv = ["--arena-in", arena_in, "--arena-out", arena_out, "--out-bytes", str(out_bytes)]
        env = {**os.environ, "PYTHONPATH": str(PYTHON_DIR), **(env or {})}
        self.fork_server = fork_server
        self.proc: subprocess.Popen | None = None
        if fork_server is not None:
            self.pid, self.sock = fork_server.fork(
                [*argv, "--gateway-pid", str(os.getpid())], env, log_path
            )
        else:
            self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            with open(log_path, "ab") as log:
                self.proc = spawn_with_channel(
                    [PYTHON, "-m", "tensorgate.worker", *argv],
                    child,
                    env=env,
                    stdout=log,
                    stderr=log,
                )
            self.pid = self.proc.pid
            child.close()
        self.sock.settimeout(60)
        self.hello = self.receive()
        self._next_id = 0
        self._next_offset = 0

    # control channel ---------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        _protocol.write_message(self.sock, message)

    def receive(self) -> dict[str, Any]:
        message = _protocol.read_message(self.sock)
        assert message is not None, f"worker closed the channel; log:\n{self.log()}"
        return message

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        self._next_id += 1
        self.send({"id": self._next_id, "op": op, **fields})
        reply = self.receive()
        assert reply["id"] == self._next_id
        return reply

    # arenas ------------------------------------------------------------------------------------

    def put(self, name: str, tensor: torch.Tensor, offset: int | None = None) -> dict[str, Any]:
        """Writes a tensor into the input arena and returns its header."""
        data = tensor_bytes(tensor)
        if offset is None:
            offset = self._next_offset
            self._next_offset += (len(data) + 63) // 64 * 64 or 64
        os.pwrite(self.in_fd, data, offset)
        return {"name": name, "dtype": WIRE[tensor.dtype], "shape": list(tensor.shape),
                "offset": offset, "nbytes": len(data)}  # fmt: skip

    def get(self, header: dict[str, Any]) -> torch.Tensor:
        """Reads an output named by the worker from the output arena file."""
        with open(self.arena_out, "rb") as f:
            raw = os.pread(f.fileno(), header["nbytes"], header["offset"])
        dtype = TORCH[header["dtype"]]
        if not raw:
            return torch.empty(header["shape"], dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(header["shape"])

    def infer(self, tensors: dict[str, torch.Tensor], **parameters: Any) -> dict[str, Any]:
        self._next_offset = 0  # the previous request was answered: its input slots are free
        inputs = [self.put(name, t) for name, t in tensors.items()]
        return self.request("infer", inputs=inputs, parameters=parameters)

    def outputs(self, reply: dict[str, Any]) -> dict[str, torch.Tensor]:
        assert reply["ok"], reply
        return {o["name"]: self.get(o) for o in reply["result"]["outputs"]}

    # lifetime ----------------------------------------------------------------------------------

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self) -> int:
        self.sock.close()
        os.close(self.in_fd)
        if self.fork_server is not None:
            if self.fork_server.proc.poll() is not None:
                return -1  # its workers died with it; no one is left to report their ends
            return self.fork_server.wait_exit(self.pid).get("code", -1)
        assert self.proc is not None
        return wait_or_kill(self.proc)
