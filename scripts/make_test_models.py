#!/usr/bin/env python3
"""Builds the fixture models for end-to-end tests: ``.tensorgate/venv/bin/python
scripts/make_test_models.py OUT_DIR``. Same layout and config format as the demo repository
(docs/model-repository.md). Programs are ``torch.export`` ``.pt2`` files with a dynamic batch;
two fixtures stay TorchScript, which torch 2.x deprecates but users still have.

- ``sleepy``    eager; sleeps ``TENSORGATE_SLEEPY_SECONDS`` (default 0.5), returns ``x * 2``; on
  the device, for a CUDA input, with ``TENSORGATE_SLEEPY_ON=device``
- ``flaky``     eager; raises ``ValueError("negative input")`` on any ``x < 0``, else ``x + 1``
- ``adder``     TorchScript; ``sum = a + b`` on float32 ``[-1, -1]``
- ``multi_out`` export; a dict of ``scores`` (float32 softmax) and ``argmax`` (int64)
- ``typed``     export; int64 ``[-1, 3]`` -> float64 row ``mean``
- ``row_sum``   export; float32 ``[-1, -1]`` -> the sum of each row
- ``mlp``       export; a seeded 4-16-3 MLP with ``logits`` and int64 ``label`` outputs
- ``mlp_onnx``  the same MLP exported to ONNX (``torch.onnx.export``, dynamic batch), engine onnx
- ``mlp_compile`` the same MLP as eager code, fp32 by ``torch.compile``, batching up to 4 rows
- ``mlp_aoti``  the ``mlp`` program, fp32 by an AOTInductor package compiled when it loads
- ``mlp_variants`` TorchScript 4-64-64-3 MLP offering every precision, fp32 frozen, and its ONNX
  export beside it as the onnx variant (and ``perturbed.onnx``, weights + 0.01, for a rejection)

Each builds in well under a second; no weights worth the name, no downloads.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn

from _model_repo import (
    EXPORT,
    TORCHSCRIPT,
    install_code,
    save_export,
    save_onnx,
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


class Typed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float64).mean(dim=-1)


EAGER = {"format": "eager", "entry": "model:build", "file": "weights.pt"}
ONNX = {"format": "onnx", "file": "model.onnx"}
Specs = list[dict[str, Any]]


def build(
    out: Path,
    name: str,
    description: str,
    inputs: Specs,
    outputs: Specs,
    module: nn.Module | None,
    version: dict[str, Any] = EXPORT,
) -> None:
    """Writes one fixture: ``module`` as ``version`` says (export or TorchScript), or eager from
    ``model_code/<name>.py`` when there is no module."""
    version_dir = out / name / "1"
    if module is None:
        save_state_dict(install_code(name, version_dir).build(), version_dir / "weights.pt")
        version = EAGER
    elif version is TORCHSCRIPT:
        save_torchscript(module, version_dir / "model.pt")
    else:
        save_export(module, version_dir / "model.pt2", inputs)
    write_config(out / name, small_config(name, description, inputs, outputs, version))


def build_mlps(out: Path) -> None:
    """One MLP four ways: an exported program (torch engine), ONNX (onnx engine), eager code
    compiled by torch.compile, and the program compiled by AOTInductor when it loads."""
    mlp = install_code("mlp", out / "mlp_compile" / "1").build().eval()
    inputs = [spec("x", "float32", [-1, 4])]
    outputs = [spec("logits", "float32", [-1, 3]), spec("label", "int64", [-1])]
    save_export(mlp, out / "mlp" / "1" / "model.pt2", inputs)
    write_config(out / "mlp", small_config("mlp", "A seeded 4-16-3 MLP.", inputs, outputs))

    save_state_dict(mlp, out / "mlp_compile" / "1" / "weights.pt")
    config = small_config("mlp_compile", "The mlp model, compiled.", inputs, outputs, EAGER)
    config["optimization"] = {"torch": "compile"}
    # A fixed delay: with the adaptive one, the first of three concurrent calls goes at once when
    # the one before it ran alone, and on a loaded machine the other two may then miss it.
    config["batching"] = {"max_batch_size": 4, "max_queue_delay_us": 2000, "adaptive_delay": False}
    write_config(out / "mlp_compile", config)

    save_export(mlp, out / "mlp_aoti" / "1" / "model.pt2", inputs)
    config = small_config("mlp_aoti", "The mlp model, AOT-compiled.", inputs, outputs)
    config["optimization"] = {"torch": "aoti"}
    write_config(out / "mlp_aoti", config)
    save_onnx(mlp, out / "mlp_onnx" / "1" / "model.onnx", inputs, outputs)
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
    inputs, outputs = [spec("x", "float32", [-1, 4])], [spec("logits", "float32", [-1, 3])]
    save_torchscript(mlp, version_dir / "model.pt")
    # model.onnx, then the same graph a little off (every weight + 1e-2) as perturbed.onnx: an
    # export its check must reject.
    for file, offset in (("model.onnx", 0.0), ("perturbed.onnx", 1e-2)):
        with torch.no_grad():
            for param in mlp.parameters():
                param.add_(offset)
        save_onnx(mlp, version_dir / file, inputs, outputs)
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
    sums = [spec("sum", "float32", [-1, -1])]
    build(out, "adder", "Adds two tensors.", ab, sums, Adder(), TORCHSCRIPT)
    scores = spec("scores", "float32", [-1, 4], labels=["a", "b", "c", "d"])
    argmax = spec("argmax", "int64", [-1])
    build(out, "multi_out", "Softmax scores and their argmax.", x, [scores, argmax], MultiOut())
    ints, mean = [spec("x", "int64", [-1, 3])], [spec("mean", "float64", [-1])]
    build(out, "typed", "Mean of each int64 row, as float64.", ints, mean, Typed())
    wide, sums = [spec("x", "float32", [-1, -1])], [spec("sum", "float32", [-1])]
    build(out, "row_sum", "Sum of each row: large inputs, tiny outputs.", wide, sums, RowSum())
    build_mlps(out)
    build_mlp_variants(out)
    names = (
        "sleepy, flaky, adder, multi_out, typed, row_sum, mlp, mlp_onnx, mlp_compile, mlp_aoti, "
        "mlp_variants"
    )
    print(f"wrote {names} to {out.resolve()}")


if __name__ == "__main__":
    main()
