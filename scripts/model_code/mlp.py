"""Test fixture: a seeded 4-16-3 MLP answering its logits and their argmax, as eager code (the
``mlp_compile`` fixture) and as the source of the ``mlp`` and ``mlp_aoti`` programs."""

from __future__ import annotations

import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(x)
        return {"logits": logits, "label": torch.argmax(logits, dim=-1)}


def build() -> nn.Module:
    return Mlp()
