#!/usr/bin/env python3
"""Builds the demo model repository: ``scripts/make_demo_models.py [OUT_DIR]``, run by the
runtime's Python (``.tensorgate/venv/bin/python``).

- ``tabular-classifier``: a small MLP trained for a few seconds on synthetic, separable,
  iris-like data (4 features -> 3 classes); version 1 a ``torch.export`` program (``.pt2``),
  version 2 the same weights as eager code (``model.py`` + ``weights.pt``).
- ``image-classifier``: a ResNet-18-shaped network (3x224x224 -> 10 CIFAR-10 classes) with
  seeded random weights; version 1 a ``torch.export`` program, version 2 eager (``model.py`` +
  ``weights.pt``).
- ``digits``: a small CNN trained for a few seconds on the handwritten digits scikit-learn ships
  inside its package (8x8 scans of 0-9), taking an image file: its ``processing`` decodes a PNG,
  JPEG, WebP, GIF or BMP of a digit (dark ink on light paper), inverts and shrinks it to 8x8, and
  answers the top labels. Held-out digits are written as PNGs to ``digits/examples`` with
  ``labels.json``, for the README's example and the tests.
- ``intents``: which of 11 intents a request to an assistant is (weather, set_alarm, ...), taking
  text: its ``processing`` tokenizes sentences with the ``tokenizer.json`` next to the model, a
  WordPiece vocabulary learnt at set-up from sentences generated from templates; token
  embeddings averaged over the attention mask and a small MLP, trained for a few seconds. Whole
  templates and slot values are held out; 40 held-out sentences go to ``intents/examples.json``
  (scripts/demo_intents.py).
- ``dtmf``: which telephone keypad key (0-9, *, #, A-D) a tone recording is, taking a WAV file
  (the server mixes it to mono, resamples it to 8 kHz and keeps 0.5 s): log magnitude spectrum
  and a small MLP, trained for a few seconds on synthetic tones with jitter, twist and noise.
  Example recordings in assorted rates, channels and sample widths go to ``dtmf/examples`` with
  ``labels.json`` (scripts/demo_dtmf.py).
- the vision pipeline: ``image-preprocess`` (an image file, decoded and resized to uint8 HWC
  pixels by its processing -> normalised CHW floats),
  ``object-detector`` (bright regions on a 7x7 grid: scores and boxes), ``detection-fusion``
  (class probabilities weighted by detection confidence) and the workflow ``vision-pipeline``
  that chains them with ``image-classifier`` (classification only when an object was found).

No downloads; seeded, so every run writes the same models. OUT_DIR defaults to ./models.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from _model_repo import (
    CODE_DIR,
    fit_classifier,
    install_code,
    save_export,
    save_state_dict,
    small_config,
    spec,
    stable_hashing,
    write_config,
)
from demo_dtmf import build_dtmf
from demo_intents import build_intents

SEED = 0
IRIS_LABELS = ["setosa", "versicolor", "virginica"]
CIFAR10_LABELS = [
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
]  # fmt: skip


def synthetic_flowers(n_per_class: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Three Gaussian clusters at iris-like class means (sepal/petal length/width in cm), tight
    enough to be separable. Synthetic, not the real iris data."""
    means = torch.tensor([[5.0, 3.4, 1.5, 0.25], [5.9, 2.8, 4.3, 1.3], [6.6, 3.0, 5.6, 2.0]])
    std = torch.tensor([0.25, 0.25, 0.2, 0.1])
    x = torch.cat([m + std * torch.randn(n_per_class, 4, generator=gen) for m in means])
    y = torch.arange(3).repeat_interleave(n_per_class)
    return x, y


def build_tabular(out: Path) -> None:
    gen = torch.Generator().manual_seed(SEED)
    x, y = synthetic_flowers(300, gen)
    perm = torch.randperm(len(y), generator=gen)
    x, y = x[perm], y[perm]
    x_train, y_train, x_test, y_test = x[:600], y[:600], x[600:], y[600:]
    root = out / "tabular-classifier"
    code = install_code("tabular", root / "2")
    torch.manual_seed(SEED)
    model = code.TabularClassifier(x_train.mean(0), x_train.std(0))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(200):
        opt.zero_grad()
        nn.functional.cross_entropy(model.logits(x_train), y_train).backward()
        opt.step()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(-1) == y_test).float().mean().item()
    print(f"tabular-classifier: held-out accuracy {accuracy:.3f} on {len(y_test)} samples")

    features = spec("features", "float32", [-1, 4])
    save_export(model, root / "1" / "model.pt2", [features])
    save_state_dict(model, root / "2" / "weights.pt")
    write_config(
        root,
        {
            "name": "tabular-classifier",
            "description": "Small MLP classifying 4 flower measurements (cm: sepal length, "
            "sepal width, petal length, petal width) into 3 species; trained on synthetic "
            "iris-like data.",
            "engine": "torch",
            "default_version": "1",
            "inputs": [features],
            "outputs": [spec("probabilities", "float32", [-1, 3], labels=IRIS_LABELS)],
            "parameters": {"precision": ["fp32"]},
            "resources": {"device": "cpu", "threads": 1, "memory_mb": 64, "instances": 1},
            "versions": {
                "1": {"format": "export", "file": "model.pt2"},
                "2": {"format": "eager", "entry": "model:build", "file": "weights.pt"},
            },
        },
    )


def calibrate_batchnorm(model: nn.Module, gen: torch.Generator) -> None:
    """Sets BatchNorm running statistics from one pass over seeded noise images, so that random
    weights still give logits of a sensible scale in eval mode."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None  # cumulative average: one batch sets the statistics
    model.train()
    with torch.no_grad():
        model(torch.rand(8, 3, 224, 224, generator=gen))
    model.eval()


def build_image(out: Path) -> None:
    root = out / "image-classifier"
    code = install_code("resnet", root / "2")
    torch.manual_seed(SEED)
    model = code.build()
    calibrate_batchnorm(model, torch.Generator().manual_seed(SEED))
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = 0.1  # back to the default, so the saved module is an ordinary one
    image = spec("image", "float32", [-1, 3, 224, 224])
    save_export(model, root / "1" / "model.pt2", [image])
    save_state_dict(model, root / "2" / "weights.pt")
    write_config(
        root,
        {
            "name": "image-classifier",
            "description": "ResNet-18-shaped image classifier on 3x224x224 input, 10 CIFAR-10 "
            "classes. Demo weights are random (seeded): the predictions are meaningless.",
            "engine": "torch",
            "default_version": "1",
            "inputs": [image],
            "outputs": [spec("logits", "float32", [-1, 10], labels=CIFAR10_LABELS)],
            "parameters": {"precision": ["fp32", "bf16"]},
            "resources": {"device": "cpu", "threads": 2, "memory_mb": 512, "instances": 1},
            "versions": {
                "1": {"format": "export", "file": "model.pt2"},
                "2": {"format": "eager", "entry": "model:build", "file": "weights.pt"},
            },
        },
    )
    report_forward_time(model, threads=2)


def report_forward_time(model: nn.Module, threads: int) -> None:
    """Prints the batch-1 forward time with the configured thread count, for the docs."""
    torch.set_num_threads(threads)
    image = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(SEED + 1))
    with torch.inference_mode():
        for _ in range(3):
            model(image)
        times = []
        for _ in range(10):
            start = time.perf_counter()
            model(image)
            times.append((time.perf_counter() - start) * 1000)
    ms = statistics.median(times)
    print(f"image-classifier: eager forward at batch 1: median {ms:.1f} ms with {threads} threads")


DIGIT_SCALE = 4  # examples are 32x32: each of the 8x8 cells a 4x4 block
DIGIT_EXAMPLES = 100


class DigitsCnn(nn.Module):
    """Two 3x3 convolutions and a small classifier head: 8x8 grayscale in [0, 1] -> 10 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.net(image)


def build_digits(out: Path) -> None:
    # Imported here: the other demo models need neither (and scikit-learn takes a second).
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()  # 1,797 8x8 scans, values 0 (paper) to 16 (ink), in the package
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target)
    gen = torch.Generator().manual_seed(SEED)
    perm = torch.randperm(len(y), generator=gen)
    split = int(len(y) * 0.8)
    train, held_out = perm[:split], perm[split:]
    torch.manual_seed(SEED)
    model = DigitsCnn()
    fit_classifier(model, (x,), y, gen, epochs=40, rows=train)
    with torch.no_grad():
        accuracy = (model(x[held_out]).argmax(-1) == y[held_out]).float().mean().item()
    print(f"digits: held-out accuracy {accuracy:.3f} on {len(held_out)} scans")

    root = out / "digits"
    image = spec("image", "float32", [-1, 1, 8, 8])
    save_export(model, root / "1" / "model.pt2", [image])
    write_config(
        root,
        {
            **small_config(
                "digits",
                "Reads a handwritten digit (0-9) from an image file: a small CNN "
                "trained on scikit-learn's 8x8 digit scans. Takes a PNG, JPEG, WebP, GIF or BMP "
                "of one digit, dark on a light background, roughly square and filling the image.",
                [image],
                [spec("logits", "float32", [-1, 10], labels=[str(d) for d in range(10)])],
            ),
            "batching": {"max_batch_size": 32, "max_queue_delay_us": 1000},
            "processing": {
                "inputs": {
                    "image": {
                        "type": "image",
                        "description": "the image of one digit",
                        "mode": "L",
                        "invert": True,
                        "resize": {"size": [8, 8], "interpolation": "box"},
                    }
                },
                "output": {"type": "classification", "top_k": 3},
            },
        },
    )
    # Held-out scans as image files, the way an agent would hold them: dark ink on white.
    examples = root / "examples"
    examples.mkdir(parents=True, exist_ok=True)
    labels = {}
    for n, index in enumerate(held_out[:DIGIT_EXAMPLES].tolist()):
        ink = torch.tensor(digits.images[index]) * (255.0 / 16.0)
        paper = (255.0 - ink).round().to(torch.uint8).numpy()
        picture = Image.fromarray(paper, mode="L").resize(
            (8 * DIGIT_SCALE, 8 * DIGIT_SCALE), Image.Resampling.NEAREST
        )
        name = f"digit-{n:03d}.png"
        picture.save(examples / name)
        labels[name] = int(digits.target[index])
    (examples / "labels.json").write_text(json.dumps(labels, indent=1) + "\n")


IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
GRID = 7  # detector cells per side: 224 / 7 = 32 pixels each


class Preprocess(nn.Module):
    """Decoded pixels as they come from an image library (uint8, height x width x RGB) to the
    normalised channels-first floats the classifier and the detector take."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.permute(0, 3, 1, 2).to(torch.float32) / 255.0
        return (x - self.mean) / self.std


class BrightRegionDetector(nn.Module):
    """A stand-in detector with predictable behaviour: a grid cell holds an "object" when it is
    clearly brighter than the image around it. A uniform image has none; a bright patch on a dark
    background is found in the cells it covers. Boxes are the cells' pixel corners."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
        cell = 224 // GRID
        corners = [
            [c * cell, r * cell, (c + 1) * cell, (r + 1) * cell]
            for r in range(GRID)
            for c in range(GRID)
        ]
        self.register_buffer("cells", torch.tensor(corners, dtype=torch.float32))

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        brightness = (image * self.std + self.mean).mean(dim=1, keepdim=True)  # back to [0, 1]
        cells = nn.functional.adaptive_avg_pool2d(brightness, GRID).flatten(1)
        contrast = cells - brightness.mean(dim=(1, 2, 3)).unsqueeze(1)
        scores = torch.sigmoid(12.0 * contrast - 2.0)
        boxes = self.cells.unsqueeze(0).expand(image.shape[0], -1, -1)
        return scores, boxes


class DetectionFusion(nn.Module):
    """Fuses the two models' outputs: class probabilities scaled by the best detection's
    confidence, and the number of cells that hold an object."""

    def forward(
        self, scores: torch.Tensor, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        confidence = scores.max(dim=1, keepdim=True).values
        objects = (scores > 0.5).sum(dim=1).to(torch.float32)
        return torch.softmax(logits, dim=-1) * confidence, objects


def build_pipeline(out: Path) -> None:
    image = [-1, 3, 224, 224]
    cells = GRID * GRID
    parts = [
        (
            "image-preprocess",
            Preprocess(),
            "An image file, decoded and resized to 224 x 224 RGB pixels, to the normalised "
            "channels-first floats the image models take.",
            [spec("image", "uint8", [-1, 224, 224, 3])],
            [spec("image", "float32", image)],
        ),
        (
            "object-detector",
            BrightRegionDetector(),
            f"Finds bright regions on a {GRID}x{GRID} grid: per cell an objectness score in [0, 1] "
            "and its box (x0, y0, x1, y1 in pixels). A demo detector with predictable behaviour.",
            [spec("image", "float32", image)],
            [spec("scores", "float32", [-1, cells]), spec("boxes", "float32", [-1, cells, 4])],
        ),
        (
            "detection-fusion",
            DetectionFusion(),
            "Class probabilities weighted by the best detection's confidence, and the number of "
            "cells holding an object.",
            [spec("scores", "float32", [-1, cells]), spec("logits", "float32", [-1, 10])],
            [
                spec("classes", "float32", [-1, 10], labels=CIFAR10_LABELS),
                spec("objects", "float32", [-1]),
            ],
        ),
    ]
    for name, module, description, inputs, outputs in parts:
        save_export(module, out / name / "1" / "model.pt2", inputs)
        config = small_config(name, description, inputs, outputs)
        if name == "image-preprocess":
            # Files in: the worker decodes and resizes them to the uint8 pixels the model takes,
            # so the workflow takes image files too.
            config["processing"] = {
                "inputs": {
                    "image": {"type": "image", "resize": {"size": [224, 224]}, "layout": "HWC"}
                }
            }
        write_config(out / name, config)
    workflow = out / "vision-pipeline"
    workflow.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CODE_DIR / "vision-pipeline.yaml", workflow / "workflow.yaml")
    print("vision-pipeline: workflow over image-preprocess, object-detector, detection-fusion")


PARTS = {
    "tabular": build_tabular,
    "image": build_image,
    "digits": build_digits,
    "intents": build_intents,
    "dtmf": build_dtmf,
    "pipeline": build_pipeline,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="models", help="model repository folder")
    parser.add_argument(
        "--only", choices=sorted(PARTS), action="append", help="build only these (repeatable)"
    )
    parser.add_argument(
        "--skip", choices=sorted(PARTS), action="append", default=[], help="leave these out"
    )
    args = parser.parse_args()
    stable_hashing()
    out = Path(args.out_dir)
    start = time.perf_counter()
    for name, build in PARTS.items():
        if (args.only is None or name in args.only) and name not in args.skip:
            build(out)
    print(f"wrote {out.resolve()} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
