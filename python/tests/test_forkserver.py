"""The fork server: a real ``python -m tensorgate.forkserver`` forking real workers that connect
back over a Unix socket, driven as the gateway drives it (docs/worker-protocol.md)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from test_worker_e2e import load_request, loaded

from _worker_client import ForkServer, WorkerProcess
from tensorgate import forkserver


@pytest.fixture
def fork_server(tmp_path):
    server = ForkServer(tmp_path, tmp_path / "forkserver.log")
    yield server
    if server.proc.poll() is None:
        server.close()


@pytest.fixture
def start(shm_path, tmp_path):
    """Starts workers, spawned or forked (``fork_server=``); closes those still running."""
    workers: list[WorkerProcess] = []

    def make(**kwargs) -> WorkerProcess:
        n = len(workers)
        log = tmp_path / f"w{n}.log"
        worker = WorkerProcess(shm_path(f"in{n}"), shm_path(f"out{n}"), log, **kwargs)
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        if worker.sock.fileno() != -1:
            worker.close()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(condition, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def test_a_forked_worker_answers_bit_for_bit_as_a_spawned_one(start, fork_server, demo_models):
    spawned, _ = loaded(start, demo_models, "tabular-classifier")
    forked, result = loaded(start, demo_models, "tabular-classifier", fork_server=fork_server)
    assert forked.hello["pid"] == forked.pid != fork_server.proc.pid
    assert forked.hello["reads_files"] is True, "it opens the descriptors of the pid it was given"
    assert result["device"] == "cpu"
    features = torch.rand(5, 4, generator=torch.Generator().manual_seed(1)) * 7
    expected = spawned.outputs(spawned.infer({"features": features}))["probabilities"]
    got = forked.outputs(forked.infer({"features": features}))["probabilities"]
    assert torch.equal(got, expected)
    assert [comm(forked.pid), comm(spawned.pid), comm(fork_server.proc.pid)] == [
        "tg-worker",
        "tg-worker",
        "tg-forkserver",
    ]
    assert forked.request("shutdown")["ok"]
    assert fork_server.wait_exit(forked.pid) == {"op": "exit", "pid": forked.pid, "code": 0}
    assert "tensorgate.worker[" in forked.log(), "its log records reached its stderr stream"


def test_forks_come_from_one_thread_and_leave_it_one(start, fork_server, demo_models):
    """A thread pool begun before a fork is broken in the child (its threads are not copied):
    the server has none at a fork (numpy's OpenBLAS pool, begun at import, stops itself at a
    fork), and none after forking workers that run in parallel."""
    first = start(fork_server=fork_server)
    assert os.listdir(f"/proc/{fork_server.proc.pid}/task") == [str(fork_server.proc.pid)]
    model = load_request(demo_models, "image-classifier", threads=2)
    assert first.request("load", model=model, variants={"precisions": ["fp32"]})["ok"]
    image = torch.rand(2, 3, 224, 224)
    assert first.outputs(first.infer({"image": image}))["logits"].shape == (2, 10)
    second = start(fork_server=fork_server)
    assert second.request("load", model=model, variants={"precisions": ["fp32"]})["ok"]
    assert second.outputs(second.infer({"image": image}))["logits"].shape == (2, 10)
    assert len(os.listdir(f"/proc/{first.pid}/task")) >= 2, "the worker runs its own threads"
    assert os.listdir(f"/proc/{fork_server.proc.pid}/task") == [str(fork_server.proc.pid)]


def eager_model(folder: Path, forward: str) -> dict:
    """The load request's ``model`` for an eager module whose forward returns ``forward``."""
    folder.mkdir()
    (folder / "model.py").write_text(
        "import os\nimport torch\n\n\nclass M(torch.nn.Module):\n"
        f"    def forward(self, x):\n        return {forward}\n\n\ndef build():\n    return M()\n"
    )
    torch.save({}, folder / "weights.pt")
    return {
        "name": folder.name, "version": "1", "format": "eager", "entry": "model:build",
        "file": str(folder / "weights.pt"), "code_dir": str(folder), "device": "cpu",
        "threads": 1, "warmup_runs": 0,
        "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 4]}],
    }  # fmt: skip


def run_once(worker: WorkerProcess, model: dict) -> torch.Tensor:
    assert worker.request("load", model=model, variants={})["ok"], worker.log()
    return worker.outputs(worker.infer({"x": torch.zeros(3, 4)}))["y"]


def test_forked_workers_draw_their_own_random_numbers(start, fork_server, tmp_path):
    """A fork copies the generators' state; spawned workers each draw their own numbers."""
    model = eager_model(tmp_path / "noise", "torch.rand_like(x)")
    draws = [run_once(start(fork_server=fork_server), model) for _ in range(2)]
    assert not torch.equal(draws[0], draws[1])


def test_a_forked_worker_runs_with_the_environment_it_was_given(start, fork_server, tmp_path):
    model = eager_model(tmp_path / "offset", "x + float(os.environ.get('TG_TEST_OFFSET', 0))")
    given = start(fork_server=fork_server, env={"TG_TEST_OFFSET": "3"})
    assert run_once(given, model).eq(3).all()
    assert run_once(start(fork_server=fork_server), model).eq(0).all()


def test_kill_ends_only_a_worker_the_server_forked_and_has_not_reaped(start, fork_server):
    worker = start(fork_server=fork_server)
    assert fork_server.request("kill", pid=worker.pid)["result"] == {"killed": True}
    assert fork_server.wait_exit(worker.pid)["signal"] == "SIGKILL"
    # Reaped: the pid is no longer the server's to kill, whoever has it now.
    assert fork_server.request("kill", pid=worker.pid)["result"] == {"killed": False}
    assert fork_server.request("kill", pid=os.getpid())["result"] == {"killed": False}
    reply = fork_server.request("spawn")
    assert reply["ok"] is False and reply["error"]["code"] == "BAD_REQUEST"


def test_workers_die_with_their_fork_server(start, fork_server):
    workers = [start(fork_server=fork_server) for _ in range(2)]
    os.kill(fork_server.proc.pid, signal.SIGKILL)
    fork_server.proc.wait()
    for worker in workers:
        assert wait_until(lambda w=worker: not alive(w.pid)), f"worker {worker.pid} outlived it"


def test_the_fork_server_ends_at_eof_on_its_channel_and_its_workers_with_it(start, fork_server):
    worker = start(fork_server=fork_server)
    assert fork_server.close() == 0
    assert wait_until(lambda: not alive(worker.pid))


def test_a_fork_is_refused_where_it_would_not_begin_as_a_spawn():
    """This pytest process stands in for a fork server that began a thread."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert "Python threads, and a fork copies only one" in (forkserver.unsafe_to_fork() or "")
    finally:
        stop.set()
        thread.join()
