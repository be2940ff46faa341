"""The raw baseline of bench/processing: the whole pipeline in one Python process, no server.

    python bench/processing/raw.py --model-dir DIR --photo FILE --calls N [--batch 16]

Prints one JSON line: per-call milliseconds of "path -> top-5 labels" (decode, transforms,
forward, top 5) one image at a time, and the images per second of batches of ``--batch`` images
(decoded one after another, one forward pass), the raw figure for concurrency.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from photo_pipeline import load, make_photo, preprocess, top5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--photo", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--make-photo", action="store_true", help="only write the photo")
    args = parser.parse_args()
    if args.make_photo:
        make_photo(args.photo)
        return
    model, labels = load(args.model_dir)
    path = str(args.photo)

    def one() -> None:
        with torch.inference_mode():
            top5(model(preprocess(path).unsqueeze(0)), labels)

    def batch() -> None:
        with torch.inference_mode():
            top5(model(torch.stack([preprocess(path) for _ in range(args.batch)])), labels)

    for _ in range(10):
        one()
    samples = []
    for _ in range(args.calls):
        start = time.perf_counter()
        one()
        samples.append((time.perf_counter() - start) * 1000)
    batch()
    batches = max(3, args.calls // (4 * args.batch))
    start = time.perf_counter()
    for _ in range(batches):
        batch()
    images_per_s = batches * args.batch / (time.perf_counter() - start)
    with torch.inference_mode():
        answer = top5(model(preprocess(path).unsqueeze(0)), labels)[0]
    result = {"ms": samples, "batched_images_per_s": round(images_per_s, 1), "answer": answer}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
