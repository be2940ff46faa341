#!/usr/bin/env python3
"""Turns a torchvision image classifier into a tensorgate model folder that takes image files:
``model.pt2`` (a ``torch.export`` program from normalised crops to logits) and a ``config.json``
whose ``processing`` reproduces the weights' own transforms (resize, center crop, mean and std)
and answers their class names.

  python examples/torchvision/export_classifier.py ARCH MODELS/NAME --checkpoint FILE.pth
  python examples/torchvision/export_classifier.py resnet18 models/photos --random

``--checkpoint`` is a state dict saved locally (torchvision keeps the ones it downloads in
``~/.cache/torch/hub/checkpoints``); ``--random`` exports the architecture randomly initialised
(for tests). The transforms and class names come from the architecture's default weights' metadata,
which torchvision ships with the package: nothing is downloaded. docs/processing.md#a-torchvision-
classifier walks through it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torchvision

INTERPOLATIONS = {"bilinear": "bilinear", "bicubic": "bicubic", "nearest": "nearest"}


def processing_of(weights: torchvision.models.WeightsEnum) -> dict:
    """The image steps of the weights' transforms (torchvision's ImageClassification preset)."""
    preset = weights.transforms()
    interpolation = INTERPOLATIONS[preset.interpolation.value]
    crop = list(preset.crop_size) * (2 if len(preset.crop_size) == 1 else 1)
    return {
        "type": "image",
        "tensor": "x",
        "resize": {"shorter": preset.resize_size[0], "interpolation": interpolation},
        "center_crop": crop,
        "mean": list(preset.mean),
        "std": list(preset.std),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("arch", help="a torchvision classification model, e.g. resnet18")
    parser.add_argument("out", type=Path, help="the model folder to write, e.g. models/photos")
    weights = parser.add_mutually_exclusive_group(required=True)
    weights.add_argument("--checkpoint", type=Path, help="a state dict (.pth) saved locally")
    weights.add_argument("--random", action="store_true", help="random weights (for tests)")
    parser.add_argument("--description", default=None, help="what the model tells, for agents")
    args = parser.parse_args()

    default = torchvision.models.get_model_weights(args.arch).DEFAULT
    model = torchvision.models.get_model(args.arch, weights=None)
    if args.checkpoint is not None:
        model.load_state_dict(torch.load(args.checkpoint, map_location="cpu", weights_only=True))
    model.eval()
    image = processing_of(default)
    height, width = image["center_crop"]
    batch = torch.export.Dim("batch", min=1, max=1024)
    with torch.no_grad():
        program = torch.export.export(
            model, (torch.randn(2, 3, height, width),), dynamic_shapes=({0: batch},)
        )
    version = args.out / "1"
    version.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(version / "model.pt2"))
    labels = list(default.meta["categories"])
    config = {
        "name": args.out.name,
        "description": args.description
        or f"Names what a photo shows ({len(labels)} classes, torchvision {args.arch}).",
        "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 3, height, width]}],
        "outputs": [
            {"name": "logits", "dtype": "float32", "shape": [-1, len(labels)], "labels": labels}
        ],
        "batching": {"max_batch_size": 16, "max_queue_delay_us": 2000},
        "versions": {"1": {"format": "export", "file": "model.pt2"}},
        "processing": {"inputs": {"photo": image}, "output": {"type": "classification"}},
    }
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {args.out}: {args.arch}, {len(labels)} classes, {height}x{width} crops")


if __name__ == "__main__":
    main()
