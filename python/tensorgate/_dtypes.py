"""Wire dtype names (docs/worker-protocol.md) and their torch dtypes.

Kept apart from the arena so the names have one home: the gateway's list and this one must match.
"""

from __future__ import annotations

import torch

from ._errors import BAD_TENSOR, WorkerError

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}

NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}

#: Bytes per element (bool is one byte); torch 1.13 has no ``dtype.itemsize``.
ITEMSIZE: dict[torch.dtype, int] = {
    dtype: torch.empty((), dtype=dtype).element_size() for dtype in DTYPES.values()
}


def to_torch(name: object) -> torch.dtype:
    """The torch dtype for a wire name; BAD_TENSOR for anything else."""
    dtype = DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise WorkerError(BAD_TENSOR, f"unknown dtype {name!r}; expected one of {sorted(DTYPES)}")
    return dtype
