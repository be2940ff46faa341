"""Exports a TorchScript model folder to ONNX as a model folder of its own (engine "onnx").

    python3 bench/engines/export_onnx.py SOURCE_DIR OUT_DIR NAME

Version 1's TorchScript file is exported with ``torch.onnx.export`` on zeros of the declared input
shapes (every -1 as 1), with every -1 dimension dynamic; the config keeps the source's inputs,
outputs, resources and batching, with engine and version format "onnx".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64}


def main() -> None:
    source, out, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    config = json.loads((source / "config.json").read_text())
    version = config["versions"]["1"]
    model = torch.jit.load(str(source / "1" / version["file"])).eval()
    examples = tuple(
        torch.zeros([1 if d < 0 else d for d in s["shape"]], dtype=DTYPES[s["dtype"]])
        for s in config["inputs"]
    )
    dynamic = {
        s["name"]: {i: f"d{i}" for i, d in enumerate(s["shape"]) if d < 0}
        for s in config["inputs"] + config["outputs"]
    }
    (out / name / "1").mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            model,
            examples,
            str(out / name / "1" / "model.onnx"),
            input_names=[s["name"] for s in config["inputs"]],
            output_names=[s["name"] for s in config["outputs"]],
            dynamic_axes=dynamic,
        )
    config.update(
        name=name,
        engine="onnx",
        versions={"1": {"format": "onnx", "file": "model.onnx"}},
        default_version="1",
        parameters={"precision": ["fp32"]},
    )
    (out / name / "config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
