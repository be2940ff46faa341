#!/usr/bin/env python3
"""What steering costs a training loop on a GPU, in one run (Python only, no gateway needed).

    PYTHONPATH=python python3 bench/training/gpu.py [--device cuda] [--steps 1000] [--rounds 3]
        [--out DIR] [--before FILE]

Two loops (an MLP at batch 512, about 1 ms a step on a fast GPU, launch-bound; a larger one at
batch 1024 where the GPU has slack), each in these modes, interleaved in rounds so that drift
hits all alike:

  none       the loop alone: the baseline
  naive      loss.item() every step and a 2 ms wait every 10 steps (a blocking callback)
  sdk        tensorgate.train: run.log(step, loss=loss) and run.apply(optimizer, step)
  none_acc   the loop computing its accuracy on the device, logging nothing
  sdk_acc    the same with run.log(step, loss=loss, accuracy=accuracy) + apply

``--before FILE`` adds ``sdk_before`` and ``sdk_acc_before``: the same calls made through
another copy of ``tensorgate/train.py`` (an earlier commit's), so a change is judged against
what it replaces in the same run.

Per mode: the median step time over the rounds' per-step medians, the time spent in the mode's
own calls (log + apply) measured in place, whether a sync happened under
``torch.cuda.set_sync_debug_mode("error")`` (sdk modes), and whether every metric logged reached
the run file. Then ``micro``: log + apply alone in a tight loop with CUDA tensors. Writes
``training-gpu-<time>.json`` under ``--out`` ($OUT on the device tool, else bench/results) for
bench/report.ts. ``--device cpu`` tries the script on a machine without a GPU (CPU tensors take
the SDK's staged path there, so the same code runs).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import struct
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from tensorgate import train  # noqa: E402
from tensorgate._runfile import RING, RunFile  # noqa: E402

LOOPS = {
    # name: (input, hidden layers, classes, batch, rounds): the launch-bound loop varies more
    # from round to round, so it gets more of them.
    "small": (1024, [4096], 10, 512, 7),
    "large": (1024, [4096, 4096], 10, 1024, 3),
}
CPU_LOOPS = {"small": (64, [128], 10, 32, 3), "large": (128, [256, 256], 10, 64, 3)}


def load_train_module(path: str):
    """Another copy of tensorgate/train.py, imported inside the tensorgate package."""
    spec = importlib.util.spec_from_file_location("tensorgate._train_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def ring_head(path: str) -> int:
    return struct.unpack_from("<Q", RunFile.open(path).mm, RING)[0]


def run_loop(shape, device, mode: str, steps: int, warmup: int, sdk_module) -> dict:
    torch.manual_seed(0)
    inputs, hidden, classes, batch, _ = shape
    layers: list = []
    width = inputs
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, classes)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(batch, inputs, device=device)
    y = torch.randint(0, classes, (batch,), device=device)
    sdk = mode.startswith("sdk")
    with_accuracy = mode.endswith("_acc") or mode.endswith("_acc_before")
    run = sdk_module.attach(f"gpu-{mode}", {"lr": 0.05}) if sdk else None
    cuda = device.type == "cuda"
    times: list[int] = []
    hooks: list[int] = []
    synced = None
    clock = time.perf_counter_ns
    logged = 0
    try:
        for step in range(warmup + steps):
            if step == warmup and cuda:
                torch.cuda.synchronize()
                if sdk:
                    torch.cuda.set_sync_debug_mode("error")  # from here on, a sync raises
            start = clock()
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            accuracy = (logits.argmax(1) == y).float().mean() if with_accuracy else None
            hook_start = clock()
            if run is not None:
                if accuracy is None:
                    run.log(step, loss=loss)
                    logged += 1
                else:
                    run.log(step, loss=loss, accuracy=accuracy)
                    logged += 2
                run.apply(optimizer, step)
            elif mode == "naive":
                loss.item()
                if step % 10 == 0:
                    time.sleep(0.002)
            hook_end = clock()
            optimizer.step()
            end = clock()
            if step >= warmup:
                times.append(end - start)
                hooks.append(hook_end - hook_start)
    except RuntimeError as exc:  # set_sync_debug_mode("error") raised: something synchronised
        synced = str(exc).splitlines()[0]
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
    result: dict = {
        "median_us": statistics.median(times) / 1000 if times else None,
        "hook_median_us": statistics.median(hooks) / 1000 if hooks else None,
        "synced": synced,
    }
    if run is not None:
        path = run.path
        run.close()
        result["metrics_logged"] = logged
        result["metrics_published"] = ring_head(path)
        result["dropped_metrics"] = run.dropped_metrics
    return result


def micro(device, sdk_module, n: int) -> dict:
    """log(loss, accuracy) + apply with device tensors and nothing else, against an empty loop."""
    model = torch.nn.Linear(4, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = torch.tensor(0.5, device=device)
    accuracy = torch.tensor(0.25, device=device)
    run = sdk_module.attach("gpu-micro", {"lr": 0.05})
    clock = time.perf_counter_ns
    best_sdk = best_empty = float("inf")
    for _ in range(5):
        start = clock()
        for step in range(n):
            run.log(step, loss=loss, accuracy=accuracy)
            run.apply(optimizer, step)
        best_sdk = min(best_sdk, (clock() - start) / n)
        start = clock()
        for _ in range(n):
            pass
        best_empty = min(best_empty, (clock() - start) / n)
    run.close()
    return {"iterations": n, "cost_us": (best_sdk - best_empty) / 1000}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--rounds", type=int, help="rounds per loop (default: the loop's own)")
    parser.add_argument("--micro", type=int, default=20000)
    parser.add_argument("--before", help="an earlier tensorgate/train.py to compare against")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --device cpu to try the script")
    if device.type == "cpu":
        # CPU tensors take the staged path CUDA tensors take, so the script tries that code.
        train._STAGED_DEVICE_TYPES = frozenset({"cuda", "cpu"})
        torch.set_num_threads(1)
    os.environ["TENSORGATE_RUNS_DIR"] = tempfile.mkdtemp(prefix="tg-gpu-runs-")
    modules = {"": train}
    if args.before:
        modules["_before"] = load_train_module(args.before)
        if device.type == "cpu":
            modules["_before"]._STAGED_DEVICE_TYPES = frozenset({"cuda", "cpu"})
    modes = ["none", "naive", "none_acc"]
    for suffix in modules:
        modes += [f"sdk{suffix}", f"sdk_acc{suffix}"]
    loops = LOOPS if device.type == "cuda" else CPU_LOOPS
    started = time.monotonic()
    results = []
    for name, shape in loops.items():
        rounds: dict[str, list[dict]] = {mode: [] for mode in modes}
        for _ in range(args.rounds or shape[4]):
            for mode in modes:
                module = modules["_before" if mode.endswith("_before") else ""]
                rounds[mode].append(run_loop(shape, device, mode, args.steps, args.warmup, module))
        summary = {}
        for mode, runs in rounds.items():
            medians = [r["median_us"] for r in runs if r["median_us"] is not None]
            summary[mode] = {
                "median_us": statistics.median(medians) if medians else None,
                "round_medians_us": medians,
                "hook_median_us": statistics.median(
                    r["hook_median_us"] for r in runs if r["hook_median_us"] is not None
                ),
                "synced": next((r["synced"] for r in runs if r["synced"]), None),
                **(
                    {
                        "metrics_logged": sum(r["metrics_logged"] for r in runs),
                        "metrics_published": sum(r["metrics_published"] for r in runs),
                        "dropped_metrics": sum(r["dropped_metrics"] for r in runs),
                    }
                    if "metrics_logged" in runs[0]
                    else {}
                ),
            }
        for mode, s in summary.items():
            # Each round's median against its own round's baseline, run moments apart: drift
            # between rounds cancels out of the ratio.
            ref = rounds["none_acc" if "_acc" in mode else "none"]
            ratios = [
                r["median_us"] / b["median_us"]
                for r, b in zip(rounds[mode], ref)
                if r["median_us"] and b["median_us"]
            ]
            s["vs_baseline"] = statistics.median(ratios) if ratios else None
            s["round_ratios"] = ratios
        inputs, hidden, classes, batch, _ = shape
        results.append(
            {"loop": name, "mlp": [inputs, *hidden, classes], "batch": batch, "modes": summary}
        )
        for mode, s in summary.items():
            print(
                f"{name:6} {mode:16} {s['median_us']:9.1f} us/step"
                f"  x{s['vs_baseline']:.4f}  in calls {s['hook_median_us']:7.1f} us"
                + (f"  SYNC: {s['synced']}" if s["synced"] else "")
                + (
                    f"  metrics {s['metrics_published']}/{s['metrics_logged']}"
                    if "metrics_logged" in s
                    else ""
                ),
                flush=True,
            )
    micro_results = {suffix or "sdk": micro(device, m, args.micro) for suffix, m in modules.items()}
    for key, m in micro_results.items():
        print(f"micro {key}: {m['cost_us']:.2f} us per log(loss, accuracy) + apply", flush=True)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    out = {
        "benchmark": "training-gpu",
        "date": datetime.now(timezone.utc).isoformat(),
        "device": str(device),
        "gpu": gpu,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "steps": args.steps,
        "rounds": {name: args.rounds or shape[4] for name, shape in loops.items()},
        "before": bool(args.before),
        "seconds": round(time.monotonic() - started, 1),
        "loops": results,
        "micro": micro_results,
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    stamp = out["date"][:19].replace(":", "-")
    path = Path(args.out) / f"training-gpu-{stamp}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
