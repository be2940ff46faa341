"""The demo tabular classifier: a small MLP that standardises raw flower measurements itself, so
callers send them as measured. make_demo_models.py trains it and copies this file into
tabular-classifier/2/model.py: the eager version's code (``entry: model:build``) and the source
the torch.export program of version 1 is traced from."""

from __future__ import annotations

import torch
from torch import nn


class TabularClassifier(nn.Module):
    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.net((features - self.mean) / self.std)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(features), dim=-1)


def build() -> nn.Module:
    """The architecture; the trained weights and the standardisation come from the state_dict."""
    return TabularClassifier(torch.zeros(4), torch.ones(4))
