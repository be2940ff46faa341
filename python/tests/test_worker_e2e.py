"""End to end: a real worker process, spawned as the gateway spawns it, driven over fd 3 with
tensors in real /dev/shm arenas; outputs compared with a direct forward of the same model."""

from __future__ import annotations

import json
import os
import socket
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from _worker_client import WIRE, WorkerProcess, tensor_bytes
from tensorgate import _protocol


def load_request(repo: Path, name: str, version: str | None = None, **overrides: Any) -> dict:
    """The ``model`` object of a load request, built from config.json as the gateway builds it."""
    cfg = json.loads((repo / name / "config.json").read_text())
    version = version or cfg["default_version"]
    entry = cfg["versions"][version]
    folder = repo / name / version
    model = {
        "name": name, "version": version, "format": entry["format"],
        "file": str(folder / entry["file"]), "code_dir": str(folder),
        "device": cfg["resources"]["device"], "threads": cfg["resources"]["threads"],
        "inputs": cfg["inputs"], "outputs": cfg["outputs"], "warmup_runs": 1,
    }  # fmt: skip
    if "entry" in entry:
        model["entry"] = entry["entry"]
    return {**model, **overrides}


@pytest.fixture
def spawn(shm_path, tmp_path):
    workers: list[WorkerProcess] = []

    def make(**kwargs: Any) -> WorkerProcess:
        log = tmp_path / f"worker-{len(workers)}.log"
        worker = WorkerProcess(shm_path("in"), shm_path("out"), log, **kwargs)
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        if worker.proc.poll() is None:
            worker.close()


def loaded(spawn, repo: Path, name: str, version: str | None = None, **kwargs: Any):
    """A worker holding the model, with the variants its config.json offers, as the gateway asks."""
    worker = spawn(**kwargs)
    config = json.loads((repo / name / "config.json").read_text())
    variants = {"precisions": config.get("parameters", {}).get("precision", ["fp32"])}
    reply = worker.request("load", model=load_request(repo, name, version), variants=variants)
    assert reply["ok"], (reply, worker.log())
    return worker, reply["result"]


def error_of(reply: dict) -> dict:
    assert reply["ok"] is False, reply
    return reply["error"]


def test_hello_comes_first_and_describes_the_runtime(spawn):
    worker = spawn()
    hello = worker.hello
    assert hello["op"] == "hello"
    assert hello["pid"] == worker.proc.pid
    assert hello["torch"] == torch.__version__
    assert hello["cuda"] is torch.cuda.is_available()
    assert set(hello["formats"]) >= {"torchscript", "eager"}
    assert worker.request("ping") == {
        "id": 1,
        "ok": True,
        "result": {"channel": {"spin_us": 0, "spins": 0, "spin_hits": 0}, "pipelined": 0},
    }


def test_tabular_classifier_matches_a_direct_forward(spawn, demo_models):
    worker, result = loaded(spawn, demo_models, "tabular-classifier")
    assert result["device"] == "cpu"
    assert result["load_ms"] > 0 and result["warmup_ms"] > 0
    features = torch.tensor([[5.0, 3.4, 1.5, 0.2], [6.0, 2.8, 4.4, 1.3], [6.7, 3.0, 5.7, 2.1]])
    reply = worker.infer({"features": features})
    [header] = reply["result"]["outputs"]
    assert header == {"name": "probabilities", "dtype": "float32", "shape": [3, 3],
                      "offset": header["offset"], "nbytes": 36}  # fmt: skip
    assert header["offset"] % 64 == 0
    assert set(reply["result"]["timings"]) == {"h2d_ms", "compute_ms", "d2h_ms"}
    direct = torch.export.load(str(demo_models / "tabular-classifier" / "1" / "model.pt2")).module()
    with torch.inference_mode():
        expected = direct(features)
    assert torch.allclose(worker.outputs(reply)["probabilities"], expected, atol=1e-6)
    assert worker.outputs(reply)["probabilities"].argmax(-1).tolist() == [0, 1, 2]


def test_image_classifier_eager_version_in_fp32_and_bf16(spawn, demo_models):
    worker, result = loaded(spawn, demo_models, "image-classifier", "2")
    worker_variants = result["variants"]
    image = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    program = torch.export.load(str(demo_models / "image-classifier" / "1" / "model.pt2"))
    with torch.inference_mode():
        expected = program.module()(image)
    logits = worker.outputs(worker.infer({"image": image}))["logits"]
    assert torch.allclose(logits, expected, atol=1e-4)

    [bf16_report] = [v for v in worker_variants if v["precision"] == "bf16"]
    assert bf16_report["state"] == "ready" and bf16_report["method"] == "autocast bf16"
    reply = worker.infer({"image": image}, precision="bf16")
    bf16 = worker.outputs(reply)["logits"]
    assert reply["result"]["outputs"][0]["dtype"] == "float32"  # cast back to the declared dtype
    similarity = torch.nn.functional.cosine_similarity(bf16, expected, dim=-1)
    assert similarity.min().item() > 0.98

    assert error_of(worker.infer({"image": image}, precision="int4"))["code"] == "BAD_PARAMETER"


def test_several_outputs_and_dtypes(spawn, test_models):
    worker, _ = loaded(spawn, test_models, "multi_out")
    x = torch.tensor([[0.1, 3.0, 0.2, 0.3], [5.0, 1.0, 0.0, 0.0]])
    reply = worker.infer({"x": x})
    assert [(o["name"], o["dtype"]) for o in reply["result"]["outputs"]] == [
        ("scores", "float32"),
        ("argmax", "int64"),
    ]
    out = worker.outputs(reply)
    assert out["argmax"].tolist() == [1, 0]
    assert torch.allclose(out["scores"], torch.softmax(x, dim=-1))

    typed, _ = loaded(spawn, test_models, "typed")
    x = torch.tensor([[1, 2, 4], [-3, 0, 0]], dtype=torch.int64)
    out = typed.outputs(typed.infer({"x": x}))
    assert out["mean"].dtype == torch.float64
    assert out["mean"].tolist() == [7 / 3, -1.0]


def test_two_inputs_dynamic_shapes_and_release(spawn, test_models):
    worker, _ = loaded(spawn, test_models, "adder")
    a, b = torch.rand(3, 5), torch.rand(3, 5)
    first = worker.infer({"a": a, "b": b})
    assert torch.equal(worker.outputs(first)["sum"], a + b)
    second = worker.infer({"a": torch.ones(1, 1), "b": torch.ones(1, 1)})
    assert worker.outputs(second)["sum"].tolist() == [[2.0]]
    offsets = [o["offset"] for r in (first, second) for o in r["result"]["outputs"]]
    assert len(set(offsets)) == 2  # unreleased slots are not reused
    worker.send({"op": "release", "offsets": offsets})  # no answer comes back
    third = worker.infer({"a": a, "b": b})
    assert third["id"] == 4  # ids stay in step: release answered nothing
    assert third["result"]["outputs"][0]["offset"] == min(offsets)  # freed space is reused


def test_the_worker_reads_file_spans_of_its_parent_into_the_arena(spawn, test_models, shm_path):
    """What the gateway does for shared-memory regions: it names a span of a file it holds open
    (/proc/<its pid>/fd/<fd>) and the worker reads it into the arena before viewing the inputs.
    The spans here are two rows of the file in reverse order, into one input's slot."""
    worker, _ = loaded(spawn, test_models, "adder")
    assert worker.hello["reads_files"] is True  # the client holds the input arena open
    region = shm_path("region")
    rows = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    with open(region, "wb") as f:
        f.write(tensor_bytes(rows))
    fd = os.open(region, os.O_RDONLY)
    try:
        path = f"/proc/{os.getpid()}/fd/{fd}"
        b = torch.full((2, 4), 0.5)
        # "a" is left empty in the arena (zeros): only the worker's reads can put rows there.
        a = {"name": "a", "dtype": "float32", "shape": [2, 4], "offset": 4096, "nbytes": 32}
        what = 'input "a": region "r"'
        spans = [
            {"offset": 4096, "nbytes": 16, "path": path, "position": 16, "what": what},
            {"offset": 4112, "nbytes": 16, "path": path, "position": 0, "what": what},
        ]
        reply = worker.request("infer", inputs=[a, worker.put("b", b)], reads=spans)
        assert torch.equal(worker.outputs(reply)["sum"], rows.flip(0) + b)
        assert reply["result"]["timings"]["read_ms"] >= 0

        past_end = [{**spans[0], "position": 24}]  # 8 bytes left in the file for a 16-byte span
        assert error_of(
            worker.request("infer", inputs=[a, worker.put("b", b)], reads=past_end)
        ) == {
            "code": "SHARED_MEMORY_OUT_OF_RANGE",
            "message": 'input "a": region "r" ended after 8 of 16 bytes',
            "type": "WorkerError",
        }
        named = [{**spans[0], "path": region}]  # a name, not the parent's descriptor
        assert (
            error_of(worker.request("infer", inputs=[a, worker.put("b", b)], reads=named))["code"]
            == "BAD_TENSOR"
        )
        ok = worker.infer({"a": rows, "b": b})  # and the worker goes on
        assert torch.equal(worker.outputs(ok)["sum"], rows + b)
    finally:
        os.close(fd)


def test_a_failing_request_is_answered_and_the_worker_goes_on(spawn, test_models):
    worker, _ = loaded(spawn, test_models, "flaky")
    reply = worker.infer({"x": torch.tensor([[1.0, -1.0, 0.0, 0.0]])})
    assert error_of(reply) == {"code": "INFERENCE_FAILED", "message": "negative input",
                               "type": "ValueError"}  # fmt: skip
    ok = worker.infer({"x": torch.zeros(2, 4)})
    assert worker.outputs(ok)["y"].tolist() == [[1.0] * 4] * 2
    assert worker.request("shutdown")["ok"]
    assert worker.close() == 0
    log = worker.log()
    assert f"request id={reply['id']} op=infer failed: INFERENCE_FAILED" in log
    assert "Traceback" in log and 'raise ValueError("negative input")' in log


@pytest.mark.parametrize(
    "change",
    [
        {"offset": 1 << 30},  # past the end of the arena
        {"offset": 32},  # not 64-aligned
        {"nbytes": 12},  # does not match shape x itemsize
        {"dtype": "complex64"},
        {"shape": [2, "4"]},
    ],
)
def test_bad_tensor_headers_are_bad_tensor(spawn, test_models, change):
    worker, _ = loaded(spawn, test_models, "flaky")
    header = {**worker.put("x", torch.zeros(2, 4)), **change}
    reply = worker.request("infer", inputs=[header], parameters={})
    assert error_of(reply)["code"] == "BAD_TENSOR"
    assert worker.infer({"x": torch.zeros(1, 4)})["ok"]


def test_protocol_misuse_is_bad_parameter(spawn, test_models):
    worker = spawn()
    assert error_of(worker.request("infer", inputs=[]))["code"] == "BAD_PARAMETER"  # no model
    assert error_of(worker.request("fly"))["code"] == "BAD_PARAMETER"
    assert worker.request("load", model=load_request(test_models, "adder"))["ok"]
    again = worker.request("load", model=load_request(test_models, "typed"))
    assert error_of(again)["code"] == "BAD_PARAMETER"
    assert "one worker loads one model" in again["error"]["message"]


def test_load_failures_leave_the_worker_usable(spawn, test_models, tmp_path):
    worker = spawn()
    missing = load_request(test_models, "adder", file=str(tmp_path / "missing.pt"))
    assert error_of(worker.request("load", model=missing))["code"] == "LOAD_FAILED"
    export = load_request(test_models, "adder", format="export")
    if "export" not in worker.hello["formats"]:
        assert error_of(worker.request("load", model=export))["code"] == "UNSUPPORTED_FORMAT"
    wrong_shape = load_request(test_models, "adder", inputs=[{"name": "a", "dtype": "float32",
                                                              "shape": [-1, 2]}])  # fmt: skip
    failed = error_of(worker.request("load", model=wrong_shape))  # warm-up calls with one input
    assert failed["code"] == "LOAD_FAILED" and "warm-up" in failed["message"]
    assert worker.request("load", model=load_request(test_models, "adder"))["ok"]


def test_both_arenas_grow(spawn, test_models):
    worker, _ = loaded(spawn, test_models, "adder", in_bytes=4096, out_bytes=4096)
    os.truncate(worker.arena_in, 4 << 20)  # the gateway grows its arena after spawn
    a, b = torch.rand(512, 256), torch.rand(512, 256)  # 512 KiB each
    headers = [worker.put("a", a, offset=1 << 20), worker.put("b", b, offset=2 << 20)]
    reply = worker.request("infer", inputs=headers, parameters={"precision": "fp32"})
    assert torch.equal(worker.outputs(reply)["sum"], a + b)
    assert os.path.getsize(worker.arena_out) >= 512 * 1024


class Echo(torch.nn.Module):
    def forward(self, f32, f64, f16, bf16, i8, u8, i16, i32, i64, b):
        return f32 + 1, f64 + 1, f16 + 1, bf16 + 1, i8 + 1, u8 + 1, i16 + 1, i32 + 1, i64 + 1, ~b


def test_every_dtype_crosses_both_arenas(spawn, tmp_path):
    path = tmp_path / "echo.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.script(Echo()).save(str(path))
    dtypes = list(WIRE)
    names = ["f32", "f64", "f16", "bf16", "i8", "u8", "i16", "i32", "i64", "b"]
    assert [WIRE[d] for d in dtypes] == ["float32", "float64", "float16", "bfloat16", "int8",
                                         "uint8", "int16", "int32", "int64", "bool"]  # fmt: skip
    specs = [{"name": n, "dtype": WIRE[d], "shape": [-1, 3]} for n, d in zip(names, dtypes)]
    model = {"name": "echo", "version": "1", "format": "torchscript", "file": str(path),
             "code_dir": str(tmp_path), "device": "cpu", "threads": 1, "warmup_runs": 1,
             "inputs": specs, "outputs": specs}  # fmt: skip
    worker = spawn()
    assert worker.request("load", model=model)["ok"]
    tensors = {n: torch.tensor([[1, 0, 2], [3, 1, 0]]).to(d) for n, d in zip(names, dtypes)}
    out = worker.outputs(worker.infer(tensors))
    for name, tensor in tensors.items():
        expected = ~tensor if tensor.dtype == torch.bool else tensor + 1
        assert out[name].dtype == tensor.dtype and torch.equal(out[name], expected), name


class Unsqueezer(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        x.unsqueeze_(0)  # the caller's tensor changes shape in place, after its use
        return y


def test_an_input_a_model_changed_in_place_is_not_handed_out_again(spawn, tmp_path):
    # The worker keeps the view it made for a request's input slot and hands it out again for the
    # same layout; one the model changed must not reach the next request as it was left.
    path = tmp_path / "unsqueezer.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.script(Unsqueezer()).save(str(path))
    spec = [{"name": "x", "dtype": "float32", "shape": [-1, 3]}]
    model = {"name": "unsqueezer", "version": "1", "format": "torchscript", "file": str(path),
             "code_dir": str(tmp_path), "device": "cpu", "threads": 1, "warmup_runs": 1,
             "inputs": spec, "outputs": [{**spec[0], "name": "y"}]}  # fmt: skip
    worker = spawn()
    assert worker.request("load", model=model)["ok"]
    for step in range(4):
        x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + step
        reply = worker.infer({"x": x})
        assert reply["ok"], reply
        assert torch.equal(worker.outputs(reply)["y"], x * 2), step


def test_sleepy_reads_its_pause_from_the_environment(spawn, test_models):
    worker, _ = loaded(spawn, test_models, "sleepy", env={"TENSORGATE_SLEEPY_SECONDS": "0.05"})
    reply = worker.infer({"x": torch.ones(1, 4)})
    assert worker.outputs(reply)["y"].tolist() == [[2.0] * 4]
    assert reply["result"]["timings"]["compute_ms"] >= 50


def test_end_of_stream_and_shutdown_exit_zero(spawn):
    closed = spawn()
    assert closed.close() == 0  # EOF on fd 3
    stopped = spawn()
    assert stopped.request("shutdown") == {"id": 1, "ok": True, "result": {}}
    assert stopped.proc.wait(timeout=30) == 0


def test_requests_without_an_id_are_dropped_not_fatal(spawn):
    worker = spawn()
    worker.send({"op": "ping"})  # nothing can match an answer to this: logged, not answered
    assert worker.request("ping")["id"] == 1
    worker.request("shutdown")
    assert worker.close() == 0
    assert "without an integer id" in worker.log()


def test_a_corrupt_control_stream_ends_the_worker_with_status_1(spawn):
    worker = spawn()
    worker.sock.sendall(b"\x05\x00\x00\x00{nope")
    assert worker.proc.wait(timeout=30) == 1
    assert "control channel is corrupt" in worker.log()


def test_a_request_can_carry_the_release_of_earlier_outputs(spawn, test_models):
    worker, _ = loaded(spawn, test_models, "adder")
    a, b = torch.rand(2, 2), torch.rand(2, 2)
    first = worker.infer({"a": a, "b": b})
    offset = first["result"]["outputs"][0]["offset"]
    inputs = [worker.put("a", a), worker.put("b", b)]
    second = worker.request("infer", inputs=inputs, parameters={}, release=[offset])
    assert second["ok"], second
    assert second["result"]["outputs"][0]["offset"] == offset  # freed before the forward ran


def test_a_spinning_worker_catches_back_to_back_requests_with_identical_outputs(spawn, demo_models):
    """With spin_us set the worker polls its channel after answering; requests that follow
    closely are read without a sleep, and the answers are the same bits as a plain worker's."""
    rows = torch.rand(5, 4, generator=torch.Generator().manual_seed(11)) * 7
    answers = {}
    for spin_us in (0, 50_000):
        worker = spawn()
        model = load_request(demo_models, "tabular-classifier")
        variants = {"precisions": ["fp32"]}
        reply = worker.request("load", model=model, variants=variants, spin_us=spin_us)
        assert reply["ok"], (reply, worker.log())
        assert reply["result"]["spin_us"] == spin_us
        answers[spin_us] = [worker.outputs(worker.infer({"features": rows[i : i + 1]}))
                            for i in range(len(rows))]  # fmt: skip
        channel = worker.request("ping")["result"]["channel"]
        assert channel["spin_us"] == spin_us
        if spin_us:
            # The first wait after load may block (no short wait seen yet); later ones spin.
            assert channel["spins"] >= len(rows) - 1, channel
            assert channel["spin_hits"] >= len(rows) - 1, channel
        else:
            assert channel["spins"] == 0 and channel["spin_hits"] == 0
        worker.close()
    for plain, spun in zip(answers[0], answers[50_000]):
        assert torch.equal(plain["probabilities"], spun["probabilities"])


def test_spin_defaults_to_off_on_the_cpu_and_a_bad_value_is_refused(spawn, demo_models):
    worker, result = loaded(spawn, demo_models, "tabular-classifier")
    assert result["spin_us"] == 0
    assert result["pinned_bytes"] == 0  # page-locking is for CUDA models only
    refused = spawn()
    model = load_request(demo_models, "tabular-classifier")
    for bad in (-1, 100_001, 1.5, "500", True):
        error = error_of(refused.request("load", model=model, spin_us=bad))
        assert error["code"] == "BAD_PARAMETER" and "spin_us" in error["message"], error
    assert refused.request("load", model=model, spin_us=10)["ok"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_model_page_locks_both_arenas_spins_and_answers_like_the_cpu(spawn, demo_models):
    rows = torch.rand(3, 4, generator=torch.Generator().manual_seed(5)) * 7
    worker = spawn()
    model = load_request(demo_models, "tabular-classifier", device="cuda")
    reply = worker.request("load", model=model, variants={"precisions": ["fp32"]})
    assert reply["ok"], (reply, worker.log())
    assert reply["result"]["device"].startswith("cuda")
    assert reply["result"]["spin_us"] == 1000
    assert reply["result"]["pinned_bytes"] >= 2 * (1 << 20), worker.log()
    got = worker.outputs(worker.infer({"features": rows}))["probabilities"]
    direct = torch.export.load(str(demo_models / "tabular-classifier" / "1" / "model.pt2")).module()
    with torch.inference_mode():
        expected = direct(rows)
    assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_models_outputs_come_back_whole_from_queued_copies(spawn, test_models):
    # Both outputs are copied device-to-host without a wait each and waited for once: every row
    # of every output must be there when the answer is read, for requests of many sizes.
    worker = spawn()
    model = load_request(test_models, "multi_out", device="cuda")
    reply = worker.request("load", model=model, variants={"precisions": ["fp32"]})
    assert reply["ok"], (reply, worker.log())
    generator = torch.Generator().manual_seed(11)
    for rows in (1, 7, 64, 1000, 3):
        x = torch.randn(rows, 4, generator=generator) * 5
        got = worker.outputs(worker.infer({"x": x}))
        assert torch.equal(got["argmax"], torch.argmax(x, dim=-1))
        assert torch.allclose(got["scores"], torch.softmax(x, dim=-1), atol=1e-6)


def pipelined_worker(spawn, repo: Path, name: str, pipeline: bool = True):
    worker = spawn()
    model = load_request(repo, name)
    variants = {"precisions": ["fp32"]}
    reply = worker.request("load", model=model, variants=variants, pipeline=pipeline)
    assert reply["ok"], (reply, worker.log())
    assert reply["result"]["pipeline"] is pipeline
    return worker


def send_at_once(worker, messages: list[dict[str, Any]]) -> None:
    """Every message in one write, so that the worker finds the next ones already there."""
    worker.sock.sendall(b"".join(_protocol.encode(m) for m in messages))


def flaky_requests(worker, rows: list[torch.Tensor]) -> list[dict[str, Any]]:
    """One infer per tensor, each in an input slot of its own (all in flight at once)."""
    worker._next_offset = 0
    return [
        {"id": 100 + i, "op": "infer", "inputs": [worker.put("x", x)]} for i, x in enumerate(rows)
    ]


@pytest.mark.parametrize("pipeline", [True, False])
def test_requests_in_flight_together_are_answered_in_order_each_with_its_own_rows(
    spawn, test_models, pipeline
):
    # Pipelining (on by default for CUDA, turned on here on the CPU) begins a request that has
    # arrived before the one in flight is answered. Twelve requests sent in one write, one of
    # them failing, a ping among them: every caller gets its own rows back (x + 1), the failure
    # stays its own, and the answers keep the order of the requests.
    worker = pipelined_worker(spawn, test_models, "flaky", pipeline)
    generator = torch.Generator().manual_seed(7)
    rows = [torch.rand(1 + i % 3, 4, generator=generator) for i in range(12)]
    rows[5] = -rows[5]  # flaky refuses negative input
    messages = flaky_requests(worker, rows)
    messages.insert(8, {"id": 7, "op": "ping"})
    send_at_once(worker, messages)
    answers = [worker.receive() for _ in messages]
    assert [a["id"] for a in answers] == [m["id"] for m in messages]
    for message, answer in zip(messages, answers):
        if message["op"] == "ping":
            assert answer["ok"]
        elif message["id"] == 105:
            error = error_of(answer)
            assert error["code"] == "INFERENCE_FAILED" and "negative" in error["message"]
        else:
            x = rows[message["id"] - 100]
            assert torch.equal(worker.outputs(answer)["y"], x + 1)
    # Without pipelining no request is begun early; with it, the ones already there are.
    begun_early = worker.request("ping")["result"]["pipelined"]
    assert begun_early > 0 if pipeline else begun_early == 0


def test_a_pipelining_worker_answers_what_is_in_flight_when_the_gateway_closes(spawn, test_models):
    worker = pipelined_worker(spawn, test_models, "flaky")
    rows = [torch.full((2, 4), float(i)) for i in range(4)]
    messages = flaky_requests(worker, rows)
    send_at_once(worker, messages)
    worker.sock.shutdown(socket.SHUT_WR)
    for message, x in zip(messages, rows):
        answer = worker.receive()
        assert answer["id"] == message["id"]
        assert torch.equal(worker.outputs(answer)["y"], x + 1)
    assert worker.proc.wait(timeout=30) == 0, worker.log()


def test_pipeline_defaults_to_off_on_the_cpu_and_a_bad_value_is_refused(spawn, demo_models):
    _, result = loaded(spawn, demo_models, "tabular-classifier")
    assert result["pipeline"] is False
    refused = spawn()
    model = load_request(demo_models, "tabular-classifier")
    for bad in (1, "yes", [True]):
        error = error_of(refused.request("load", model=model, pipeline=bad))
        assert error["code"] == "BAD_PARAMETER" and "pipeline" in error["message"], error


def cuda_worker(spawn, repo: Path, name: str, **kwargs: Any):
    worker = spawn(**kwargs)
    model = load_request(repo, name, device="cuda")
    reply = worker.request("load", model=model, variants={"precisions": ["fp32"]})
    assert reply["ok"], (reply, worker.log())
    return worker


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("where", ["host", "device"])
def test_a_cuda_requests_stages_are_timed_on_the_device(spawn, test_models, where):
    # A request's forward pass is launched without a wait and its output copies are queued behind
    # it, so on the host's clock the pass would look instant and the copies would take its time.
    # Timed by events on the stream, a 50 ms pass is compute wherever it spends the time: on the
    # host before its one kernel (a model that sleeps) or on the device (a kernel that spins).
    env = {"TENSORGATE_SLEEPY_SECONDS": "0.05", "TENSORGATE_SLEEPY_ON": where}
    worker = cuda_worker(spawn, test_models, "sleepy", env=env)
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    for _ in range(3):
        reply = worker.infer({"x": x})
        assert torch.equal(worker.outputs(reply)["y"], x * 2)
        timings = reply["result"]["timings"]
        assert set(timings) == {"h2d_ms", "compute_ms", "d2h_ms"}
        # 50 ms asleep on the host; at least 25 ms of spinning on a GPU clocked up to 2 GHz.
        assert timings["compute_ms"] >= 20, timings
        assert timings["h2d_ms"] < 5 and timings["d2h_ms"] < 5, timings


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_models_large_inputs_arrive_whole_before_its_kernels_read_them(spawn, test_models):
    # The input copies from the page-locked arena are only queued, and the forward pass is
    # launched behind them on the same stream: a 16 MB input must be read whole, and the sums
    # are bit-identical to the same reduction in this process on the same device.
    worker = cuda_worker(spawn, test_models, "row_sum", in_bytes=32 << 20)
    generator = torch.Generator().manual_seed(3)
    for rows in (1024, 7, 1024):
        x = torch.randn(rows, 4096, generator=generator)
        got = worker.outputs(worker.infer({"x": x}))["sum"]
        assert torch.equal(got, x.cuda().sum(dim=-1).cpu())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_requests_begun_while_others_run_get_their_own_rows_bit_for_bit(spawn, test_models):
    # Pipelining is on by default on CUDA: each request's input copies go on the copy stream
    # while the pass before it runs, and its pass waits for them on the device. Eight 4 MB
    # requests sent at once: every answer is its own input's sums, bit-identical to the same
    # reduction in this process, and requests were begun while others ran.
    worker = cuda_worker(spawn, test_models, "row_sum", in_bytes=64 << 20)
    generator = torch.Generator().manual_seed(5)
    rows = [torch.randn(256, 4096, generator=generator) for _ in range(8)]
    worker._next_offset = 0
    messages = [
        {"id": 200 + i, "op": "infer", "inputs": [worker.put("x", x)]} for i, x in enumerate(rows)
    ]
    send_at_once(worker, messages)
    for message, x in zip(messages, rows):
        answer = worker.receive()
        assert answer["id"] == message["id"]
        assert torch.equal(worker.outputs(answer)["sum"], x.cuda().sum(dim=-1).cpu())
    assert worker.request("ping")["result"]["pipelined"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_failed_cuda_request_is_its_own_and_the_next_is_answered(spawn, test_models):
    worker = cuda_worker(spawn, test_models, "flaky")
    good = torch.ones(3, 4)
    assert torch.equal(worker.outputs(worker.infer({"x": good}))["y"], good + 1)
    error = error_of(worker.infer({"x": -good}))
    assert error["code"] == "INFERENCE_FAILED" and "negative input" in error["message"], error
    reply = worker.infer({"x": good * 3})
    assert torch.equal(worker.outputs(reply)["y"], good * 3 + 1)
    assert reply["result"]["timings"]["compute_ms"] >= 0


def _thread_cpus(pid: int) -> dict[int, set[int]]:
    """The CPUs each thread of a process may run on, by thread id."""
    return {int(tid): os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
@pytest.mark.parametrize("count", [1, 2])
def test_cpus_place_every_thread_of_the_worker_torch_threads_included(spawn, demo_models, count):
    cpus = sorted(os.sched_getaffinity(0))[-count:]
    if len(cpus) < count:
        pytest.skip(f"needs {count} CPUs")
    worker = spawn()
    # Two threads on a convolutional model: torch's intra-op pool starts at the warm-up, after
    # the placement, and must start placed. On one CPU the worker runs one thread.
    model = load_request(demo_models, "image-classifier", "1", threads=2)
    reply = worker.request("load", model=model, cpus=cpus)
    assert reply["ok"], (reply, worker.log())
    assert reply["result"]["cpus"] == cpus
    image = torch.rand(1, 3, 224, 224)
    assert worker.request("infer", inputs=[worker.put("image", image)])["ok"]
    threads = _thread_cpus(worker.proc.pid)
    assert all(placed == set(cpus) for placed in threads.values()), threads
    assert f"(CPUs {','.join(map(str, cpus))})" in worker.log()
    if count == 2:
        assert len(threads) > 1, "torch's intra-op threads are running"
    else:
        assert "2 threads asked on 1 CPU" in worker.log(), worker.log()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_cpus_the_machine_lacks_fail_the_load_by_name_and_the_worker_goes_on(spawn, demo_models):
    here = min(os.sched_getaffinity(0))
    worker = spawn()
    model = load_request(demo_models, "tabular-classifier")
    for cpus, named in (([1023], "[1023]"), ([here, 1023], "CPUs [1023] are not available")):
        error = error_of(worker.request("load", model=model, cpus=cpus))
        assert error["code"] == "LOAD_FAILED" and named in error["message"], error
        assert "name CPUs this machine has" in error["message"], error
    for bad in ([], [-1], [1.5], [True], "0", 0):
        error = error_of(worker.request("load", model=model, cpus=bad))
        assert error["code"] == "BAD_PARAMETER" and "cpus" in error["message"], error
    # A refused placement is undone: the worker runs where it ran before.
    assert all(cpus == os.sched_getaffinity(0) for cpus in _thread_cpus(worker.proc.pid).values())
    reply = worker.request("load", model=model, cpus=[here])
    assert reply["ok"] and reply["result"]["cpus"] == [here], reply
    x = torch.rand(1, 4)
    assert worker.outputs(worker.infer({"features": x}))["probabilities"].shape == (1, 3)
