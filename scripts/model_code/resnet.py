"""A ResNet-18-shaped image classifier (He et al. 2016), written out so no torchvision is needed.

make_demo_models.py copies this file into image-classifier/2/model.py: it is the eager version's
code (``entry: model:build``) and the source the torch.export program of version 1 is traced from.
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential()
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.downsample(x))


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        widths = [64, 128, 256, 512]
        stages = []
        cin = 64
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            stages.append(
                nn.Sequential(BasicBlock(cin, width, stride), BasicBlock(width, width, 1))
            )
            cin = width
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(image))
        return self.fc(torch.flatten(self.pool(x), 1))


def build() -> nn.Module:
    """The factory named by ``entry``; weights come from the state_dict next to this file."""
    return ResNet18(num_classes=10)
