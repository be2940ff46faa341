"""The "photo path -> top-5 labels" pipeline as a PyTorch user writes it by hand, shared by the
raw baseline and the Python peers of bench/processing (no tensorgate code runs in them): Pillow
decodes, torchvision's classic ImageNet transforms spelled out (resize the shorter side to 256,
crop 224, scale, normalise), the forward pass under ``inference_mode``, softmax and top 5.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from model_file import load_version  # noqa: E402

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
SHORT, CROP = 256, 224


def make_photo(path: Path) -> None:
    """A 320x240 photo-like PNG (gradients, a disc, noise), the same on every run."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:240, 0:320].astype(np.float32)
    disc = ((x - 190) ** 2 + (y - 110) ** 2) < 60**2
    rgb = np.stack([x / 320 * 255, y / 240 * 255, np.where(disc, 220.0, 60.0)], axis=-1)
    noisy = np.clip(rgb + rng.normal(0, 12, rgb.shape), 0, 255).round().astype(np.uint8)
    Image.fromarray(noisy, "RGB").save(path)


def preprocess(path: str) -> torch.Tensor:
    """One image file to a normalised 3x224x224 tensor."""
    with Image.open(path) as image:
        rgb = image.convert("RGB")
    width, height = rgb.size
    if width <= height:
        size = (SHORT, int(SHORT * height / width))
    else:
        size = (int(SHORT * width / height), SHORT)
    rgb = rgb.resize(size, Image.Resampling.BILINEAR)
    left, top = round((size[0] - CROP) / 2), round((size[1] - CROP) / 2)
    rgb = rgb.crop((left, top, left + CROP, top + CROP))
    x = torch.from_numpy(np.asarray(rgb, dtype=np.uint8).copy()).permute(2, 0, 1).float() / 255.0
    return (x - MEAN) / STD


def top5(logits: torch.Tensor, labels: list[str]) -> list[list[dict[str, Any]]]:
    probabilities = torch.softmax(logits, dim=-1)
    scores, indices = probabilities.topk(min(5, probabilities.shape[-1]), dim=-1)
    return [
        [{"label": labels[i], "score": round(s, 4)} for s, i in zip(row_s, row_i, strict=True)]
        for row_s, row_i in zip(scores.tolist(), indices.tolist(), strict=True)
    ]


def load(model_dir: Path) -> tuple[Callable[..., Any], list[str]]:
    """The model, with the thread count tensorgate's worker uses, and its labels."""
    model, config = load_version(model_dir, "1")
    torch.set_num_threads(config.get("resources", {}).get("threads", 1))
    torch.set_num_interop_threads(1)
    return model, config["outputs"][0].get("labels") or [str(i) for i in range(1000)]
