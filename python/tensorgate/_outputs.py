"""Pairing what a model returned with the outputs its config declares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ._errors import INFERENCE_FAILED, WorkerError
from ._loader import TensorSpec

Named = list[tuple[TensorSpec, torch.Tensor]]


def name_outputs(result: Any, specs: Sequence[TensorSpec]) -> Named:
    """Pairs what the model returned (a tensor, tuple/list or dict) with the declared outputs."""
    if isinstance(result, torch.Tensor):
        tensors = [result]
    elif isinstance(result, dict):
        missing = [s.name for s in specs if s.name not in result]
        if missing:
            raise WorkerError(
                INFERENCE_FAILED,
                f"the model returned keys {sorted(result)} but not the declared outputs {missing}",
            )
        tensors = [result[s.name] for s in specs]
    elif isinstance(result, (tuple, list)):
        tensors = list(result)
    else:
        raise WorkerError(INFERENCE_FAILED, f"the model returned a {type(result).__name__}")
    if len(tensors) != len(specs):
        raise WorkerError(
            INFERENCE_FAILED,
            f"the model returned {len(tensors)} outputs but the config declares {len(specs)}",
        )
    for spec, tensor in zip(specs, tensors):
        if not isinstance(tensor, torch.Tensor):
            raise WorkerError(
                INFERENCE_FAILED, f"output {spec.name!r} is a {type(tensor).__name__}, not a tensor"
            )
    return list(zip(specs, tensors))
