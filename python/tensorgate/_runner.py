"""Running the loaded model: device transfer, precision, the forward pass and naming its outputs.

Everything runs under ``torch.inference_mode()`` (no autograd bookkeeping at all). On CUDA each
stage ends with a synchronise, because kernels are asynchronous and a stage timed without one
would report launch time, not work.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from ._errors import BAD_PARAMETER, INFERENCE_FAILED, WorkerError
from ._loader import ModelSpec, TensorSpec

PRECISIONS: dict[str, torch.dtype | None] = {
    "fp32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}

_autocast_ok: dict[tuple[str, torch.dtype], bool] = {}


def autocast_supported(device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``torch.autocast`` really runs ``dtype`` on ``device_type``.

    torch only says so by warning and disabling itself (1.13: CPU autocast is bfloat16 only) or by
    raising, so we try it once per pair and remember.
    """
    key = (device_type, dtype)
    if key not in _autocast_ok:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with torch.autocast(device_type=device_type, dtype=dtype):
                    pass
            _autocast_ok[key] = True
        except (RuntimeError, UserWarning, AssertionError):
            _autocast_ok[key] = False
    return _autocast_ok[key]


Named = list[tuple[TensorSpec, torch.Tensor]]


def name_outputs(result: Any, specs: Sequence[TensorSpec]) -> Named:
    """Pairs what the model returned (a tensor, tuple/list or dict) with the declared outputs."""
    if isinstance(result, torch.Tensor):
        tensors = [result]
    elif isinstance(result, dict):
        missing = [s.name for s in specs if s.name not in result]
        if missing:
            raise WorkerError(
                INFERENCE_FAILED,
                f"the model returned keys {sorted(result)} but not the declared outputs {missing}",
            )
        tensors = [result[s.name] for s in specs]
    elif isinstance(result, (tuple, list)):
        tensors = list(result)
    else:
        raise WorkerError(INFERENCE_FAILED, f"the model returned a {type(result).__name__}")
    if len(tensors) != len(specs):
        raise WorkerError(
            INFERENCE_FAILED,
            f"the model returned {len(tensors)} outputs but the config declares {len(specs)}",
        )
    for spec, tensor in zip(specs, tensors):
        if not isinstance(tensor, torch.Tensor):
            raise WorkerError(
                INFERENCE_FAILED, f"output {spec.name!r} is a {type(tensor).__name__}, not a tensor"
            )
    return list(zip(specs, tensors))


class Runner:
    """One loaded model on one device."""

    def __init__(self, model: torch.nn.Module, spec: ModelSpec, device: torch.device) -> None:
        self.model = model
        self.spec = spec
        self.device = device

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def precision(self, name: object) -> contextlib.AbstractContextManager[Any]:
        """The autocast context for a precision name; BAD_PARAMETER if it cannot run here."""
        if name not in PRECISIONS:
            raise WorkerError(
                BAD_PARAMETER, f"unknown precision {name!r}; expected one of {list(PRECISIONS)}"
            )
        dtype = PRECISIONS[name]  # type: ignore[index]
        if dtype is None:
            return contextlib.nullcontext()
        if not autocast_supported(self.device.type, dtype):
            raise WorkerError(
                BAD_PARAMETER,
                f"precision {name} is not supported on {self.device.type} by torch "
                f"{torch.__version__}; use fp32"
                + (" or bf16" if autocast_supported(self.device.type, torch.bfloat16) else ""),
            )
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def to_device(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Inputs on the model's device (a no-op on CPU: the arena views are used as they are)."""
        moved = [t.to(self.device, non_blocking=True) for t in tensors]
        self.sync()
        return moved

    def forward(
        self, inputs: list[torch.Tensor], precision: contextlib.AbstractContextManager[Any]
    ) -> Named:
        """The forward pass, synchronised; model errors become INFERENCE_FAILED."""
        try:
            with torch.inference_mode(), precision:
                result = self.model(*inputs)
            self.sync()
        except WorkerError:
            raise
        except Exception as exc:
            raise WorkerError(INFERENCE_FAILED, str(exc) or type(exc).__name__) from exc
        return name_outputs(result, self.spec.outputs)

    def warmup(self, runs: int) -> float:
        """Runs the model on zeros of the declared shapes (-1 -> 1); returns the milliseconds.

        The first calls pay for lazy initialisation (TorchScript profiling, allocator growth,
        oneDNN primitive creation), so that cost lands here and not on the first request.
        """
        start = time.perf_counter()
        for _ in range(runs):
            zeros = [
                torch.zeros(
                    [1 if d == -1 else d for d in s.shape], dtype=s.dtype, device=self.device
                )
                for s in self.spec.inputs
            ]
            self.forward(zeros, contextlib.nullcontext())
        return (time.perf_counter() - start) * 1000.0
