"""Test fixture: a model that sleeps, for timeout, queueing and cancellation tests.

The pause is ``TENSORGATE_SLEEPY_SECONDS`` (default 0.5), read on every call so a test can set it
in the worker's environment without rebuilding the model. With ``TENSORGATE_SLEEPY_ON=device``
and a CUDA input, the device sleeps instead of the host (``torch.cuda._sleep``, a kernel that
spins for a count of clock cycles: one per nanosecond, so at least the pause on any GPU clocked
at 1 GHz or more): the forward pass then returns at once, and its time is the device's.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn


class Sleepy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seconds = float(os.environ.get("TENSORGATE_SLEEPY_SECONDS", "0.5"))
        if x.is_cuda and os.environ.get("TENSORGATE_SLEEPY_ON") == "device":
            torch.cuda._sleep(int(seconds * 1e9))
        else:
            time.sleep(seconds)
        return x * 2


def build() -> nn.Module:
    return Sleepy()
