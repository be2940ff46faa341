"""The training SDK (tensorgate.train) against its run file: attach, metrics, and how changes,
pauses, checkpoints and stops are applied between steps. Here a small writer in this file plays
the gateway's part of the control block; test/e2e/training.test.ts runs the real gateway."""

from __future__ import annotations

import os
import struct
import threading
import time

import pytest
import torch

from tensorgate import train
from tensorgate._runfile import (
    CONTROL,
    CONTROL_VALUES,
    NAMES,
    RING,
    RING_ENTRIES,
    STATE_FINISHED,
    RunFile,
)


def write_control(run: train.Run, version, values, apply_at=0, paused=False, stop=False, ckpt=0):
    """The gateway's seqlock write, byte for byte as src/training/run-file.ts does it."""
    mm = RunFile.open(run.path).mm
    seq = struct.unpack_from("<Q", mm, CONTROL)[0]
    struct.pack_into("<Q", mm, CONTROL, seq + 1)
    flags = (1 if paused else 0) | (2 if stop else 0)
    struct.pack_into("<QqIIQ", mm, CONTROL + 8, version, apply_at, flags, len(values), ckpt)
    struct.pack_into(f"<{len(values)}d", mm, CONTROL + CONTROL_VALUES, *values)
    struct.pack_into("<Q", mm, CONTROL, seq + 2)


def ring(run: train.Run):
    return ring_at(run.path)


def ring_at(path: str):
    """The metrics ring of a run file, also after its run closed."""
    mm = RunFile.open(path).mm
    head = struct.unpack_from("<Q", mm, RING)[0]
    count = struct.unpack_from("<I", mm, NAMES)[0]
    names = [
        bytes(mm[NAMES + 64 + 64 * i : NAMES + 128 + 64 * i]).rstrip(b"\0").decode()
        for i in range(count)
    ]
    entries = [struct.unpack_from("<qdI4xd", mm, RING_ENTRIES + 32 * i) for i in range(head)]
    return [(step, names[index], value) for step, _, index, value in entries]


@pytest.fixture
def runs_dir(tmp_path):
    return str(tmp_path / "runs")


def sgd():
    model = torch.nn.Linear(2, 1)
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def test_attach_writes_a_run_file_the_gateway_can_read(runs_dir):
    run = train.attach(
        "unit", {"lr": 0.1, "steps": 3, "flag": True}, {"lr": {"max": 1.0}}, runs_dir=runs_dir
    )
    other = RunFile.open(run.path)
    declaration = other.declaration()
    assert declaration["run_id"] == run.id
    assert declaration["hparams"] == [
        {"name": "lr", "type": "float", "initial": 0.1, "max": 1.0},
        {"name": "steps", "type": "int", "initial": 3},
        {"name": "flag", "type": "bool", "initial": True},
    ]
    assert other.read_control().values == (0.1, 3.0, 1.0)
    run.close()
    assert struct.unpack_from("<I", other.mm, 16896 + 40)[0] == STATE_FINISHED
    run.close()  # twice is fine


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("bad name!", {"lr": 0.1}), "run name"),
        (("ok", {"lr": "fast"}), "not a float, int or bool"),
        (("ok", {"lr": 0.1}, {"momentum": {}}), "unknown hyperparameters"),
        (("ok", {"lr": 2.0}, {"lr": {"max": 1.0}}), "outside its spec"),
        (("ok", {"lr": 0.1}, {"lr": {"type": "complex"}}), "type must be"),
        (("ok", {"lr": 0.1}, {"lr": {"min": float("nan")}}), "finite"),
    ],
)
def test_attach_rejects_bad_declarations(runs_dir, args, message):
    with pytest.raises((ValueError, TypeError), match=message):
        train.attach(*args, runs_dir=runs_dir)


def test_a_run_without_a_usable_runs_dir_trains_on_detached(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.warns(UserWarning, match="detached"):
        run = train.attach("detached", {"lr": 0.1}, runs_dir=str(blocker / "runs"))
    assert run.id is None
    optimizer = sgd()
    run.log(0, loss=1.0)
    run.apply(optimizer, 0)
    assert optimizer.param_groups[0]["lr"] == 0.1 and not run.should_stop


def test_damaged_run_files_are_refused_not_mapped(tmp_path):
    garbage = tmp_path / "garbage.tgrun"
    garbage.write_bytes(b"\x07" * 100_000)
    with pytest.raises(ValueError, match="not a tensorgate run file"):
        RunFile.open(str(garbage))
    good = RunFile.create(str(tmp_path / "good.tgrun"), {}, [0.0])
    truncated = tmp_path / "truncated.tgrun"
    truncated.write_bytes(bytes(good.mm[:60_000]))
    with pytest.raises(ValueError, match="truncated"):
        RunFile.open(str(truncated))
    tiny = tmp_path / "tiny.tgrun"
    tiny.write_bytes(b"TGRUN01\0")
    with pytest.raises(ValueError, match="too short"):
        RunFile.open(str(tiny))


def test_log_takes_numbers_and_tensors(runs_dir):
    run = train.attach("metrics", {"lr": 0.1}, runs_dir=runs_dir)
    run.log(0, loss=1.5, count=3, ok=True, t=torch.tensor(2.5), v=torch.tensor([1.0, 3.0]))
    run.log(1, loss=float("nan"))
    assert ring(run) == [
        (0, "loss", 1.5),
        (0, "count", 3.0),
        (0, "ok", 1.0),
        (0, "t", 2.5),
        (0, "v", 2.0),
        (1, "loss", pytest.approx(float("nan"), nan_ok=True)),
    ]


@pytest.fixture
def staged_on_cpu(monkeypatch):
    """CPU tensors take the staged path that CUDA tensors take (held by reference, stacked and
    published every flush), so the staging runs on a machine without a GPU."""
    monkeypatch.setattr(train, "_STAGED_DEVICE_TYPES", frozenset({"cuda", "cpu"}))


def test_staged_metrics_logged_every_step_arrive_in_order_and_complete(runs_dir, staged_on_cpu):
    run = train.attach("staged", {"lr": 0.1}, runs_dir=runs_dir)
    path = run.path
    weight = torch.ones(3, requires_grad=True)
    expected = []
    for step in range(500):
        loss = (weight * step).sum()  # has an autograd graph: held detached
        accuracy = torch.tensor([step % 2, 1.0])  # several elements: published as the mean
        run.log(step, loss=loss, accuracy=accuracy, lr=0.1)
        run.apply(None, step)
        expected += [(step, "lr", 0.1)]
        if step == 0:
            # The first flush happens at once; the next ones only every _FLUSH_INTERVAL_S.
            assert ring(run) == [(0, "lr", 0.1), (0, "loss", 0.0), (0, "accuracy", 0.5)]
    assert len(run._pending) > 0, "values wait for the next flush instead of being read per step"
    run.close()
    entries = ring_at(path)
    host = [e for e in entries if e[1] == "lr"]
    staged = [e for e in entries if e[1] != "lr"]
    assert host == expected
    assert staged == [
        (step, name, value)
        for step in range(500)
        for name, value in (("loss", 3.0 * step), ("accuracy", (step % 2 + 1.0) / 2))
    ]
    assert run.dropped_metrics == 0


def test_a_staged_tensor_changed_in_place_before_it_is_read_is_dropped(runs_dir, staged_on_cpu):
    run = train.attach("inplace", {"lr": 0.1}, runs_dir=runs_dir)
    path = run.path
    total = torch.zeros(())
    run.log(0, total=total)  # the first log flushes at once
    total += 1.0
    run.log(1, total=total)
    total += 1.0  # changed before the flush read step 1's value
    run.log(2, copy=total.clone())
    with pytest.warns(UserWarning, match="changed in place"):
        run.close()
    assert ring_at(path) == [(0, "total", 0.0), (2, "copy", 2.0)]
    assert run.dropped_metrics == 1


def test_log_every_publishes_every_nth_step_only(runs_dir):
    run = train.attach("sparse", {"lr": 0.1}, runs_dir=runs_dir, log_every=10)
    for step in range(35):
        run.log(step, loss=float(step))
    assert ring(run) == [(step, "loss", float(step)) for step in (0, 10, 20, 30)]
    with pytest.raises(ValueError, match="log_every"):
        train.attach("bad", {"lr": 0.1}, runs_dir=runs_dir, log_every=0)


def test_too_many_metric_names_are_dropped_with_a_warning(runs_dir):
    run = train.attach("names", {"lr": 0.1}, runs_dir=runs_dir)
    with pytest.warns(UserWarning, match="at most 64"):
        run.log(0, **{f"m{i}": float(i) for i in range(70)})
    assert run.dropped_metrics == 6
    assert len(ring(run)) == 64


def test_a_change_applies_at_its_step_and_override_beats_the_scheduler(runs_dir):
    run = train.attach("override", {"lr": 0.1, "momentum": 0.9}, runs_dir=runs_dir)
    optimizer = sgd()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    write_control(run, 1, [0.01, 0.8], apply_at=3)
    lrs = []
    for step in range(6):
        run.apply(optimizer, step, scheduler)
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    # Steps 0-2 follow the schedule (0.1, 0.05, 0.025); from step 3 the agent's value holds.
    assert lrs == pytest.approx([0.1, 0.05, 0.025, 0.01, 0.01, 0.01])
    assert optimizer.param_groups[0]["momentum"] == 0.8
    assert run.hparams == {"lr": 0.01, "momentum": 0.8}
    slot = RunFile.open(run.path).mm
    seen, applied_version, applied_step = struct.unpack_from("<QQq", slot, 16896 + 16)
    assert (seen, applied_version, applied_step) == (1, 1, 3)


def test_scale_mode_rebases_the_schedule(runs_dir):
    run = train.attach("scale", {"lr": 0.1}, runs_dir=runs_dir, scheduler="scale")
    optimizer = sgd()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    lrs = []
    for step in range(6):
        if step == 3:
            write_control(run, 1, [0.2], apply_at=3)  # double the base
        run.apply(optimizer, step, scheduler)
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    # Schedule 0.1, 0.1, 0.05, 0.05 | x2 from step 3 on: 0.1, then halves on schedule.
    assert lrs == pytest.approx([0.1, 0.1, 0.05, 0.1, 0.05, 0.05])
    assert scheduler.base_lrs == pytest.approx([0.2])
    assert run.hparams == {"lr": 0.2}


def test_values_outside_the_spec_are_never_applied(runs_dir):
    run = train.attach("guard", {"lr": 0.1, "n": 2}, {"lr": {"max": 1.0}}, runs_dir=runs_dir)
    optimizer = sgd()
    write_control(run, 1, [float("nan"), 2.5])
    run.apply(optimizer, 0)
    write_control(run, 2, [5.0, 3.0])
    run.apply(optimizer, 1)
    assert run.hparams == {"lr": 0.1, "n": 3}
    assert optimizer.param_groups[0]["lr"] == 0.1


def test_pause_blocks_until_resume_and_checkpoint_and_stop_follow(runs_dir):
    saved = []
    run = train.attach(
        "pause",
        {"lr": 0.1},
        runs_dir=runs_dir,
        on_checkpoint=lambda s: saved.append(s) or f"/ck/{s}",
    )
    write_control(run, 1, [0.1], paused=True)

    def agent():
        time.sleep(0.2)
        write_control(run, 2, [0.1], paused=True, ckpt=1)
        time.sleep(0.1)
        write_control(run, 3, [0.05], paused=False, ckpt=1)

    thread = threading.Thread(target=agent)
    thread.start()
    started = time.monotonic()
    optimizer = sgd()
    run.apply(optimizer, 7)
    waited = time.monotonic() - started
    thread.join()
    assert waited >= 0.25
    assert saved == [7] and not run.paused and not run.should_stop
    assert optimizer.param_groups[0]["lr"] == 0.05
    write_control(run, 4, [0.05], stop=True, ckpt=2)
    run.apply(optimizer, 8)
    assert saved == [7, 8] and run.should_stop
    path = bytes(RunFile.open(run.path).mm[16896 + 336 : 16896 + 336 + 10]).rstrip(b"\0")
    assert path == b"/ck/8"


def test_the_hot_path_reads_one_number_when_nothing_changed(runs_dir, monkeypatch):
    run = train.attach("quiet", {"lr": 0.1}, runs_dir=runs_dir)
    optimizer = sgd()
    run.apply(optimizer, 0)
    calls = []
    monkeypatch.setattr(run._file, "read_control", lambda *a: calls.append(a))
    for step in range(1, 100):
        run.log(step, loss=1.0)
        run.apply(optimizer, step)
    assert calls == []
    assert os.path.exists(run.path)
