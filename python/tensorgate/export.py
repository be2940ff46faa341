"""Exports one version of a PyTorch model as a ``torch.export`` program or an AOTInductor
package, for ``tensorgate export --format export|aoti``.

    python -m tensorgate.export JOB.json

JOB is the worker's ``load`` model object plus ``format`` (``export`` or ``aoti``), ``out`` (the
``.pt2`` to write), ``device`` (what an AOTInductor package is compiled for; a program is
exported on the CPU and moved at load) and ``tolerance``. The model is loaded as a worker loads it
(eager, TorchScript or exported; encrypted files included), traced by ``torch.export`` with every
``-1`` of the config a dynamic dimension (``_export.py``), written, then loaded back the way a
worker will load it and run beside the original on seeded inputs of 3 rows (not the 2 the trace
saw, so a batch frozen by the trace shows). Each output is judged by the rule for its kind
(``_accuracy.py``); past the tolerance the result is EXPORT_MISMATCH and the caller keeps nothing.

Prints one JSON line: ``{"ok": true, "format", "device", "torch", "checks": [...]}``, or
``{"ok": false, "code": ..., "message": ..., "checks"?: [...]}``.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import torch

from ._accuracy import check_outputs, worst
from ._errors import WorkerError
from ._examples import example_inputs
from ._export import EXPORT_FAILED, compile_package, export_program
from ._jobs import run_job
from ._loader import ModelSpec, load_model
from ._outputs import name_outputs

EXPORT_MISMATCH = "EXPORT_MISMATCH"
CHECK_ROWS = 3


def export(job: dict[str, Any]) -> dict[str, Any]:
    fmt = job["format"]
    if fmt not in ("export", "aoti"):
        raise WorkerError(EXPORT_FAILED, f"format {fmt!r}: this exporter writes export or aoti")
    device = str(job.get("device") or "cpu") if fmt == "aoti" else "cpu"
    spec = ModelSpec.from_json({**job["model"], "device": device})
    loaded = load_model(spec)
    if spec.format == "aoti":
        raise WorkerError(EXPORT_FAILED, "an AOTInductor package cannot be exported again")
    program = export_program(loaded, spec)
    out = str(job["out"])
    if fmt == "export":
        try:
            torch.export.save(program, out)
        except Exception as exc:
            raise WorkerError(EXPORT_FAILED, f"saving the program failed: {exc}") from exc
    else:
        compile_package(program, out)
    exported = load_model(dataclasses.replace(spec, format=fmt, file=out))
    inputs = example_inputs(spec.inputs, loaded.device, rows=CHECK_ROWS, seed=1)
    with torch.inference_mode():
        want = name_outputs(loaded.module(*inputs), spec.outputs)
        got = name_outputs(exported.module(*inputs), spec.outputs)
    checks = check_outputs(got, want, float(job.get("tolerance", 1e-4)))
    report = [{**c.report(), "within": c.within} for c in checks]
    bad = worst(checks)
    if bad is not None and not bad.within:
        return {"ok": False, "code": EXPORT_MISMATCH, "message": bad.describe(), "checks": report}
    return {
        "ok": True,
        "format": fmt,
        "device": str(loaded.device),
        "torch": torch.__version__,
        "checks": report,
    }


def main() -> int:
    return run_job(export)


if __name__ == "__main__":
    sys.exit(main())
