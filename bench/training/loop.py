"""One training loop of bench/training, in one of four modes, printing JSON lines on stdout.

  none   the loop alone: the baseline
  sdk    attached with tensorgate.train: log(loss) and apply(optimizer) every step
  naive  the setup from the user report: loss.item() every step and, every 10 steps, an HTTP
         request to a control server whose answer (the lr) it waits for
  micro  no training: the SDK's own cost per step, log + apply in a tight loop, minus the loop

Every mode also times its own per-step code in place (hook_*): for sdk, the log and apply calls
as the real loop runs them, with the CPU caches cooled by the training step between them.

Step times are measured per step with perf_counter_ns, after a warm-up. Torch runs on one thread
so that the gateway and the driver have the machine's other core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request

import torch

from tensorgate import train


def model_and_data(hidden: int, batch: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )
    x = torch.randn(batch, 256)
    y = torch.randint(0, 10, (batch,))
    return model, x, y


def summary(times_ns: list[int]) -> dict:
    us = sorted(t / 1000 for t in times_ns)
    return {
        "steps": len(us),
        "median_us": statistics.median(us),
        "mean_us": statistics.fmean(us),
        "p90_us": us[int(0.9 * (len(us) - 1))],
        "p99_us": us[int(0.99 * (len(us) - 1))],
    }


def train_loop(args) -> dict:
    model, x, y = model_and_data(args.hidden, args.batch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    run = None
    if args.mode == "sdk":
        run = train.attach(
            "bench-sdk", {"lr": 0.05, "momentum": 0.9}, {"lr": {"min": 1e-4, "max": 1.0}}
        )
        print(json.dumps({"run_id": run.id}), flush=True)
    naive_requests = 0
    times: list[int] = []
    hooks: list[int] = []  # time in the mode's own code each step (the SDK's calls, in place)
    lrs_seen: set[float] = set()
    lr_changes, last_lr = 0, optimizer.param_groups[0]["lr"]
    total = args.warmup + args.steps
    clock = time.perf_counter_ns
    for step in range(total):
        start = clock()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        hook_start = clock()
        if run is not None:
            run.log(step, loss=loss)
            run.apply(optimizer, step)
        elif args.mode == "naive":
            value = loss.item()  # what the report's callback did every step
            if step % 10 == 0:
                url = f"{args.control_url}?step={step}&loss={value}"
                with urllib.request.urlopen(url) as reply:  # a connection per request
                    lr = json.loads(reply.read())["lr"]
                for group in optimizer.param_groups:
                    group["lr"] = lr
                naive_requests += 1
        hook_end = clock()
        optimizer.step()
        end = clock()
        if step >= args.warmup:
            times.append(end - start)
            hooks.append(hook_end - hook_start)
        lr = optimizer.param_groups[0]["lr"]
        if step >= args.warmup and lr != last_lr:
            lr_changes += 1
        last_lr = lr
        lrs_seen.add(lr)
    if run is not None:
        run.close()
    return {
        **summary(times),
        "hook_median_us": statistics.median(hooks) / 1000,
        "hook_mean_us": statistics.fmean(hooks) / 1000,
        "distinct_lrs": len(lrs_seen),
        "lr_changes": lr_changes,
        "naive_requests": naive_requests,
    }


def micro(args) -> dict:
    """The SDK's cost per step: log(loss=...) + apply(optimizer) with nothing else in the loop,
    minus the same loop without them. Three loss forms: a float, a 0-d CPU tensor."""
    model, _, _ = model_and_data(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    run = train.attach("bench-micro", {"lr": 0.05, "momentum": 0.9})
    n = args.steps
    clock = time.perf_counter_ns
    tensor_loss = torch.tensor(0.5)
    results = {}
    for form, loss in (("float", 0.5), ("cpu_tensor", tensor_loss)):
        best_sdk = best_empty = float("inf")
        for _ in range(5):
            start = clock()
            for step in range(n):
                run.log(step, loss=loss)
                run.apply(optimizer, step)
            best_sdk = min(best_sdk, (clock() - start) / n)
            start = clock()
            for _ in range(n):
                pass
            best_empty = min(best_empty, (clock() - start) / n)
        cost_us = (best_sdk - best_empty) / 1000
        results[form] = {"sdk_ns": best_sdk, "loop_ns": best_empty, "cost_us": cost_us}
    run.close()
    return {"iterations": n, **results}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["none", "sdk", "naive", "micro"], required=True)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--control-url", default="")
    parser.add_argument("--cpu", type=int, help="pin the loop to this core")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    torch.set_num_threads(1)
    result = micro(args) if args.mode == "micro" else train_loop(args)
    print(json.dumps({"mode": args.mode, "torch": torch.__version__, **result}), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
