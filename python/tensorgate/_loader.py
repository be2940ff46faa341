"""Loading one model version: parse the ``load`` request, pick the device, build the module.

Three formats (docs/model-repository.md): TorchScript (``torch.jit.load``), ``torch.export``
programs (only where the installed torch has ``torch.export.load``) and eager ``module:factory``
code plus a state_dict read with ``weights_only=True`` so a weights file cannot run code. A file
encrypted at rest (``_sealed.py``) is decrypted into memory first.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._dtypes import to_torch
from ._errors import BAD_PARAMETER, LOAD_FAILED, UNSUPPORTED_FORMAT, WorkerError
from ._sealed import open_model_file


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: torch.dtype
    shape: list[int]


@dataclass(frozen=True)
class ModelSpec:
    """The ``model`` object of a ``load`` request."""

    name: str
    version: str
    format: str
    file: str
    code_dir: str
    entry: str | None
    device: str
    threads: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    warmup_runs: int

    @classmethod
    def from_json(cls, raw: object) -> ModelSpec:
        if not isinstance(raw, dict):
            raise WorkerError(BAD_PARAMETER, "load needs a 'model' object")
        try:
            return cls(
                name=str(raw["name"]),
                version=str(raw["version"]),
                format=str(raw["format"]),
                file=str(raw["file"]),
                code_dir=str(raw.get("code_dir") or os.path.dirname(str(raw["file"]))),
                entry=raw.get("entry"),
                device=str(raw.get("device", "cpu")),
                threads=int(raw.get("threads", 1)),
                inputs=[_tensor_spec(s) for s in raw["inputs"]],
                outputs=[_tensor_spec(s) for s in raw["outputs"]],
                warmup_runs=int(raw.get("warmup_runs", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WorkerError(BAD_PARAMETER, f"malformed load request: {exc!r}") from exc


def _tensor_spec(raw: dict[str, Any]) -> TensorSpec:
    return TensorSpec(str(raw["name"]), to_torch(raw["dtype"]), [int(d) for d in raw["shape"]])


def _torch_export() -> Any:
    """The ``torch.export`` module if it can load programs (torch >= 2.1), else None."""
    try:
        export = importlib.import_module("torch.export")  # absent in torch 1.13
    except ImportError:
        return None
    return export if hasattr(export, "load") else None


def supported_formats() -> list[str]:
    """The formats this torch can load, as announced in ``hello``."""
    if _torch_export() is None:
        return ["torchscript", "eager"]
    return ["torchscript", "export", "eager"]


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when present, else CPU)."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise WorkerError(LOAD_FAILED, f"unknown device {name!r}: {exc}") from exc
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise WorkerError(LOAD_FAILED, f"device {name!r}: only cpu, cuda, cuda:N and auto exist")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = 0 if device.index is None else device.index
    if index >= count:
        raise WorkerError(
            LOAD_FAILED, f"device {name!r} asked for, but this machine has {count} CUDA devices"
        )
    return torch.device("cuda", index)


def import_entry(entry: str, code_dir: str) -> Callable[[], Any]:
    """The factory named by ``module:factory``, imported from ``code_dir``.

    A module of the same name imported from elsewhere (tests load several eager models named
    ``model`` into one process) is dropped first, so each version gets its own code.
    """
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise WorkerError(LOAD_FAILED, f"entry {entry!r} is not 'module:factory'")
    code_dir = os.path.abspath(code_dir)
    top = module_name.split(".")[0]
    cached = sys.modules.get(top)
    cached_file = getattr(cached, "__file__", None) or ""
    if cached is not None and not os.path.abspath(cached_file).startswith(code_dir + os.sep):
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
    if code_dir in sys.path:
        sys.path.remove(code_dir)
    sys.path.insert(0, code_dir)
    importlib.invalidate_caches()
    module = importlib.import_module(module_name)
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise WorkerError(LOAD_FAILED, f"{module_name} in {code_dir} has no callable {attr!r}")
    return factory


def _load_eager(spec: ModelSpec, device: torch.device) -> torch.nn.Module:
    if not spec.entry:
        raise WorkerError(LOAD_FAILED, "eager models need an 'entry' such as 'model:build'")
    model = import_entry(spec.entry, spec.code_dir)()
    if not isinstance(model, torch.nn.Module):
        raise WorkerError(
            LOAD_FAILED, f"{spec.entry} returned {type(model).__name__}, not a Module"
        )
    state = torch.load(open_model_file(spec.file), map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    return model.to(device)


def _load_torchscript(spec: ModelSpec, device: torch.device) -> torch.nn.Module:
    return torch.jit.load(open_model_file(spec.file), map_location=device)


def _load_export(spec: ModelSpec, device: torch.device) -> torch.nn.Module:
    program = _torch_export().load(open_model_file(spec.file))
    return program.module().to(device)


_LOADERS = {"torchscript": _load_torchscript, "export": _load_export, "eager": _load_eager}


def _to_eval(model: torch.nn.Module) -> None:
    try:
        model.eval()
    except NotImplementedError:
        # Some torch 2.x releases refuse .eval() on exported modules; they offer this instead.
        from torch.ao.quantization import move_exported_model_to_eval

        move_exported_model_to_eval(model)


def load_model(spec: ModelSpec) -> tuple[torch.nn.Module, torch.device]:
    """The model in eval mode on its device; UNSUPPORTED_FORMAT or LOAD_FAILED otherwise."""
    if spec.format not in supported_formats():
        raise WorkerError(
            UNSUPPORTED_FORMAT,
            f"format {spec.format!r} cannot be loaded by torch {torch.__version__}; "
            f"this worker loads {supported_formats()}",
        )
    device = resolve_device(spec.device)
    if not os.path.isfile(spec.file):
        raise WorkerError(LOAD_FAILED, f"model file {spec.file} does not exist")
    try:
        model = _LOADERS[spec.format](spec, device)
        _to_eval(model)
    except WorkerError:
        raise
    except Exception as exc:
        raise WorkerError(LOAD_FAILED, str(exc) or type(exc).__name__) from exc
    return model, device
