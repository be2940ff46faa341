#!/usr/bin/env python3
"""Builds the fixture models for end-to-end tests: ``/usr/bin/python3 scripts/make_test_models.py
OUT_DIR``. Same layout and config format as the demo repository (docs/model-repository.md).

- ``sleepy``    eager; sleeps ``TENSORGATE_SLEEPY_SECONDS`` (default 0.5), returns ``x * 2``
- ``flaky``     eager; raises ``ValueError("negative input")`` on any ``x < 0``, else ``x + 1``
- ``adder``     TorchScript; ``sum = a + b`` on float32 ``[-1, -1]``
- ``multi_out`` TorchScript; a dict of ``scores`` (float32 softmax) and ``argmax`` (int64)
- ``typed``     TorchScript; int64 ``[-1, 3]`` -> float64 row ``mean``
- ``mlp``       TorchScript; a seeded 4-16-3 MLP with ``logits`` and int64 ``label`` outputs
- ``mlp_onnx``  the same MLP exported to ONNX (``torch.onnx.export``, dynamic batch), engine onnx
- ``mlp_variants`` TorchScript 4-64-64-3 MLP offering every precision, fp32 frozen, and its ONNX
  export beside it as the onnx variant (and ``perturbed.onnx``, weights + 0.01, for a rejection)

Each builds in milliseconds; no weights worth the name, no downloads.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn

from _model_repo import (
    TORCHSCRIPT,
    install_code,
    save_state_dict,
    save_torchscript,
    small_config,
    spec,
    stable_hashing,
    write_config,
)


class Adder(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


class MultiOut(nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"scores": torch.softmax(x, dim=-1), "argmax": torch.argmax(x, dim=-1)}


class RowSum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1)


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(x)
        return {"logits": logits, "label": torch.argmax(logits, dim=-1)}


class Typed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float64).mean(dim=-1)


EAGER = {"format": "eager", "entry": "model:build", "file": "weights.pt"}
ONNX = {"format": "onnx", "file": "model.onnx"}
Specs = list[dict[str, Any]]


def build(
    out: Path, name: str, description: str, inputs: Specs, outputs: Specs, module: nn.Module | None
) -> None:
    """Writes one fixture: TorchScript of ``module``, or eager from ``model_code/<name>.py``."""
    version_dir = out / name / "1"
    if module is None:
        save_state_dict(install_code(name, version_dir).build(), version_dir / "weights.pt")
    else:
        save_torchscript(module, version_dir / "model.pt")
    config = small_config(
        name, description, inputs, outputs, EAGER if module is None else TORCHSCRIPT
    )
    write_config(out / name, config)


def build_mlp_pair(out: Path) -> None:
    """One MLP twice: TorchScript (torch engine) and ONNX (onnx engine), for comparing the two."""
    mlp = Mlp().eval()
    inputs = [spec("x", "float32", [-1, 4])]
    outputs = [spec("logits", "float32", [-1, 3]), spec("label", "int64", [-1])]
    save_torchscript(mlp, out / "mlp" / "1" / "model.pt")
    write_config(out / "mlp", small_config("mlp", "A seeded 4-16-3 MLP.", inputs, outputs))
    version_dir = out / "mlp_onnx" / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            mlp,
            torch.zeros(1, 4),
            str(version_dir / "model.onnx"),
            input_names=["x"],
            output_names=["logits", "label"],
            dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}, "label": {0: "batch"}},
        )
    config = small_config("mlp_onnx", "The mlp model, in ONNX.", inputs, outputs, ONNX)
    config["engine"] = "onnx"
    # A fixed delay: an in-process forward pass is so quick that calls rarely overlap otherwise.
    config["batching"] = {"max_batch_size": 16, "max_queue_delay_us": 2000, "adaptive_delay": False}
    write_config(out / "mlp_onnx", config)


class WideMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(11)
        self.net = nn.Sequential(
            nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build_mlp_variants(out: Path) -> None:
    """A model with every kind of variant: bf16/fp16 autocast, int8, frozen fp32, and ONNX."""
    mlp = WideMlp().eval()
    version_dir = out / "mlp_variants" / "1"
    save_torchscript(mlp, version_dir / "model.pt")
    with torch.no_grad():
        # model.onnx, then the same graph a little off (every weight + 1e-2) as perturbed.onnx:
        # an export its check must reject.
        for file, offset in (("model.onnx", 0.0), ("perturbed.onnx", 1e-2)):
            for param in mlp.parameters():
                param.add_(offset)
            torch.onnx.export(
                mlp,
                torch.zeros(1, 4),
                str(version_dir / file),
                input_names=["x"],
                output_names=["logits"],
                dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
            )
    inputs, outputs = [spec("x", "float32", [-1, 4])], [spec("logits", "float32", [-1, 3])]
    config = small_config("mlp_variants", "A seeded 4-64-64-3 MLP.", inputs, outputs)
    config["versions"]["1"] = {**TORCHSCRIPT, "onnx": "model.onnx"}
    config["parameters"] = {"precision": ["fp32", "bf16", "fp16", "int8"]}
    config["optimization"] = {"torch": "freeze"}
    config["batching"] = {"max_batch_size": 16, "max_queue_delay_us": 1000}
    write_config(out / "mlp_variants", config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="model repository folder to write the fixtures into")
    out = Path(parser.parse_args().out_dir)
    stable_hashing()
    x, y = [spec("x", "float32", [-1, 4])], [spec("y", "float32", [-1, 4])]
    build(
        out, "sleepy", "Sleeps TENSORGATE_SLEEPY_SECONDS (default 0.5), returns x * 2.", x, y, None
    )
    build(out, "flaky", "Raises ValueError on negative input, else returns x + 1.", x, y, None)
    ab = [spec("a", "float32", [-1, -1]), spec("b", "float32", [-1, -1])]
    build(out, "adder", "Adds two tensors.", ab, [spec("sum", "float32", [-1, -1])], Adder())
    scores = spec("scores", "float32", [-1, 4], labels=["a", "b", "c", "d"])
    argmax = spec("argmax", "int64", [-1])
    build(out, "multi_out", "Softmax scores and their argmax.", x, [scores, argmax], MultiOut())
    ints, mean = [spec("x", "int64", [-1, 3])], [spec("mean", "float64", [-1])]
    build(out, "typed", "Mean of each int64 row, as float64.", ints, mean, Typed())
    wide, sums = [spec("x", "float32", [-1, -1])], [spec("sum", "float32", [-1])]
    build(out, "row_sum", "Sum of each row: large inputs, tiny outputs.", wide, sums, RowSum())
    build_mlp_pair(out)
    build_mlp_variants(out)
    names = "sleepy, flaky, adder, multi_out, typed, row_sum, mlp, mlp_onnx, mlp_variants"
    print(f"wrote {names} to {out.resolve()}")


if __name__ == "__main__":
    main()
