#!/usr/bin/env python3
"""What steering costs a training loop on a GPU, in one run (Python only, no gateway needed).

    PYTHONPATH=python python3 bench/training/gpu.py [--device cuda] [--blocks N]
        [--block-steps 100] [--out DIR] [--before FILE]

Two loops (an MLP at batch 512, about 1 ms a step on a fast GPU, launch-bound; a larger one at
batch 1024 where the GPU has slack), each in these modes:

  none       the loop alone: the baseline
  naive      loss.item() every step and a 2 ms wait every 10 steps (a blocking callback)
  sdk        tensorgate.train: run.log(step, loss=loss) and run.apply(optimizer, step)
  none_acc   the loop computing its accuracy on the device, logging nothing
  sdk_acc    the same with run.log(step, loss=loss, accuracy=accuracy) + apply

``--before FILE`` adds ``sdk_before`` and ``sdk_acc_before``: the same calls made through
another copy of ``tensorgate/train.py`` (an earlier commit's), so a change is judged against
what it replaces in the same run.

Every mode's loop is built once, in this one process; they then run in short blocks (100
measured steps after 10 unmeasured ones that let the GPU finish the previous block's work), the
modes taking turns, cycle after cycle. Each block's median step is compared with the baseline's
block of the same cycle, run moments before: a GPU's or host's drift over seconds (±15% between
rounds of separate runs on an H200) cancels out of the ratio. Per mode: the median block, the
median ratio and its quartiles, the time spent in the mode's own calls (log + apply) measured in
place, whether a sync happened under ``torch.cuda.set_sync_debug_mode("error")`` (sdk modes),
and whether every metric logged reached the run file. Then ``micro``: log + apply alone in a
tight loop with CUDA tensors. Writes ``training-gpu-<time>.json`` under ``--out`` ($OUT on the
device tool, else bench/results) for bench/report.ts. ``--device cpu`` tries the script on a
machine without a GPU (CPU tensors take the SDK's staged path there, so the same code runs).
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
    # name: (input, hidden layers, classes, batch, blocks per mode)
    "small": (1024, [4096], 10, 512, 30),
    "large": (1024, [4096, 4096], 10, 1024, 10),
}
CPU_LOOPS = {"small": (64, [128], 10, 32, 10), "large": (128, [256, 256], 10, 64, 5)}


def load_train_module(path: str):
    """Another copy of tensorgate/train.py, imported inside the tensorgate package."""
    spec = importlib.util.spec_from_file_location("tensorgate._train_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def ring_head(path: str) -> int:
    return struct.unpack_from("<Q", RunFile.open(path).mm, RING)[0]


class Loop:
    """One mode's training loop, built once and run block by block."""

    def __init__(self, shape, device, mode: str, sdk_module) -> None:
        torch.manual_seed(0)
        inputs, hidden, classes, batch, _ = shape
        layers: list = []
        width = inputs
        for h in hidden:
            layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
            width = h
        self.model = torch.nn.Sequential(*layers, torch.nn.Linear(width, classes)).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.x = torch.randn(batch, inputs, device=device)
        self.y = torch.randint(0, classes, (batch,), device=device)
        self.mode = mode
        self.sdk = mode.startswith("sdk")
        self.with_accuracy = "_acc" in mode
        self.run = sdk_module.attach(f"gpu-{mode}", {"lr": 0.05}) if self.sdk else None
        self.cuda = device.type == "cuda"
        self.step = 0
        self.logged = 0
        self.synced: str | None = None
        self.block_medians: list[float] = []
        self.hooks: list[int] = []

    def block(self, steps: int, settle: int) -> None:
        """``settle`` unmeasured steps (the GPU finishing the previous mode's work), then
        ``steps`` measured ones; their median goes to block_medians. The sdk modes run under
        set_sync_debug_mode("error"): a sync raises, is recorded, and ends the mode."""
        if self.synced:
            return
        model, optimizer, x, y, run = self.model, self.optimizer, self.x, self.y, self.run
        clock = time.perf_counter_ns
        times: list[int] = []
        if self.cuda:
            torch.cuda.synchronize()
            if self.sdk:
                torch.cuda.set_sync_debug_mode("error")
        try:
            for i in range(settle + steps):
                step = self.step
                self.step += 1
                start = clock()
                logits = model(x)
                loss = torch.nn.functional.cross_entropy(logits, y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                accuracy = (logits.argmax(1) == y).float().mean() if self.with_accuracy else None
                hook_start = clock()
                if run is not None:
                    if accuracy is None:
                        run.log(step, loss=loss)
                        self.logged += 1
                    else:
                        run.log(step, loss=loss, accuracy=accuracy)
                        self.logged += 2
                    run.apply(optimizer, step)
                elif self.mode == "naive":
                    loss.item()
                    if step % 10 == 0:
                        time.sleep(0.002)
                hook_end = clock()
                optimizer.step()
                end = clock()
                if i >= settle:
                    times.append(end - start)
                    self.hooks.append(hook_end - hook_start)
        except RuntimeError as exc:  # set_sync_debug_mode("error") raised: something synchronised
            self.synced = str(exc).splitlines()[0]
        finally:
            if self.cuda:
                torch.cuda.set_sync_debug_mode("default")
        if times:
            self.block_medians.append(statistics.median(times) / 1000)

    def finish(self) -> dict:
        result: dict = {
            "median_us": statistics.median(self.block_medians) if self.block_medians else None,
            "hook_median_us": statistics.median(self.hooks) / 1000 if self.hooks else None,
            "synced": self.synced,
        }
        if self.run is not None:
            if self.cuda:
                torch.cuda.synchronize()
            path = self.run.path
            self.run.close()
            result["metrics_logged"] = self.logged
            result["metrics_published"] = ring_head(path)
            result["dropped_metrics"] = self.run.dropped_metrics
        return result


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


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
    parser.add_argument("--block-steps", type=int, default=100, help="measured steps a block")
    parser.add_argument("--settle", type=int, default=10, help="unmeasured steps before a block")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--blocks", type=int, help="blocks per mode (default: the loop's own)")
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
        runs = {
            mode: Loop(shape, device, mode, modules["_before" if "_before" in mode else ""])
            for mode in modes
        }
        for loop in runs.values():
            loop.block(args.warmup, settle=0)  # warm-up: allocator, kernels, first flushes
            loop.block_medians.clear()
            loop.hooks.clear()
        blocks = args.blocks or shape[4]
        for _ in range(blocks):
            for loop in runs.values():
                loop.block(args.block_steps, settle=args.settle)
        summary = {}
        for mode, loop in runs.items():
            s = loop.finish()
            # Each block against the baseline's block of the same cycle, run moments apart:
            # drift slower than a cycle cancels out of the ratio.
            base = runs["none_acc" if "_acc" in mode else "none"].block_medians
            ratios = [m / b for m, b in zip(loop.block_medians, base)]
            s["block_medians_us"] = loop.block_medians
            s["vs_baseline"] = statistics.median(ratios) if ratios else None
            s["ratio_p25"] = quantile(ratios, 0.25) if ratios else None
            s["ratio_p75"] = quantile(ratios, 0.75) if ratios else None
            summary[mode] = s
        inputs, hidden, classes, batch, _ = shape
        results.append(
            {"loop": name, "mlp": [inputs, *hidden, classes], "batch": batch, "modes": summary}
        )
        for mode, s in summary.items():
            print(
                f"{name:6} {mode:16} {s['median_us']:9.1f} us/step"
                f"  x{s['vs_baseline']:.4f} (p25 {s['ratio_p25']:.3f}, p75 {s['ratio_p75']:.3f})"
                f"  in calls {s['hook_median_us']:7.1f} us"
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
        "method": "blocks",
        "block_steps": args.block_steps,
        "blocks": {name: args.blocks or shape[4] for name, shape in loops.items()},
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
