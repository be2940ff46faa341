#!/usr/bin/env python3
"""Baseline for bench/mcp-overhead: the raw forward pass inside one Python process.

Loads the same model file the server serves, by plain PyTorch (bench/model_file.py), with the
thread count of the model config's ``resources.threads`` (and one inter-op thread, as the worker
uses), warms it up, then times
``model(x)`` under ``torch.inference_mode()`` on the input read from a ``.npy`` file. Nothing else
is timed: no copy, no conversion, no I/O. With ``--direct`` an exported program's forward is called
as tensorgate's worker calls it: the module's check of the arguments' structure done once
(``skip_per_call_structure_check`` in python/tensorgate/_loader.py), and the graph called without
the module around it (``direct_forward`` in python/tensorgate/_direct.py); its shape guards still
run.

Standalone (prints one JSON object)::

    .tensorgate/venv/bin/python bench/mcp-overhead/baseline.py --model-dir models/image-classifier \
        --input /tmp/x.npy --iterations 100

With ``--serve`` it loads and warms up once, prints ``{"ready": ...}``, then for every line ``N``
on stdin runs N timed forwards and prints ``{"ms": [...]}`` (``N GAP_MS`` sleeps GAP_MS before
each forward, the idle time a served request sees between calls); run.ts uses this to interleave the
baseline with the MCP scenarios so that drift of the machine hits every scenario alike.
No third-party packages beyond torch and numpy (which torch needs anyway).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from model_file import load_version  # noqa: E402
from tensorgate._direct import direct_forward  # noqa: E402
from tensorgate._loader import skip_per_call_structure_check  # noqa: E402


def load(model_dir: Path, version: str | None) -> tuple[Callable[..., Any], dict]:
    config = json.loads((model_dir / "config.json").read_text())
    version = version or str(config.get("default_version") or max(config["versions"], key=int))
    entry = config["versions"][version]
    if entry["format"] not in ("export", "aoti", "torchscript"):
        raise SystemExit(f"version {version} is {entry['format']}; the baseline loads model files")
    threads = int(config.get("resources", {}).get("threads", 1))
    torch.set_num_threads(max(1, threads))
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
    model, _ = load_version(model_dir, version)
    return model, {"version": version, "threads": torch.get_num_threads(), "file": entry["file"]}


def as_served(model: Callable[..., Any], x: torch.Tensor) -> Callable[..., Any] | None:
    """The exported program's forward as the worker calls it; None where the worker would call
    the module as it is (another format, older torch)."""
    if not skip_per_call_structure_check(model, 1):
        return None
    return direct_forward(model, None, [x])


def timed(model: Callable[..., Any], x: torch.Tensor, n: int, gap_ms: float = 0.0) -> list[float]:
    """n timed forwards, back to back or with ``gap_ms`` of sleep before each (as when served)."""
    out: list[float] = []
    with torch.inference_mode():
        for _ in range(n):
            if gap_ms > 0:
                time.sleep(gap_ms / 1000.0)
            t0 = time.perf_counter()
            model(x)
            out.append((time.perf_counter() - t0) * 1000.0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model-dir", type=Path, required=True, help="model folder holding config.json"
    )
    parser.add_argument("--version", help="model version (default: the config's default_version)")
    parser.add_argument("--input", type=Path, required=True, help=".npy file with the input tensor")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--gap-ms", type=float, default=0.0, help="sleep before each timed forward")
    parser.add_argument(
        "--direct",
        action="store_true",
        help="call an exported program's forward as the worker does (see the module's docstring)",
    )
    parser.add_argument(
        "--serve", action="store_true", help="answer 'N' lines on stdin (used by run.ts)"
    )
    args = parser.parse_args()

    model, info = load(args.model_dir, args.version)
    x = torch.from_numpy(np.load(args.input))
    direct = as_served(model, x) if args.direct else None
    info["direct"] = direct is not None
    model = direct or model
    timed(model, x, args.warmup)
    info.update(
        torch=torch.__version__,
        python=platform.python_version(),
        shape=list(x.shape),
        dtype=str(x.dtype).replace("torch.", ""),
    )
    if not args.serve:
        print(json.dumps({**info, "ms": timed(model, x, args.iterations, args.gap_ms)}))
        return 0
    print(json.dumps({"ready": info}), flush=True)
    for line in sys.stdin:
        words = line.split()
        n = int(words[0]) if words else 0
        if n <= 0:
            break
        gap_ms = float(words[1]) if len(words) > 1 else 0.0
        print(json.dumps({"ms": timed(model, x, n, gap_ms)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
