#!/usr/bin/env python3
"""The GPU check of current PyTorch's formats and variants, in one run on a machine with CUDA.

    python3 bench/gpu/check.py [--device cuda] [--out DIR]

Builds the demo models with this interpreter's torch, and a repository of the image and tabular
models on ``--device``: the ``.pt2`` program, eager code, eager with ``optimization.torch``
``compile`` and ``aoti``, a TorchScript file scripted from the eager code, and an AOTInductor
package made by ``tensorgate export --format aoti``; all offer bf16 and fp16 where they can. Then
it starts ``tensorgate serve`` (``node bin/tensorgate.js``, the workers on this interpreter) and
checks, for each model:

- its OIP v2 answer against a plain forward of the same file in this process on the same device,
  by the accuracy rule for class outputs (error over the row's range, top class unchanged);
- its stage timings in the answer: a compute time, and a transfer time (the round trip to the
  worker less the forward pass) that is not negative;
- every variant's state and check as ``describe_model`` (MCP over HTTP) reports it: fp32 compiled
  where asked, bf16 and fp16 accepted;
- the GPU memory of its worker (``tensorgate_worker_gpu_memory_bytes`` in /metrics).

Writes ``gpu-check-<time>.json`` under ``--out`` (``$OUT`` on the device tool, else bench/results,
which bench/report.ts renders into docs/benchmarks.md) with the server's log beside it, and prints
a line per check; exits 1 if one fails. ``--device cpu`` runs the same on a CPU machine
(no GPU memory), to try the script before spending device time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python"))
from model_file import load_file  # noqa: E402
from tensorgate._accuracy import check_output  # noqa: E402
from tensorgate._loader import TensorSpec  # noqa: E402

FP32_TOLERANCE = 1e-4
#: Rows of the models that could not be made (the AOTInductor package export), for the report.
EXPORT_FAILURES: list[dict[str, Any]] = []
GPU_METRIC = "tensorgate_worker_gpu_memory_bytes"
ROWS = 4


def model_copy(demo: Path, repo: Path, source: str, name: str, version: str, **extra: Any) -> Path:
    """One version of a demo model as version 1 of a model of its own, on the check's device."""
    config = json.loads((demo / source / "config.json").read_text())
    dest = repo / name
    shutil.copytree(demo / source / version, dest / "1")
    config.update(name=name, default_version="1", versions={"1": config["versions"][version]})
    config["resources"] = {**config["resources"], "device": DEVICE}
    config["batching"] = {"max_batch_size": 16, "max_queue_delay_us": 1000}
    config.update(extra)
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    return dest


def build_repository(work: Path) -> Path:
    demo, repo = work / "demo", work / "repo"
    repo.mkdir()
    run(
        [sys.executable, str(ROOT / "scripts/make_demo_models.py"), str(demo), "--skip", "pipeline"]
    )
    half = {"parameters": {"precision": ["fp32", "bf16", "fp16"]}}
    for source, short in (("image-classifier", "image"), ("tabular-classifier", "tabular")):
        model_copy(demo, repo, source, f"{short}-pt2", "1", **half)
        model_copy(demo, repo, source, f"{short}-eager", "2", **half)
        model_copy(demo, repo, source, f"{short}-compile", "2", optimization={"torch": "compile"})
        model_copy(demo, repo, source, f"{short}-aoti-variant", "2", optimization={"torch": "aoti"})
    # TorchScript, as users still have it: scripted from the eager code.
    scripted = model_copy(demo, repo, "image-classifier", "image-torchscript", "2", **half)
    sys.path.insert(0, str(scripted / "1"))
    import model as code  # the demo's resnet.py, copied by make_demo_models.py

    module = code.build()
    module.load_state_dict(torch.load(str(scripted / "1" / "weights.pt"), weights_only=True))
    torch.jit.script(module.eval()).save(str(scripted / "1" / "model.pt"))
    config = json.loads((scripted / "config.json").read_text())
    config["versions"] = {"1": {"format": "torchscript", "file": "model.pt"}}
    (scripted / "config.json").write_text(json.dumps(config, indent=2))
    # An AOTInductor package made by the CLI, for the device: repo/image-eager-aoti. Its failure
    # is a result like the others', and the other models are checked.
    try:
        source = str(repo / "image-eager")
        tensorgate(work, "export", source, "--format", "aoti", "--device", DEVICE)
    except subprocess.CalledProcessError as exc:
        EXPORT_FAILURES.append(
            {"model": "image-eager-aoti", "format": "aoti", "ok": False,
             "error": f"tensorgate export: {(exc.stderr or '').strip().splitlines()[-1:]}"}
        )  # fmt: skip
        print(f"BAD image-eager-aoti: {EXPORT_FAILURES[-1]['error']}")
    return repo


def tensorgate(work: Path, *args: str) -> None:
    run(["node", str(ROOT / "bin/tensorgate.js"), "--registry", str(work / "cli.db"),
         "--cache-dir", str(work / "cache"), *args])  # fmt: skip


def run(cmd: list[str]) -> None:
    env = {**os.environ, "TENSORGATE_PYTHON": sys.executable}
    done = subprocess.run(
        cmd, env=env, cwd=ROOT, stdout=sys.stderr, stderr=subprocess.PIPE, text=True
    )
    sys.stderr.write(done.stderr)
    done.check_returncode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, body: object | None = None, headers: dict[str, str] | None = None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, headers={"content-type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        return response.headers, response.read().decode()


class Mcp:
    """The two MCP calls the check needs, as JSON-RPC over Streamable HTTP."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.headers = {"accept": "application/json, text/event-stream"}
        client = {"name": "gpu-check", "version": "0"}
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
        headers, _ = self.post("initialize", hello)
        if headers.get("mcp-session-id"):
            self.headers["mcp-session-id"] = headers["mcp-session-id"]
        http(self.url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, self.headers)

    def post(self, method: str, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        headers, text = http(self.url, body, self.headers)
        lines = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        return headers, json.loads(lines[-1] if lines else text)

    def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        _, reply = self.post("tools/call", {"name": name, "arguments": arguments})
        return reply["result"]


def reference(repo: Path, model: str, x: torch.Tensor) -> torch.Tensor:
    """A plain forward of the model's file (or eager code) in this process, fp32, on the device."""
    config = json.loads((repo / model / "config.json").read_text())
    v = config["versions"]["1"]
    folder = repo / model / "1"
    if v["format"] == "eager":
        sys.path.insert(0, str(folder))
        sys.modules.pop("model", None)
        import model as code

        module = code.build()
        module.load_state_dict(torch.load(str(folder / v["file"]), weights_only=True))
        module = module.eval().to(DEVICE)
        sys.path.remove(str(folder))
    elif v["format"] == "export":
        from torch.export.passes import move_to_device_pass

        program = torch.export.load(str(folder / v["file"]))
        module = (
            move_to_device_pass(program, DEVICE).module() if DEVICE != "cpu" else program.module()
        )
    elif v["format"] == "torchscript":
        module = torch.jit.load(str(folder / v["file"]), map_location=DEVICE).eval()
    else:
        module = load_file(folder / v["file"], v["format"])  # an AOTInductor package: its device
    with torch.inference_mode():
        out = module(x.to(DEVICE))
    return (out if isinstance(out, torch.Tensor) else next(iter(out.values()))).float().cpu()


def check_model(base: str, mcp: Mcp, repo: Path, model: str) -> dict[str, Any]:
    """One model's answer against a plain forward, its variants, and its worker's GPU memory."""
    config = json.loads((repo / model / "config.json").read_text())
    spec = config["inputs"][0]
    shape = [ROWS if d == -1 else d for d in spec["shape"]]
    x = torch.rand(shape, generator=torch.Generator().manual_seed(3))
    body = {"inputs": [{"name": spec["name"], "shape": shape, "datatype": "FP32",
                        "data": x.flatten().tolist()}]}  # fmt: skip
    _, text = http(f"{base}/v2/models/{model}/infer", body)
    response = json.loads(text)
    answer = response["outputs"][0]
    # The worker times a CUDA request's stages by events on the stream and waits once: its
    # compute must be there, and within the round trip (the transfer, the rest of it, not < 0).
    stages = {k: response.get("parameters", {}).get(f"{k}_ms") for k in ("transfer", "compute")}
    stages_ok = all(isinstance(v, (int, float)) for v in stages.values()) and (
        stages["compute"] > 0 and stages["transfer"] >= 0
    )
    got = torch.tensor(answer["data"]).reshape(answer["shape"])
    out = config["outputs"][0]
    labelled = bool(out.get("labels"))
    spec_out = TensorSpec(out["name"], torch.float32, out["shape"], labels=labelled)
    check = check_output(spec_out, got, reference(repo, model, x), FP32_TOLERANCE)
    described = mcp.tool("describe_model", {"model": model})["structuredContent"]
    variants = described["versions"][0].get("variants", [])
    metrics = http(f"{base}/metrics")[1]
    gpu = [
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith(GPU_METRIC) and f'model="{model}"' in line
    ]
    fp32 = next((v for v in variants if v["precision"] == "fp32"), {})
    compiled = config.get("optimization", {}).get("torch") in ("compile", "aoti")
    ok = (
        check.within
        and stages_ok
        and all(v["state"] == "ready" for v in variants)
        and not (compiled and fp32.get("method") == "plain")
    )
    row = {
        "model": model,
        "format": config["versions"]["1"]["format"],
        "served_vs_in_process": {**check.report(), "within": check.within},
        "variants": variants,
        "stages_ms": stages,
        "worker_gpu_memory_mb": round(sum(gpu) / 2**20, 1) if gpu else None,
        "ok": ok,
    }
    print(
        f"{'ok ' if ok else 'BAD'} {model}: {check.describe()}; compute {stages['compute']} ms, "
        f"transfer {stages['transfer']} ms; variants "
        + ", ".join(f"{v['precision']} {v['state']} ({v['method']})" for v in variants)
        + (f"; worker GPU memory {row['worker_gpu_memory_mb']} MB" if gpu else "")
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    work = Path(tempfile.mkdtemp(prefix="tg-gpu-check-"))
    started = time.perf_counter()
    repo = build_repository(work)
    port = free_port()
    server = subprocess.Popen(
        [
            "node",
            str(ROOT / "bin/tensorgate.js"),
            "--models",
            str(repo),
            "--registry",
            str(work / "r.db"),
            "--cache-dir",
            str(work / "cache"),
            "--log-format",
            "pretty",
            "serve",
            "--http",
            str(port),
        ],  # fmt: skip
        cwd=ROOT,
        env={**os.environ, "TENSORGATE_PYTHON": sys.executable},
        stderr=open(work / "server.log", "w"),  # noqa: SIM115 - lives as long as the server
    )
    base = f"http://127.0.0.1:{port}"
    results: list[dict[str, Any]] = list(EXPORT_FAILURES)
    failed = len(EXPORT_FAILURES)
    try:
        deadline = time.time() + 1800
        while time.time() < deadline:
            try:
                http(f"{base}/v2/health/ready")
                break
            except OSError:
                time.sleep(1)
        mcp = Mcp(f"{base}/mcp")
        time.sleep(5)  # GPU memory is sampled from nvidia-smi every few seconds
        for model in sorted(p.name for p in repo.iterdir()):
            try:
                row = check_model(base, mcp, repo, model)
            except Exception as exc:  # noqa: BLE001 - a failed model is a result, the others go on
                row = {"model": model, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
                print(f"BAD {model}: {row['error']}")
            failed += not row["ok"]
            results.append(row)
    finally:
        server.terminate()
        server.wait(timeout=60)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "gpu-check",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": DEVICE,
        "gpu": torch.cuda.get_device_name(0) if DEVICE.startswith("cuda") else None,
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - started, 1),
        "models": results,
    }
    stamp = report["date"].replace(":", "-")[:19]
    (out / f"gpu-check-{stamp}.json").write_text(json.dumps(report, indent=2))
    shutil.copy(work / "server.log", out / f"gpu-check-{stamp}-server.log")
    print(f"wrote {out}/gpu-check-{stamp}.json: {len(results) - failed} of {len(results)} ok")
    return 1 if failed else 0


DEVICE = "cuda"

if __name__ == "__main__":
    sys.exit(main())
