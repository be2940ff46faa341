#!/usr/bin/env python3
"""Models for bench/large-body: image-shaped tensors in (1x3x224x224 fp32, 602 KB a row), so
little work that what a call costs is moving the tensor, not the forward pass.

- ``channel-mean``: the mean of each channel, [N, 3, 224, 224] -> [N, 3] (a large body in, a
  small answer out);
- ``half``: every value halved, [N, 3, 224, 224] -> the same shape (a large answer out too);
- ``channel-mean-batched``: ``channel-mean`` with dynamic batching as the GPU benchmark serves
  at concurrency 32 (batches of up to 32, 2 ms delay).

Both are ``torch.export`` programs (``.pt2``) with a dynamic batch dimension, written with their
``config.json`` into the model repository given::

    .tensorgate/venv/bin/python bench/large-body/make_models.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

SHAPE = [3, 224, 224]


class ChannelMean(torch.nn.Module):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return image.mean(dim=(2, 3))


class Half(torch.nn.Module):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return image * 0.5


def write(
    repo: Path,
    name: str,
    module: torch.nn.Module,
    output: str,
    out_shape: list[int],
    batching: dict[str, int] | None = None,
) -> None:
    folder = repo / name / "1"
    folder.mkdir(parents=True, exist_ok=True)
    batch = torch.export.Dim("batch", min=1, max=64)
    example = (torch.zeros([2, *SHAPE]),)
    program = torch.export.export(module, example, dynamic_shapes=({0: batch},))
    torch.export.save(program, str(folder / "model.pt2"))
    config = {
        "name": name,
        "description": f"{type(module).__name__} of a 602 KB image tensor: a cheap forward",
        "engine": "torch",
        "default_version": "1",
        "inputs": [{"name": "image", "dtype": "float32", "shape": [-1, *SHAPE]}],
        "outputs": [{"name": output, "dtype": "float32", "shape": [-1, *out_shape]}],
        "parameters": {"precision": ["fp32"]},
        "resources": {"device": "cpu", "threads": 1, "memory_mb": 256, "instances": 1},
        "versions": {"1": {"format": "export", "file": "model.pt2"}},
        **({"batching": batching} if batching else {}),
    }
    (repo / name / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def main() -> None:
    repo = Path(sys.argv[1])
    write(repo, "channel-mean", ChannelMean(), "means", [3])
    write(repo, "half", Half(), "halved", SHAPE)
    batching = {"max_batch_size": 32, "max_queue_delay_us": 2000}
    write(repo, "channel-mean-batched", ChannelMean(), "means", [3], batching)


if __name__ == "__main__":
    main()
