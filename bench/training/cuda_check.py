"""The training SDK on CUDA under torch.cuda.set_sync_debug_mode("error"): any call that would
synchronise the device raises. Runs the same loop without and with the SDK (metrics as CUDA
tensors, a change applied mid-run) and prints one JSON line: step times and whether the SDK
caused a sync. Needs a GPU and torch >= 1.10 with CUDA; prints {"skipped": reason} otherwise.

  PYTHONPATH=python python3 bench/training/cuda_check.py [--steps 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch

from tensorgate import train


def loop(steps: int, sdk: bool) -> dict:
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(512, 1024, device=device)
    y = torch.randint(0, 10, (512,), device=device)
    run = train.attach("cuda-check", {"lr": 0.05}) if sdk else None
    times = []
    for step in range(steps):
        if step == 50:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")  # from here on, a sync raises
        start = time.perf_counter_ns()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if run is not None:
            accuracy = (logits.argmax(1) == y).float().mean()
            run.log(step, loss=loss, accuracy=accuracy)
            run.apply(optimizer, step)
        optimizer.step()
        times.append(time.perf_counter_ns() - start)
    torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    result = {"median_step_us": statistics.median(times[50:]) / 1000}
    if run is not None:
        run.log(steps, loss=0.0)  # drains the device metrics that completed meanwhile
        result["dropped_metrics"] = run.dropped_metrics
        run.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}))
        return
    if not hasattr(torch.cuda, "set_sync_debug_mode"):
        print(json.dumps({"skipped": f"torch {torch.__version__} has no set_sync_debug_mode"}))
        return
    os.environ.setdefault("TENSORGATE_RUNS_DIR", tempfile.mkdtemp(prefix="tg-cuda-runs-"))
    base = loop(args.steps, sdk=False)
    try:
        with_sdk = loop(args.steps, sdk=True)
        synced = None
    except RuntimeError as exc:  # set_sync_debug_mode("error") raised: the SDK synchronised
        with_sdk, synced = {}, str(exc)
    print(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "none": base,
                "sdk": with_sdk,
                "sdk_caused_sync": synced,
                "ratio": with_sdk.get("median_step_us", float("nan")) / base["median_step_us"],
            }
        )
    )


if __name__ == "__main__":
    main()
