#!/usr/bin/env python3
"""Serving on a GPU: what a call costs over a raw forward, and how much of the device it uses.

    python3 bench/gpu/serving.py [--device cuda] [--seconds 5] [--spin-us 1000]
                                 [--wider-spin-us 3000] [--placed-cpus auto|off|LIST]
                                 [--batching 32:2000:1,32:2000:1:serial,32:1000:2] [--out DIR]

The demo image model (ResNet-18 shape, ``.pt2``, 1x3x224x224 float32) on ``--device``, served by
``tensorgate serve`` (``node bin/tensorgate.js``, workers on this interpreter), against the raw
forward in this process: a host tensor in, ``.to(device)``, the forward, ``.cpu()`` out, timed at
batch 1 (latency) and batch 32 (rows per second).

- Concurrency 1, sequential calls for ``--seconds`` each: MCP stdio with the input as a ``.npy``
  path, OIP v2 binary tensor data, OIP v2 system shared memory, MCP Streamable HTTP by path.
- Concurrency 1 again, stdio by path and OIP binary, against a copy whose spin is
  ``--wider-spin-us``: the gateway waits for a worker's answer awake only when answers come within
  the spin (docs/worker-protocol.md#spinning), and a GPU forward with its copies may take longer
  than the default 1000 µs; the pair says whether waiting awake pays on this GPU.
- Concurrency 1 again, stdio by path and OIP binary, against a copy placed on CPUs of its own
  (``resources.cpus``, ``--placed-cpus``; by default the last ones this process may use, one per
  thread of the model, where 2 are left for the client and the gateway): whether keeping the
  worker's cores to itself pays on a host with cores to spare (docs/architecture.md#cpu-placement).
- Concurrency 32 against a copy with dynamic batching (``--batching`` max:delay_us:instances, a
  comma list to compare several; ``:serial`` at the end turns the worker's pipelining off, so
  that the pair says what beginning the pass sent ahead before answering the last is worth):
  OIP shared memory, OIP binary, MCP Streamable HTTP by path, from 4 client processes of 8
  threads each (one Python process could not keep up), with the GPU's utilisation sampled by
  ``nvidia-smi`` and the workers' GPU memory read from ``/metrics``.
- OIP binary also to the OIP data port (``serve --oip-port``, ``oip/binary-data``), at both
  concurrencies: there the gateway's threads read the bodies, not its main thread
  (docs/architecture.md#the-oip-data-plane). The binary target counts the better of the two ports.

The issue's targets are judged in the report: at concurrency 1 stdio by path <= raw + 0.5 ms,
OIP binary and shared memory <= raw + 0.3 ms, HTTP by path <= raw + 1.0 ms; at concurrency 32
OIP shared memory >= 80 % of the raw batch-32 rows per second, binary >= 40 %, HTTP by path >= 25 %.
Writes ``gpu-serving-<time>.json`` under ``--out`` (``$OUT`` on the device tool, else
bench/results; bench/report.ts renders it). ``--device cpu`` runs the same on a CPU machine, to try
the script before spending device time (the figures then say nothing about a GPU).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from model_file import load_file  # noqa: E402

sys.path.insert(0, str(ROOT / "python"))
from tensorgate._direct import direct_forward  # noqa: E402
from tensorgate._loader import skip_per_call_structure_check  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check import free_port  # noqa: E402

SHAPE = (1, 3, 224, 224)
PROCESSES, THREADS = 4, 8
TARGETS_C1_MS = {"stdio/path": 0.5, "oip/binary": 0.3, "oip/shm": 0.3, "http/path": 1.0}
TARGETS_C32_SHARE = {"oip/shm": 0.8, "oip/binary": 0.4, "http/path": 0.25}
#: The copy of the image model whose worker runs on a CPU of its own.
PLACED = "image-placed"


# --- the models and the raw forward --------------------------------------------------------------


def build_repository(
    work: Path,
    device: str,
    spin_us: int,
    wider_spin_us: int,
    batching: list[str],
    placed_cpus: list[int] | None = None,
) -> Path:
    demo, repo = work / "demo", work / "repo"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/make_demo_models.py"),
            str(demo),
            "--skip",
            "pipeline",
        ],
        check=True,
        stdout=sys.stderr,
    )
    resources = {"device": device, "spin_us": spin_us}
    copy_model(demo, repo, "image", resources, None)
    if wider_spin_us:
        wider = {**resources, "spin_us": wider_spin_us}
        copy_model(demo, repo, wider_name(wider_spin_us), wider, None)
    if placed_cpus is not None:
        copy_model(demo, repo, PLACED, {**resources, "cpus": placed_cpus}, None)
    for setting in batching:
        max_rows, delay_us, instances, *rest = setting.split(":")
        # ":serial": the worker answers each pass before it begins the next (resources.pipeline
        # off), against the default, which begins the pass sent ahead first on CUDA.
        serial = {"pipeline": False} if rest == ["serial"] else {}
        copy_model(
            demo,
            repo,
            batched_name(setting),
            {**resources, "instances": int(instances), **serial},
            {"max_batch_size": int(max_rows), "max_queue_delay_us": int(delay_us)},
        )
    return repo


def placed_cpus_of(choice: str, threads: int) -> list[int] | None:
    """The CPUs of the placed copy, one per thread of the model: ``auto`` takes the last this
    process may use when that leaves 2 or more to the client and the gateway, ``off`` none, else a
    comma list of CPU ids."""
    if choice == "off" or not hasattr(os, "sched_getaffinity"):
        return None
    if choice == "auto":
        cpus = sorted(os.sched_getaffinity(0))
        return cpus[-threads:] if len(cpus) >= threads + 2 else None
    return [int(cpu) for cpu in choice.split(",")]


def batched_name(setting: str) -> str:
    return "image-b" + setting.replace(":", "-")


def wider_name(spin_us: int) -> str:
    return f"image-spin{spin_us}"


def copy_model(demo: Path, repo: Path, name: str, resources: dict, batching: dict | None) -> None:
    config = json.loads((demo / "image-classifier" / "config.json").read_text())
    shutil.copytree(demo / "image-classifier" / "1", repo / name / "1")
    config.update(name=name, default_version="1", versions={"1": config["versions"]["1"]})
    config["resources"] = {**config["resources"], **resources}
    config.pop("batching", None)
    if batching:
        config["batching"] = batching
    (repo / name / "config.json").write_text(json.dumps(config, indent=2))


def raw_forward(repo: Path, device: str, seconds: float) -> dict[str, Any]:
    """A host tensor in, the forward on the device, a host tensor out: batch 1 and batch 32; and
    batch 1 again with the forward called as the worker calls it (``direct_p50``: the structure
    check done once, the graph called without the module around it, python/tensorgate/_direct.py).
    """
    config = json.loads((repo / "image" / "config.json").read_text())
    file = repo / "image" / "1" / config["versions"]["1"]["file"]
    if device == "cpu":
        module = load_file(file, "export")
    else:
        from torch.export.passes import move_to_device_pass

        module = move_to_device_pass(torch.export.load(str(file)), device).module()
    torch.set_num_threads(int(config["resources"].get("threads", 1)))

    def timed(rows: int, forward: Any = module) -> list[float]:
        x = torch.rand(rows, *SHAPE[1:])
        out: list[float] = []
        with torch.inference_mode():
            for _ in range(10):
                forward(x.to(device)).cpu()
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline or len(out) < 20:
                start = time.perf_counter()
                forward(x.to(device)).cpu()
                out.append((time.perf_counter() - start) * 1000)
        return out

    one, batch = timed(1), timed(32)
    result = {
        "latency": distribution(one),
        "batch32_ms": round(statistics.median(batch), 3),
        "batch32_rows_per_s": round(32 * 1000 / statistics.median(batch), 1),
    }
    if skip_per_call_structure_check(module, 1):
        direct = direct_forward(module, None, [torch.rand(SHAPE).to(device)])
        if direct is not None:
            result["direct_p50"] = round(statistics.median(timed(1, direct)), 3)
    return result


# --- clients: OIP over keep-alive HTTP, MCP over Streamable HTTP and over stdio -------------------


class Http:
    """One keep-alive connection."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[Any, bytes]:
        self.conn.request("POST", path, body=body, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: HTTP {response.status}: {data[:300]!r}")
        return response, data


def oip_binary_call(port: int, model: str, x: np.ndarray):
    header = json.dumps(
        {
            "inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                        "parameters": {"binary_data_size": x.nbytes}}],
            "outputs": [{"name": "logits", "parameters": {"binary_data": True}}],
        }
    ).encode()  # fmt: skip
    body = header + x.tobytes()
    headers = {
        "inference-header-content-length": str(len(header)),
        "content-type": "application/octet-stream",
    }
    client = Http(port)

    def call() -> dict[str, float]:
        response, data = client.post(f"/v2/models/{model}/infer", body, headers)
        length = int(response.headers.get("inference-header-content-length", len(data)))
        return json.loads(data[:length]).get("parameters", {})

    return call


def oip_shm_call(port: int, model: str, x: np.ndarray, tag: str):
    """System shared memory: the input in a region of its own, an output region per caller."""
    client = Http(port)
    regions = []
    for name, size in ((f"{tag}_in", x.nbytes), (f"{tag}_out", 4096)):
        key = f"/tg_gpu_{os.getpid()}_{name}"
        with open(f"/dev/shm{key}", "wb") as f:
            f.write(x.tobytes() if name.endswith("_in") else bytes(size))
        body = json.dumps({"key": key, "byte_size": size}).encode()
        client.post(f"/v2/systemsharedmemory/region/{name}/register", body, {})
        regions.append((name, key))
    body = json.dumps(
        {
            "inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                        "parameters": {"shared_memory_region": f"{tag}_in",
                                       "shared_memory_byte_size": x.nbytes}}],
            "outputs": [{"name": "logits", "parameters": {"shared_memory_region": f"{tag}_out",
                                                          "shared_memory_byte_size": 4096}}],
        }
    ).encode()  # fmt: skip

    def call() -> dict[str, float]:
        _, data = client.post(
            f"/v2/models/{model}/infer", body, {"content-type": "application/json"}
        )
        return json.loads(data).get("parameters", {})

    def release() -> None:
        """Unregisters the regions (a later block registers the same names) and removes them."""
        for name, key in regions:
            client.post(f"/v2/systemsharedmemory/region/{name}/unregister", b"", {})
            os.unlink(f"/dev/shm{key}")

    call.release = release  # type: ignore[attr-defined]
    return call


class McpHttp:
    """An MCP session over Streamable HTTP (2025-11-25), on one keep-alive connection."""

    def __init__(self, port: int) -> None:
        self.client = Http(port)
        self.headers = {"content-type": "application/json",
                        "accept": "application/json, text/event-stream"}  # fmt: skip
        hello = {"protocolVersion": "2025-11-25", "capabilities": {},
                 "clientInfo": {"name": "gpu-serving", "version": "0"}}  # fmt: skip
        response, _ = self.send(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
        )
        if response.headers.get("mcp-session-id"):
            self.headers["mcp-session-id"] = response.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        self.client.conn.request("POST", "/mcp", body=json.dumps(initialized), headers=self.headers)
        self.client.conn.getresponse().read()
        self.next_id = 1

    def send(self, message: dict) -> tuple[Any, dict]:
        response, data = self.client.post("/mcp", json.dumps(message).encode(), self.headers)
        text = data.decode()
        lines = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        return response, json.loads(lines[-1] if lines else text)

    def tool(self, name: str, arguments: dict) -> dict:
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments}}  # fmt: skip
        _, reply = self.send(message)
        return tool_result(reply)


class McpStdio:
    """``tensorgate serve --stdio`` as a child, spoken to in newline-delimited JSON-RPC."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log, "w"),  # noqa: SIM115
            cwd=ROOT, env=env, bufsize=0,
        )  # fmt: skip
        self.next_id = 0
        hello = {"protocolVersion": "2025-11-25", "capabilities": {},
                 "clientInfo": {"name": "gpu-serving", "version": "0"}}  # fmt: skip
        self.request("initialize", hello)
        self.write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def write(self, message: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.write({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the stdio server closed its output")
            reply = json.loads(line)
            if reply.get("id") == self.next_id:
                return reply

    def tool(self, name: str, arguments: dict) -> dict:
        return tool_result(self.request("tools/call", {"name": name, "arguments": arguments}))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def tool_result(reply: dict) -> dict:
    result = reply.get("result") or {}
    if "error" in reply or result.get("isError"):
        raise RuntimeError(f"tool call failed: {json.dumps(reply)[:500]}")
    return result.get("structuredContent") or {}


# --- measuring ---------------------------------------------------------------------------------


def distribution(ms: list[float]) -> dict[str, float | None]:
    """n and percentiles; None for a block where no call fell inside the window (one longer than
    the whole block, as on a CPU with a short --seconds), so that the other blocks still count."""
    ordered = sorted(ms)

    def at(p: float) -> float | None:
        if not ordered:
            return None
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3)

    return {"n": len(ordered), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99)}


def sequential(call, seconds: float) -> dict[str, Any]:
    """Concurrency 1: calls back to back for ``seconds`` after one second of warm-up."""
    deadline = time.perf_counter() + 1.0
    while time.perf_counter() < deadline:
        call()
    latencies: list[float] = []
    stages: list[dict] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        timings = call()
        latencies.append((time.perf_counter() - start) * 1000)
        stages.append(timings.get("timings", timings) if isinstance(timings, dict) else {})
    keys = ("decode_ms", "queue_ms", "transfer_ms", "compute_ms", "encode_ms", "total_ms")
    server = {k: round(statistics.median(s[k] for s in stages if k in s), 3)
              for k in keys if any(k in s for s in stages)}  # fmt: skip
    return {"latency": distribution(latencies), "server_ms": server}


# OIP binary to the data port (serve --oip-port): threads read the bodies, not the main thread.
DATA_PLANE = "oip/binary-data"


def load_worker(args: tuple) -> tuple[int, list[float]]:
    """One client process of a concurrency-32 block: THREADS closed loops until the deadline."""
    form, port, model, npy, start_at, end_at, proc = args
    x = np.load(npy)
    done: list[int] = []
    latencies: list[float] = []
    lock = threading.Lock()

    def loop(thread: int) -> None:
        if form == "oip/shm":
            call = oip_shm_call(port, model, x, f"c{proc}_{thread}")
        elif form in ("oip/binary", DATA_PLANE):
            call = oip_binary_call(port, model, x)
        else:
            session = McpHttp(port)
            arguments = {"model": model, "inputs": {"image": {"path": npy}}}

            def call() -> dict:
                return session.tool("infer", arguments)

        count, mine = 0, []
        while time.time() < start_at:
            call()
        while (now := time.time()) < end_at:
            call()
            count += 1
            mine.append((time.time() - now) * 1000)
        if hasattr(call, "release"):
            call.release()
        with lock:
            done.append(count)
            latencies.extend(mine[::10])

    threads = [threading.Thread(target=loop, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done), latencies


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """CPU seconds (user + system) of a process, or of one of its threads, from /proc."""
    stat = Path(f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # the command may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def concurrent(
    form: str, port: int, model: str, npy: str, seconds: float, gateway: int
) -> dict[str, Any]:
    """Closed-loop clients for ``seconds``; with the CPU per call of the gateway process
    ``gateway`` and of its main thread (JavaScript: every request passes through it, so
    1000 / its ms per call bounds one gateway's calls per second)."""
    start_at = time.time() + 3.0  # sessions and regions set up, every loop warm
    end_at = start_at + seconds
    sampler = GpuSampler()
    jobs = [(form, port, model, npy, start_at, end_at, p) for p in range(PROCESSES)]
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        pending = pool.map_async(load_worker, jobs)
        time.sleep(max(0.0, start_at - time.time()))
        sampler.start()
        cpu_before = cpu_seconds(gateway), cpu_seconds(gateway, gateway)
        results = pending.get(timeout=seconds + 300)
        cpu_after = cpu_seconds(gateway), cpu_seconds(gateway, gateway)
        sampler.stop()
    calls = sum(r[0] for r in results)
    latencies = [ms for r in results for ms in r[1]]
    per_call = [
        round((b - a) * 1000 / calls, 4) if calls else None for a, b in zip(cpu_before, cpu_after)
    ]
    return {
        "rows_per_s": round(calls / seconds, 1),
        "latency": distribution(latencies),
        "gpu_utilization_percent": sampler.mean_utilization(),
        "gpu_memory_used_mib": sampler.max_memory(),
        "gateway_cpu_ms_per_call": per_call[0],
        "gateway_main_ms_per_call": per_call[1],
    }


class GpuSampler:
    """``nvidia-smi`` every 100 ms while a block runs; nothing where there is no nvidia-smi."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []

    def start(self) -> None:
        if shutil.which("nvidia-smi") is None:
            return
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
             "--format=csv,noheader,nounits", "-lms", "100"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def _column(self, i: int) -> list[float]:
        out = []
        for line in self.lines:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and parts[i].replace(".", "").isdigit():
                out.append(float(parts[i]))
        return out

    def mean_utilization(self) -> float | None:
        values = self._column(0)
        return round(statistics.mean(values), 1) if values else None

    def max_memory(self) -> float | None:
        values = self._column(1)
        return max(values) if values else None


def worker_gpu_memory(port: int) -> dict[str, float]:
    """``tensorgate_worker_gpu_memory_bytes`` per model, from /metrics (empty without a GPU)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("tensorgate_worker_gpu_memory_bytes{"):
            model = line.split('model="', 1)[1].split('"', 1)[0]
            out[model] = out.get(model, 0) + float(line.rsplit(" ", 1)[1])
    return out


# --- the run -----------------------------------------------------------------------------------


def wait_ready(port: int, models: list[str], timeout_s: float = 1800) -> None:
    deadline = time.time() + timeout_s
    for model in models:
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", f"/v2/models/{model}/ready")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"{model} was not ready within {timeout_s} s")
            time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--spin-us", type=int, default=1000)
    parser.add_argument("--wider-spin-us", type=int, default=3000, help="0: no such block")
    parser.add_argument(
        "--placed-cpus", default="auto", help="the placed copy's CPUs: auto, off or a CPU list"
    )
    # One instance waiting for full batches, the same with its worker not pipelining (each pass
    # answered before the next is begun), and two sharing the GPU with a shorter delay (one
    # instance's copies and Python work overlap the other's compute).
    parser.add_argument(
        "--batching",
        default="32:2000:1,32:2000:1:serial,32:1000:2",
        help="max:delay_us:instances[:serial][,...]",
    )
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="tg-gpu-serving-"))
    settings = [s for s in args.batching.split(",") if s]
    image_config = json.loads((ROOT / "models/image-classifier/config.json").read_text())
    placed_cpus = placed_cpus_of(args.placed_cpus, image_config["resources"].get("threads", 1))
    repo = build_repository(
        work, args.device, args.spin_us, args.wider_spin_us, settings, placed_cpus
    )
    wider = [wider_name(args.wider_spin_us)] if args.wider_spin_us else []
    placed = [PLACED] if placed_cpus is not None else []
    npy = str(work / "image.npy")
    x = np.random.default_rng(0).random(SHAPE, dtype=np.float32)
    np.save(npy, x)
    print("raw forward...", file=sys.stderr)
    raw = raw_forward(repo, args.device, args.seconds)
    print(f"raw: p50 {raw['latency']['p50']} ms, batch 32 {raw['batch32_rows_per_s']} rows/s",
          file=sys.stderr)  # fmt: skip

    env = {**os.environ, "TENSORGATE_PYTHON": sys.executable}
    cli = [
        "node",
        str(ROOT / "bin/tensorgate.js"),
        "--models",
        str(repo),
        "--allow-root",
        str(work),
    ]
    port, data_port = free_port(), free_port()
    server = subprocess.Popen(
        [*cli, "--registry", str(work / "http.db"), "serve", "--http", str(port),
         "--oip-port", str(data_port)],
        cwd=ROOT, env=env, stderr=open(work / "server.log", "w"),  # noqa: SIM115
    )  # fmt: skip
    stdio: McpStdio | None = None
    c1: dict[str, Any] = {}
    c32: dict[str, dict[str, Any]] = {}
    memory: dict[str, float] = {}
    try:
        wait_ready(port, ["image", *wider, *placed, *map(batched_name, settings)])
        stdio = McpStdio([*cli, "--registry", str(work / "stdio.db"), "serve", "--stdio"], env,
                         work / "stdio.log")  # fmt: skip
        arguments = {"model": "image", "inputs": {"image": {"path": npy}}}
        while not all_ready(stdio.tool("list_models", {})):
            time.sleep(0.5)
        mcp = McpHttp(port)
        forms = {
            "stdio/path": lambda: stdio.tool("infer", arguments),
            "oip/binary": oip_binary_call(port, "image", x),
            DATA_PLANE: oip_binary_call(data_port, "image", x),
            "oip/shm": oip_shm_call(port, "image", x, "seq"),
            "http/path": lambda: mcp.tool("infer", arguments),
        }
        for form, call in forms.items():
            print(f"concurrency 1: {form}", file=sys.stderr)
            c1[form] = sequential(call, args.seconds)
            c1[form]["over_raw_ms"] = round(c1[form]["latency"]["p50"] - raw["latency"]["p50"], 3)
        forms["oip/shm"].release()  # type: ignore[attr-defined]
        # The copies called again at concurrency 1, each by what sets it apart.
        copies = [(model, f"spin {args.wider_spin_us} µs") for model in wider] + [
            (model, f"worker on CPUs {','.join(map(str, placed_cpus or []))}") for model in placed
        ]
        for model, label in copies:
            copy_arguments = {**arguments, "model": model}
            for form, call in {
                "stdio/path": lambda a=copy_arguments: stdio.tool("infer", a),
                "oip/binary": oip_binary_call(port, model, x),
            }.items():
                key = f"{form} ({label})"
                print(f"concurrency 1: {key}", file=sys.stderr)
                c1[key] = sequential(call, args.seconds)
                c1[key]["over_raw_ms"] = round(c1[key]["latency"]["p50"] - raw["latency"]["p50"], 3)
        for setting in settings:
            for form in ("oip/shm", "oip/binary", DATA_PLANE, "http/path"):
                print(f"concurrency 32, batching {setting}: {form}", file=sys.stderr)
                to = data_port if form == DATA_PLANE else port
                row = concurrent(form, to, batched_name(setting), npy, args.seconds, server.pid)
                row["share_of_raw"] = round(row["rows_per_s"] / raw["batch32_rows_per_s"], 3)
                c32[f"{setting} {form}"] = row
        memory = worker_gpu_memory(port)
    finally:
        if stdio:
            stdio.close()
        server.terminate()
        server.wait(timeout=60)

    targets = [
        {"target": f"c1 {form}", "goal": f"p50 <= raw + {ms} ms",
         "measured": c1[form]["over_raw_ms"], "met": c1[form]["over_raw_ms"] <= ms}
        for form, ms in TARGETS_C1_MS.items()
    ] + [
        {"target": f"c32 {form}", "goal": f">= {share:.0%} of raw batch-32 rows/s",
         "measured": best_share(c32, form), "met": best_share(c32, form) >= share}
        for form, share in TARGETS_C32_SHARE.items()
    ]  # fmt: skip
    report = {
        "benchmark": "gpu-serving",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None,
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "config": {
            "seconds": args.seconds,
            "spin_us": args.spin_us,
            "wider_spin_us": args.wider_spin_us,
            "placed_cpus": placed_cpus,
            "batching": settings,
            "clients": f"{PROCESSES} processes x {THREADS} threads",
        },  # fmt: skip
        "raw": raw,
        "concurrency_1": c1,
        "concurrency_32": c32,
        "worker_gpu_memory_bytes": memory,
        "targets": targets,
        "seconds": round(time.perf_counter() - started, 1),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = report["date"].replace(":", "-")[:19]
    (out / f"gpu-serving-{stamp}.json").write_text(json.dumps(report, indent=2))
    for t in targets:
        print(f"{t['target']}: {t['goal']}: {t['measured']} {'met' if t['met'] else 'NOT met'}")
    print(f"wrote {out}/gpu-serving-{stamp}.json")
    return 0


def best_share(c32: dict[str, dict[str, Any]], form: str) -> float:
    """The best share of the raw rate over the batching settings, and for OIP binary over both
    ports (the data port's threads read the bodies: the same protocol, another front door)."""
    forms = (form, DATA_PLANE) if form == "oip/binary" else (form,)
    return max(r["share_of_raw"] for k, r in c32.items() if k.split(" ", 1)[1] in forms)


def all_ready(listing: dict) -> bool:
    versions = [v for m in listing.get("models", []) for v in m["versions"]]
    return bool(versions) and all(v["state"] == "ready" for v in versions)


if __name__ == "__main__":
    sys.exit(main())
