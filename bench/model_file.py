"""How a PyTorch user loads a model file by hand, for the bench's Python peers and baselines (no
tensorgate code runs in them): TorchScript with ``torch.jit.load``, a ``torch.export`` program
with ``torch.export.load(...).module()``, an AOTInductor package with ``aoti_load_package``.

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
    from model_file import load_version
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def load_file(path: Path, fmt: str) -> Callable[..., Any]:
    if fmt == "export":
        return torch.export.load(str(path)).module()
    if fmt == "aoti":
        from torch._inductor import aoti_load_package

        return aoti_load_package(str(path))
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return torch.jit.load(str(path), map_location="cpu").eval()
    raise SystemExit(f"{path}: format {fmt} is not a model file these benchmarks load")


def load_version(model_dir: Path, version: str) -> tuple[Callable[..., Any], dict[str, Any]]:
    """Version ``version`` of a tensorgate model folder, and its config."""
    config = json.loads((model_dir / "config.json").read_text())
    entry = config["versions"][version]
    return load_file(model_dir / version / entry["file"], entry["format"]), config
