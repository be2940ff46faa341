"""Test fixture: a model that sleeps, for timeout, queueing and cancellation tests.

The pause is ``TENSORGATE_SLEEPY_SECONDS`` (default 0.5), read on every call so a test can set it
in the worker's environment without rebuilding the model.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn


class Sleepy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(float(os.environ.get("TENSORGATE_SLEEPY_SECONDS", "0.5")))
        return x * 2


def build() -> nn.Module:
    return Sleepy()
