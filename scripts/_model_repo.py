"""Helpers shared by make_demo_models.py and make_test_models.py: write a model folder in the
layout of docs/model-repository.md.

Everything is written in place with deterministic content, so running a script twice leaves the
same bytes behind (idempotent) and other models in the repository untouched.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

CODE_DIR = Path(__file__).resolve().parent / "model_code"

# The tensorgate package exports models the way `tensorgate export` does (one batch Dim, ...).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
from tensorgate._dtypes import to_torch  # noqa: E402
from tensorgate._export import export_module, onnx_export  # noqa: E402
from tensorgate._loader import TensorSpec  # noqa: E402


def stable_hashing() -> None:
    """Re-runs this script with ``PYTHONHASHSEED=0`` unless it already has it.

    TorchScript writes each module's ``__constants__`` in set order, which follows the per-process
    string hash seed; with a fixed seed the saved files are byte-identical from run to run.
    """
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])


def write_config(model_dir: Path, config: dict[str, Any]) -> None:
    """Writes config.json indented, with lists of plain values (shapes, labels) on one line."""
    model_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(config, indent=2) + "\n"
    text = re.sub(r"\[[^\[\]{}]*\]", lambda m: json.dumps(json.loads(m.group(0))), text)
    (model_dir / "config.json").write_text(text, encoding="utf-8")


def install_code(code_name: str, version_dir: Path) -> ModuleType:
    """Copies ``model_code/<code_name>.py`` to ``<version_dir>/model.py`` and imports that copy,
    so what we save was built from exactly the code the eager version will load."""
    version_dir.mkdir(parents=True, exist_ok=True)
    target = version_dir / "model.py"
    shutil.copyfile(CODE_DIR / f"{code_name}.py", target)
    module_name = f"_tg_model_{code_name}"
    spec = importlib.util.spec_from_file_location(module_name, target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and TorchScript look modules up by name
    spec.loader.exec_module(module)
    return module


def save_torchscript(module: torch.nn.Module, path: Path) -> None:
    """TorchScript, which torch 2.x deprecates: kept for the fixtures that test such files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.script(module.eval()).save(str(path))


def _specs(specs: list[dict[str, Any]]) -> list[TensorSpec]:
    return [TensorSpec(s["name"], to_torch(s["dtype"]), s["shape"]) for s in specs]


def save_export(module: torch.nn.Module, path: Path, inputs: list[dict[str, Any]]) -> None:
    """A ``torch.export`` program (``.pt2``) of the module in eval mode; every ``-1`` of the
    input specs is a dynamic dimension (the first one shared by all inputs: the batch)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(export_module(module.eval(), _specs(inputs)), str(path))


def save_onnx(
    module: torch.nn.Module, path: Path, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]
) -> None:
    """The module as ONNX, traced the way ``tensorgate export-onnx`` does it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    program = export_module(module.eval(), _specs(inputs), ordered=_specs(outputs))
    onnx_export(program, str(path), [s["name"] for s in inputs], [s["name"] for s in outputs])


def save_state_dict(module: torch.nn.Module, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(module.state_dict(), str(path))


def fit_classifier(
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    labels: torch.Tensor,
    gen: torch.Generator,
    *,
    epochs: int,
    batch_size: int = 64,
    rows: torch.Tensor | None = None,
    label_smoothing: float = 0.0,
) -> None:
    """Trains a demo classifier with Adam (lr 3e-3) on shuffled minibatches of ``rows`` (all by
    default), the shuffles drawn from ``gen`` so that every build writes the same weights; leaves
    it in eval mode."""
    rows = torch.arange(len(labels)) if rows is None else rows
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(epochs):
        order = rows[torch.randperm(len(rows), generator=gen)]
        for i in range(0, len(order), batch_size):
            batch = order[i : i + batch_size]
            opt.zero_grad()
            logits = model(*(t[batch] for t in inputs))
            loss = torch.nn.functional.cross_entropy(
                logits, labels[batch], label_smoothing=label_smoothing
            )
            loss.backward()
            opt.step()
    model.eval()


def spec(name: str, dtype: str, shape: list[int], **extra: Any) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, **extra}


TORCHSCRIPT = {"format": "torchscript", "file": "model.pt"}
EXPORT = {"format": "export", "file": "model.pt2"}


def small_config(
    name: str, description: str, inputs: list, outputs: list, version: dict[str, Any] = EXPORT
) -> dict[str, Any]:
    """The config of a small one-version CPU model: fp32, one thread, one instance."""
    return {
        "name": name,
        "description": description,
        "engine": "torch",
        "default_version": "1",
        "inputs": inputs,
        "outputs": outputs,
        "parameters": {"precision": ["fp32"]},
        "resources": {"device": "cpu", "threads": 1, "memory_mb": 64, "instances": 1},
        "versions": {"1": version},
    }
