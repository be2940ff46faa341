"""Seeded example tensors of a model's declared inputs: what exports trace, what variants and the
direct forward are checked on, what ``tensorgate init`` probes sizes with."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ._loader import TensorSpec

#: Rows of the example batch the export traces: not 0 or 1, which torch specialises.
EXAMPLE_ROWS = 2
#: Size given to other dynamic dimensions in the example.
EXAMPLE_OTHER = 3


def example_inputs(
    inputs: list[TensorSpec],
    device: torch.device,
    rows: int = EXAMPLE_ROWS,
    seed: int = 0,
    other: int = EXAMPLE_OTHER,
) -> tuple[torch.Tensor, ...]:
    """Seeded tensors of the given specs: floats in [0, 1), integers 0 or 1, random bools.

    ``rows`` for a dynamic first dimension, ``other`` for other dynamic ones.
    """
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for s in inputs:
        shape = [(rows if axis == 0 else other) if d == -1 else d for axis, d in enumerate(s.shape)]
        if s.dtype.is_floating_point:
            t = torch.rand(shape, generator=generator).to(s.dtype)
        elif s.dtype == torch.bool:
            t = torch.rand(shape, generator=generator) < 0.5
        else:
            t = torch.randint(0, 2, shape, generator=generator).to(s.dtype)
        tensors.append(t.to(device))
    return tuple(tensors)


__all__ = ["EXAMPLE_OTHER", "EXAMPLE_ROWS", "example_inputs"]
