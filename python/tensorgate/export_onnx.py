"""Exports one version of a model to ONNX, for ``tensorgate export-onnx``.

    python -m tensorgate.export_onnx JOB.json

JOB is the worker's ``load`` model object plus ``out`` (the .onnx file to write) and ``check``
(a folder for the reference tensors). The model is loaded as a worker loads it (every format but
AOTInductor packages, encrypted files included), traced by ``torch.export`` with its outputs in
the declared order and every -1 a dynamic dimension (``_export.py``), and written by
``torch.onnx.export``. Then the model runs once on seeded random inputs of 3 rows (not the 2 rows
the export traced, so that a batch axis frozen by the trace shows), and the inputs and PyTorch's
outputs are written to ``check`` as ``<name>.bin`` (raw little-endian bytes), for the caller to
run through ONNX Runtime and compare.

Prints one JSON line: ``{"ok": true, "opset": N, "tensors": [{name, dtype, shape}, ...]}``, or
``{"ok": false, "code": "EXPORT_FAILED", "message": ...}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from ._examples import example_inputs
from ._export import EXPORT_FAILED, export_module, onnx_export
from ._jobs import run_job
from ._loader import ModelSpec, load_model
from ._outputs import name_outputs

CHECK_ROWS = 3


def _write(path: Path, tensor: torch.Tensor) -> None:
    path.write_bytes(tensor.detach().contiguous().cpu().numpy().tobytes())


def export(job: dict[str, Any]) -> dict[str, Any]:
    spec = ModelSpec.from_json({**job["model"], "device": "cpu"})
    loaded = load_model(spec)
    if not isinstance(loaded.module, torch.nn.Module):
        return {
            "ok": False,
            "code": EXPORT_FAILED,
            "message": "an AOTInductor package has no graph",
        }
    check = Path(job["check"])
    program = export_module(loaded.module, spec.inputs, ordered=spec.outputs)
    opset = onnx_export(
        program, job["out"], [s.name for s in spec.inputs], [s.name for s in spec.outputs]
    )
    inputs = example_inputs(spec.inputs, loaded.device, rows=CHECK_ROWS, seed=1)
    with torch.inference_mode():
        outputs = [t for _, t in name_outputs(loaded.module(*inputs), spec.outputs)]
    tensors = []
    for s, t in zip(spec.inputs + spec.outputs, list(inputs) + outputs):
        _write(check / f"{s.name}.bin", t)
        tensors.append({"name": s.name, "shape": list(t.shape)})
    return {"ok": True, "opset": opset, "torch": torch.__version__, "tensors": tensors}


def main() -> int:
    return run_job(export)


if __name__ == "__main__":
    sys.exit(main())
