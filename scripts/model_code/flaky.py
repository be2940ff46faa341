"""Test fixture: a model that fails on negative input, for error paths that must not kill the
worker."""

from __future__ import annotations

import torch
from torch import nn


class Flaky(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise ValueError("negative input")
        return x + 1


def build() -> nn.Module:
    return Flaky()
