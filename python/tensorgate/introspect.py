"""What a model file takes and returns, for ``tensorgate init`` (a config.json from the file).

    python -m tensorgate.introspect JOB.json

JOB: ``file``, optionally ``format`` (else read from the file: a ``.pt2`` archive says whether it
is a program or an AOTInductor package; other files are TorchScript, or eager with ``entry``),
``entry`` (``module:factory`` for a state_dict, imported from the file's folder) and ``inputs``
(specs ``{name, dtype, shape}``, ``-1`` for dynamic dimensions).

- A ``torch.export`` program declares everything: its inputs' names, dtypes and shapes (its
  ``Dim`` s as ``-1``, with their bounds) and its outputs. ``inputs``, if given, are checked
  against it.
- TorchScript, eager code and AOTInductor packages declare nothing usable: they need ``inputs``,
  and are run on seeded examples of them twice (2 and 3 rows in each dynamic first dimension) to
  see their outputs; an output dimension that follows the rows is dynamic.

Outputs are named from the model's return value: a dict's keys, ``output`` for one tensor,
``output_0``, ``output_1`` ... for a tuple. Prints one JSON line: ``{"ok": true, "format",
"inputs", "outputs", "max_batch_size"?}`` or ``{"ok": false, "code", "message"}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from ._dtypes import NAMES
from ._errors import BAD_PARAMETER, WorkerError
from ._examples import example_inputs
from ._jobs import run_job
from ._loader import ModelSpec, load_model, program_dims, pt2_kind

INVALID_CONFIG = "INVALID_CONFIG"


def detect_format(path: Path, entry: str | None) -> str:
    if entry:
        return "eager"
    kind = pt2_kind(str(path))
    if kind is not None:
        return kind
    return "torchscript"


def _output_names(result: Any) -> list[tuple[str, torch.Tensor]]:
    if isinstance(result, torch.Tensor):
        return [("output", result)]
    if isinstance(result, dict):
        return [(str(k), v) for k, v in result.items()]
    if isinstance(result, (tuple, list)):
        return [(f"output_{i}", t) for i, t in enumerate(result)]
    raise WorkerError(BAD_PARAMETER, f"the model returned a {type(result).__name__}, not tensors")


def _spec_json(name: str, dtype: torch.dtype, shape: list[int]) -> dict[str, Any]:
    if dtype not in NAMES:
        raise WorkerError(INVALID_CONFIG, f'tensor "{name}" is {dtype}; tensorgate cannot carry it')
    return {"name": name, "dtype": NAMES[dtype], "shape": shape}


def from_program(path: Path) -> dict[str, Any]:
    """Inputs and outputs as the ``torch.export`` program declares them."""
    program = torch.export.load(str(path))
    names = list(program.graph_signature.user_inputs)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    inputs = []
    uppers: list[int] = []
    for name, dims in zip(names, program_dims(program)):
        shape = [d if isinstance(d, int) else -1 for d in dims]
        inputs.append(_spec_json(name, placeholders[name].meta["val"].dtype, shape))
        if dims and not isinstance(dims[0], int) and dims[0][1] is not None:
            uppers.append(dims[0][1])
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    values = [a.meta["val"] for a in output_node.args[0]]
    spec = program.call_spec.out_spec
    keys = spec.context if spec is not None and spec.type is dict else None
    if keys is not None:
        names_out = [str(k) for k in keys]
    elif len(values) == 1 and (spec is None or spec.type not in (tuple, list)):
        names_out = ["output"]
    else:
        names_out = [f"output_{i}" for i in range(len(values))]
    outputs = [
        _spec_json(n, v.dtype, [d if isinstance(d, int) else -1 for d in v.shape])
        for n, v in zip(names_out, values)
    ]
    result: dict[str, Any] = {"inputs": inputs, "outputs": outputs}
    if uppers:
        result["max_batch_size"] = min(uppers)
    return result


def by_running(path: Path, fmt: str, entry: str | None, raw_inputs: list[Any]) -> dict[str, Any]:
    """Outputs found by running the model on examples of the given inputs."""
    spec = ModelSpec.from_json(
        {
            "name": "model",
            "version": "1",
            "format": fmt,
            "file": str(path),
            "entry": entry,
            "inputs": raw_inputs,
            "outputs": [],
            "warmup_runs": 0,
        }  # fmt: skip
    )
    loaded = load_model(spec)
    runs = []
    with torch.inference_mode():
        for size in (2, 3):  # every dynamic input dimension grows by one
            example = example_inputs(spec.inputs, loaded.device, rows=size, other=size + 1)
            runs.append(_output_names(loaded.module(*example)))
    outputs = []
    for (name, a), (_, b) in zip(*runs):
        shape = [-1 if da != db else da for da, db in zip(a.shape, b.shape)]
        outputs.append(_spec_json(name, a.dtype, shape))
    inputs = [_spec_json(s.name, s.dtype, s.shape) for s in spec.inputs]
    return {"inputs": inputs, "outputs": outputs}


def introspect(job: dict[str, Any]) -> dict[str, Any]:
    path = Path(job["file"])
    if not path.is_file():
        raise WorkerError(INVALID_CONFIG, f"{path} does not exist")
    entry = job.get("entry")
    fmt = job.get("format") or detect_format(path, entry)
    raw_inputs = job.get("inputs") or []
    if fmt == "export":
        found = from_program(path)
        if raw_inputs:
            given = [(s["name"], s["dtype"], list(s["shape"])) for s in raw_inputs]
            declared = [(s["name"], s["dtype"], s["shape"]) for s in found["inputs"]]
            if given != declared:
                raise WorkerError(
                    INVALID_CONFIG,
                    f"the program declares its inputs as {declared}; --input gave {given}",
                )
    elif not raw_inputs:
        raise WorkerError(
            INVALID_CONFIG,
            f"{path.name} is {fmt}, which does not declare its inputs: give each with --input "
            "NAME=DTYPE[SHAPE], e.g. --input image=float32[-1,3,224,224] (-1: dynamic)",
        )
    else:
        found = by_running(path, fmt, entry, raw_inputs)
    return {"ok": True, "format": fmt, **found}


def main() -> int:
    return run_job(introspect)


if __name__ == "__main__":
    sys.exit(main())
