"""Drives a real worker process the way the gateway does: a socket pair end on fd 3, an input
arena file in /dev/shm created before spawning, tensor bytes written and read with positioned
file I/O (no shared code with the worker's arena module)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
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


class WorkerProcess:
    def __init__(self, arena_in: str, arena_out: str, log_path: Path, *, in_bytes: int = 1 << 20,
                 out_bytes: int = 1 << 20, env: dict[str, str] | None = None) -> None:  # fmt: skip
        self.arena_in, self.arena_out, self.log_path = arena_in, arena_out, log_path
        with open(arena_in, "wb") as f:
            f.truncate(in_bytes)
        self.in_fd = os.open(arena_in, os.O_RDWR)
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        child_fd = child.fileno()

        def control_on_fd_3() -> None:  # runs in the child between fork and exec
            if child_fd == 3:
                os.set_inheritable(3, True)
            else:
                os.dup2(child_fd, 3)  # dup2 makes fd 3 inheritable

        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    PYTHON,
                    "-m",
                    "tensorgate.worker",
                    "--arena-in",
                    arena_in,
                    "--arena-out",
                    arena_out,
                    "--out-bytes",
                    str(out_bytes),
                ],  # fmt: skip
                env={**os.environ, "PYTHONPATH": str(PYTHON_DIR), **(env or {})},
                preexec_fn=control_on_fd_3,
                close_fds=False,  # close_fds would close fd 3 after preexec_fn made it
                stdout=log,
                stderr=log,
            )
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
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
