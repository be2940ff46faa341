"""The raw baseline of bench/jobs: a Python loop doing a batch job by hand, in one process, no
server: Pillow decodes each file, torchvision's classic transforms spelled out, batches of 16
through the forward pass, top 5 per item.

    python bench/jobs/raw_loop.py --model-dir DIR --list FILES.txt [--batch 16]
    python bench/jobs/raw_loop.py --make-photos DIR --count N

Prints one JSON line: items, seconds, items per second. ``--make-photos`` writes N distinct
320x240 JPEG photos (gradients, a disc, noise; seeded) for the job and the loop to read.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "processing"))
from photo_pipeline import load, preprocess, top5  # noqa: E402


def make_photos(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:240, 0:320].astype(np.float32)
    for i in range(count):
        rng = np.random.default_rng(i)
        cx, cy = rng.uniform(60, 260), rng.uniform(60, 180)
        disc = ((x - cx) ** 2 + (y - cy) ** 2) < rng.uniform(30, 70) ** 2
        rgb = np.stack([x / 320 * 255, y / 240 * 255, np.where(disc, 220.0, 60.0)], axis=-1)
        noisy = np.clip(rgb + rng.normal(0, 12, rgb.shape), 0, 255).round().astype(np.uint8)
        Image.fromarray(noisy, "RGB").save(folder / f"photo-{i:05d}.jpg", quality=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--list", type=Path, help="a file of image paths, one per line")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--make-photos", type=Path)
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    if args.make_photos:
        make_photos(args.make_photos, args.count)
        return
    model, labels = load(args.model_dir)
    files = [line for line in args.list.read_text().splitlines() if line]
    with torch.inference_mode():  # one warm-up batch, as the server warms its model at load
        model(torch.stack([preprocess(f) for f in files[: args.batch]]))
    start = time.perf_counter()
    cpu_start = time.process_time()
    answered = 0
    with torch.inference_mode():
        for i in range(0, len(files), args.batch):
            chunk = files[i : i + args.batch]
            answered += len(top5(model(torch.stack([preprocess(f) for f in chunk])), labels))
    seconds = time.perf_counter() - start
    cores = (time.process_time() - cpu_start) / seconds  # every thread's CPU time, over the wall
    result = {"items": answered, "seconds": round(seconds, 3), "cores": round(cores, 2)}
    print(json.dumps({**result, "items_per_s": round(answered / seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
