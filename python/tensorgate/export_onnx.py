"""Exports one version of a model to ONNX, for ``tensorgate export-onnx``.

    python -m tensorgate.export_onnx JOB.json

JOB is the worker's ``load`` model object plus ``out`` (the .onnx file to write) and ``check``
(a folder for the reference tensors). The model is loaded as a worker loads it (every format,
encrypted files included), wrapped so that its outputs come out in the declared order, and
exported with ``torch.onnx.export``: every -1 dimension becomes a dynamic axis. Then the model
runs once on seeded random inputs of 3 rows (not the 1 row the export traced, so that a batch axis
frozen by the trace shows), and the inputs and PyTorch's outputs are written to ``check`` as
``<name>.bin`` (raw little-endian bytes), for the caller to run through ONNX Runtime and compare.

Prints one JSON line: ``{"ok": true, "opset": N, "tensors": [{name, dtype, shape}, ...]}``, or
``{"ok": false, "code": "EXPORT_FAILED", "message": ...}``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import torch

from ._errors import WorkerError
from ._loader import ModelSpec, load_model
from ._runner import name_outputs

CHECK_ROWS = 3


class _Ordered(torch.nn.Module):
    """An eager model with its outputs as a tuple in the declared order (dicts do not export)."""

    def __init__(self, model: torch.nn.Module, spec: ModelSpec) -> None:
        super().__init__()
        self.model = model
        self.spec = spec

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(t for _, t in name_outputs(self.model(*inputs), self.spec.outputs))


_SCRIPTED_WRAPPER = """
import torch
from typing import Tuple


class Ordered(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, {params}) -> Tuple[{types}]:
        out = self.model({args})
        return ({picks},)
"""


def _scripted_ordered(model: torch.nn.Module, spec: ModelSpec, work: Path) -> torch.nn.Module:
    """A TorchScript model returning a dict, wrapped in TorchScript returning a tuple.

    Tracing cannot step into a loaded TorchScript module, and ONNX has no dicts; a scripted
    wrapper needs source code on disk, hence the generated file.
    """
    names = [f"x{i}" for i in range(len(spec.inputs))]
    source = _SCRIPTED_WRAPPER.format(
        params=", ".join(f"{n}: torch.Tensor" for n in names),
        types=", ".join("torch.Tensor" for _ in spec.outputs),
        args=", ".join(names),
        picks=", ".join(f"out[{s.name!r}]" for s in spec.outputs),
    )
    path = work / "tensorgate_ordered.py"
    path.write_text(source)
    loader = importlib.util.spec_from_file_location("tensorgate_ordered", path)
    module = importlib.util.module_from_spec(loader)  # type: ignore[arg-type]
    loader.loader.exec_module(module)  # type: ignore[union-attr]
    return torch.jit.script(module.Ordered(model)).eval()


def _exportable(model: torch.nn.Module, spec: ModelSpec, work: Path) -> torch.nn.Module:
    """The model in a form torch.onnx.export takes, outputs in the declared order."""
    if not isinstance(model, torch.jit.ScriptModule):
        return _Ordered(model, spec).eval()
    with torch.no_grad():
        returns_dict = isinstance(model(*_example(spec, 1, 0)), dict)
    return _scripted_ordered(model, spec, work) if returns_dict else model


def _example(spec: ModelSpec, rows: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Seeded inputs in [0, 1) (a model may refuse negative ones); dynamic dimensions ``rows``."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for s in spec.inputs:
        shape = [rows if d < 0 else d for d in s.shape]
        if s.dtype.is_floating_point:
            out.append(torch.rand(shape, generator=generator).to(s.dtype))
        elif s.dtype == torch.bool:
            out.append(torch.randint(0, 2, shape, generator=generator).bool())
        else:
            out.append(torch.randint(0, 10, shape, generator=generator).to(s.dtype))
    return tuple(out)


def _write(path: Path, tensor: torch.Tensor) -> None:
    path.write_bytes(tensor.detach().contiguous().cpu().numpy().tobytes())


def export(job: dict[str, Any]) -> dict[str, Any]:
    spec = ModelSpec.from_json({**job["model"], "device": "cpu"})
    model, _ = load_model(spec)
    check = Path(job["check"])
    names = [s.name for s in spec.inputs + spec.outputs]
    dynamic = {
        s.name: {i: f"{s.name}_{i}" for i, d in enumerate(s.shape) if d < 0}
        for s in spec.inputs + spec.outputs
    }
    opset = 14
    try:
        exportable = _exportable(model, spec, check)
        with torch.no_grad():
            torch.onnx.export(
                exportable,
                _example(spec, 1, 0),
                job["out"],
                input_names=names[: len(spec.inputs)],
                output_names=names[len(spec.inputs) :],
                dynamic_axes={k: v for k, v in dynamic.items() if v},
                opset_version=opset,
            )
    except Exception as exc:  # torch raises many types here; the message names the op
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return {"ok": False, "code": "EXPORT_FAILED", "message": first}
    inputs = _example(spec, CHECK_ROWS, 1)
    with torch.no_grad():
        outputs = [t for _, t in name_outputs(model(*inputs), spec.outputs)]
    tensors = []
    for s, t in zip(spec.inputs + spec.outputs, list(inputs) + outputs):
        _write(check / f"{s.name}.bin", t)
        tensors.append({"name": s.name, "shape": list(t.shape)})
    return {"ok": True, "opset": opset, "torch": torch.__version__, "tensors": tensors}


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    try:
        result = export(job)
    except WorkerError as exc:
        result = {"ok": False, "code": exc.code, "message": exc.message}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
