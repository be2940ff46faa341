"""Let an agent observe and steer a running training loop, at no cost to the loop.

::

    from tensorgate import train

    run = train.attach("mnist-mlp", hparams={"lr": 0.1, "momentum": 0.9},
                       spec={"lr": {"min": 1e-5, "max": 1.0}}, on_checkpoint=save)
    for step in range(steps):
        loss = loss_fn(model(x), y)
        loss.backward()
        run.log(step, loss=loss)          # numbers or tensors on any device
        run.apply(optimizer, step)        # changes, pause, checkpoint, stop: between steps
        optimizer.step()
        optimizer.zero_grad()
        if run.should_stop:
            break
    run.close()

The SDK talks to the gateway through one shared-memory file and nothing else: each step it writes
its step number and metrics there and reads one 8-byte sequence number to learn whether the
gateway wrote a change. It never opens a socket, never waits for the gateway, never takes a lock
the gateway holds and never synchronises a CUDA device. A CUDA tensor costs the step only a
reference: every ``_FLUSH_INTERVAL_S`` the values held since are reduced on the device in one
stack, copied to pinned memory in one copy without blocking, and published once that copy's
CUDA event has completed (checked, never waited for, at the next flush). ``log_every=N`` makes
the steps between every N-th return at once. If the gateway is absent, dies or restarts, the loop
runs on unchanged.

Hyperparameters are declared at attach with their type and range; the gateway checks every change
against them, and the SDK checks again before applying. Names that exist in the optimizer's
``param_groups`` (``lr``, ``momentum``, ``weight_decay``...) are applied there; every value is in
``run.hparams``. How an agent's change combines with an LR scheduler is chosen at attach:

- ``scheduler="override"`` (default): the agent's value replaces the scheduler's. From the step it
  is applied, the SDK writes it back into ``param_groups`` at every ``apply``.
- ``scheduler="scale"``: the agent's value becomes the new base of the schedule. The current value
  (and ``initial_lr``, and the ``base_lrs`` of a scheduler passed to ``apply``) is multiplied by
  new/old, so the schedule goes on from the new base.

With ``torch.distributed`` (several ranks), call ``attach`` and ``apply`` on every rank the same
number of times. Rank 0 creates the file and logs metrics. The ranks agree every ``sync_every``
calls, with an asynchronous all-reduce on a gloo group that is awaited ``sync_every`` calls later,
on the newest change every rank has seen; so every rank applies each change at the same step.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import re
import secrets
import socket
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from . import __version__
from ._runfile import (
    CONTROL_SEQ_WORD,
    DEFAULT_RING_CAPACITY,
    MAX_METRICS,
    STATE_FINISHED,
    STATE_PAUSED,
    STATE_RUNNING,
    STATE_STOPPED,
    Control,
    RunFile,
    SlotState,
    process_start_time,
    step_word,
)

__all__ = ["Run", "attach", "default_runs_dir"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TYPES = ("float", "int", "bool")
_PAUSE_POLL_S = 0.02
#: Device metrics are held by reference and staged together this often (seconds, wall clock), or
#: sooner when _FLUSH_MAX_VALUES of them wait: one stack and one copy for many steps' values.
_FLUSH_INTERVAL_S = 0.05
_FLUSH_MAX_VALUES = 1024
#: Pinned staging buffers (each _FLUSH_MAX_VALUES floats, with one reused CUDA event); when all
#: are in flight the device is far behind and new values are dropped, never waited for.
_PINNED_BUFFERS = 8
#: Tensors of these device types take the staged path; the others are read at once. Tests add
#: "cpu" to exercise the staging on a machine without a GPU.
_STAGED_DEVICE_TYPES = frozenset({"cuda"})
#: The agreement all-reduce buffers of every run of the process (two per run; see Run._agree).
_KEEP_ALIVE: list = []


def default_runs_dir() -> str:
    """``$TENSORGATE_RUNS_DIR``, else ``/dev/shm/tensorgate-runs`` (the gateway's default too)."""
    configured = os.environ.get("TENSORGATE_RUNS_DIR")
    if configured:
        return configured
    return "/dev/shm/tensorgate-runs" if os.path.isdir("/dev/shm") else "/tmp/tensorgate-runs"


class _Spec:
    """One declared hyperparameter: its type and inclusive range."""

    __slots__ = ("name", "type", "min", "max", "initial")

    def __init__(self, name: str, initial: object, spec: Mapping[str, Any]) -> None:
        if isinstance(initial, bool):
            inferred = "bool"
        elif isinstance(initial, int):
            inferred = "int"
        elif isinstance(initial, float):
            inferred = "float"
        else:
            raise TypeError(f"hyperparameter {name!r}: {initial!r} is not a float, int or bool")
        self.name = name
        self.type = spec.get("type", inferred)
        if self.type not in _TYPES:
            raise ValueError(f"hyperparameter {name!r}: type must be one of {_TYPES}")
        self.min = spec.get("min")
        self.max = spec.get("max")
        for bound in (self.min, self.max):
            if bound is not None and not (isinstance(bound, (int, float)) and math.isfinite(bound)):
                raise ValueError(f"hyperparameter {name!r}: bounds must be finite numbers")
        self.initial = float(initial)
        if not self.accepts(self.initial):
            raise ValueError(
                f"hyperparameter {name!r}: initial value {initial!r} is outside its spec"
            )

    def accepts(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.type != "float" and value != int(value):
            return False
        if self.type == "bool" and value not in (0.0, 1.0):
            return False
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def cast(self, value: float) -> float | int | bool:
        if self.type == "int":
            return int(value)
        if self.type == "bool":
            return bool(value)
        return value

    def declaration(self) -> dict:
        out: dict = {"name": self.name, "type": self.type, "initial": self.cast(self.initial)}
        if self.min is not None:
            out["min"] = self.min
        if self.max is not None:
            out["max"] = self.max
        return out


def _distributed():
    """torch.distributed when a process group of several ranks is up, else None. Looks only at
    modules already imported: attaching never imports torch by itself."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


class Run:
    """A training run attached to the runs directory. Make it with :func:`attach`."""

    def __init__(
        self,
        name: str,
        specs: list[_Spec],
        on_checkpoint: Callable[[int], object] | None,
        scheduler: str,
        file: RunFile | None,
        rank: int,
        dist: Any,
        group: Any,
        sync_every: int,
        log_every: int = 1,
    ) -> None:
        self.name = name
        self._specs = specs
        self._values = [s.initial for s in specs]
        self._on_checkpoint = on_checkpoint
        self._scale = scheduler == "scale"
        self._file = file
        self._rank = rank
        self._dist = dist
        self._group = group
        self._sync_every = sync_every
        self._metrics = file if rank == 0 else None
        self._metric_index: dict[str, int] = {}
        self._slot = SlotState(state=STATE_RUNNING, pid=os.getpid())
        self._slot.start_time = process_start_time(os.getpid())
        self._seen_seq = -1
        self._queue: deque[Control] = deque()
        self._calls = 0
        self._busy = dist is not None
        self._step_word = step_word(rank)
        self._paused = False
        self._should_stop = False
        self._pinned_values: dict[str, float] = {}
        self._agree_work: Any = None
        self._agree_tensor: Any = None
        self._agree_buffers: list | None = None
        self._agree_flip = 0
        self._log_every = log_every
        # Device values logged since the last flush: (tensor, step, time, index, version).
        self._pending: list = []
        self._flushed_at = 0.0
        self._stage_host = "cpu" in _STAGED_DEVICE_TYPES
        # Flushes whose copy may still run: (event, buffer, metas); and free (buffer, event) pairs.
        self._staged: deque = deque()
        self._free_pinned: list = []
        self._pinned_made = 0
        self._warned_stale = False
        self.dropped_metrics = 0
        if file is not None:
            file.write_slot(rank, self._slot)
            atexit.register(self.close)

    # ------------------------------------------------------------------ public surface

    @property
    def id(self) -> str | None:
        """The run id the gateway lists (the file name without .tgrun); None when detached."""
        if self._file is None:
            return None
        return os.path.basename(self._file.path).removesuffix(".tgrun")

    @property
    def path(self) -> str | None:
        return None if self._file is None else self._file.path

    @property
    def hparams(self) -> dict[str, float | int | bool]:
        """The current value of every declared hyperparameter."""
        return {s.name: s.cast(v) for s, v in zip(self._specs, self._values)}

    @property
    def should_stop(self) -> bool:
        """True once the gateway asked the run to stop (after the checkpoint, if one was asked)."""
        return self._should_stop

    @property
    def paused(self) -> bool:
        return self._paused

    def log(self, step: int, **metrics: object) -> None:
        """Publishes metrics for ``step``: Python numbers, or tensors on any device (a tensor of
        several elements is published as its mean). Never blocks, never syncs a device.

        A CUDA tensor is read later, within ``_FLUSH_INTERVAL_S``: do not change it in place
        after logging it (log ``t.clone()`` of an accumulator); a value changed in place before
        it was read is dropped with a warning rather than published wrong."""
        ring = self._metrics
        if ring is None or step % self._log_every:
            return
        now = time.time()
        pending = self._pending
        for name, value in metrics.items():
            index = self._metric_index.get(name)
            if index is None:
                index = self._add_metric(name)
                if index is None:
                    continue
            kind = type(value)
            if kind is not float and kind is not int:
                if getattr(value, "is_cuda", False) or (
                    self._stage_host and hasattr(value, "detach")
                ):
                    if value.requires_grad:
                        value = value.detach()  # keep the value, not the autograd graph
                    pending.append((value, step, now, index, value._version))
                    continue
                value = _host_value(value)
            ring.append_metric(step, now, index, value)
        if pending and (
            now - self._flushed_at >= _FLUSH_INTERVAL_S
            or len(pending) >= _FLUSH_MAX_VALUES
            or now < self._flushed_at  # the wall clock went back
        ):
            self._flush(now)

    def apply(self, optimizer: Any = None, step: int | None = None, scheduler: Any = None) -> None:
        """Call once per optimizer step, after ``backward`` and before ``optimizer.step()``.
        Applies the changes that are due, runs an asked-for checkpoint, and blocks only while
        the run is paused (the one wait an agent asks for)."""
        # The common case (nothing changed, nothing pending) is two memory accesses; everything
        # else lives in _apply_slow, entered when the control seq moved or _busy says so.
        file = self._file
        if file is None:
            return
        self._calls = calls = self._calls + 1
        if step is None:
            step = calls - 1
        file.step_view[self._step_word] = step
        if file.control_view[CONTROL_SEQ_WORD] != self._seen_seq or self._busy:
            self._apply_slow(step, optimizer, scheduler)
        pinned = self._pinned_values
        if pinned and optimizer is not None:
            # "override": the agent's values win over a scheduler that changed them since.
            for group in optimizer.param_groups:
                group.update(pinned)

    def _apply_slow(self, step: int, optimizer: Any, scheduler: Any) -> None:
        if self._file.control_seq() != self._seen_seq:
            self._observe()
        if self._dist is None:
            if self._queue and self._queue[0].apply_at_step <= step:
                self._apply_due(step, optimizer, scheduler, None)
        elif self._calls % self._sync_every == 0:
            self._agree(step, optimizer, scheduler)
        if self._paused and not self._should_stop:
            self._wait_while_paused(step, optimizer, scheduler)
        # Stay on the slow path while anything may need a look next step.
        self._busy = bool(self._queue or self._paused) or self._dist is not None

    def close(self) -> None:
        """Marks the run finished. Called at interpreter exit too; safe to call twice."""
        f, self._file = self._file, None
        if f is None:
            return
        atexit.unregister(self.close)
        with contextlib.suppress(Exception):  # a device in error loses its last values, no more
            self._drain()
        self._metrics = None
        if self._agree_work is not None:
            # A rank that died first leaves nothing to agree on.
            with contextlib.suppress(Exception):
                self._agree_work.wait()
        self._slot.state = STATE_FINISHED
        f.write_slot(self._rank, self._slot)
        f.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ control

    def _observe(self) -> None:
        """The gateway wrote the control block: queue the new snapshot and acknowledge it."""
        f = self._file
        seq = f.control_seq()
        snapshot = f.read_control()
        if snapshot is None:
            return  # a write in progress (or a writer that died mid-write): next step
        self._seen_seq = seq
        if snapshot.version > self._slot.seen_version:
            self._queue.append(snapshot)
            self._slot.seen_version = snapshot.version
            f.write_slot(self._rank, self._slot)

    def _agree(self, step: int, optimizer: Any, scheduler: Any) -> None:
        """Every sync_every calls: collect the all-reduce started last time (long finished) and
        apply what every rank had seen then; start the next one. No rank waits on the gateway."""
        work = self._agree_work
        if work is not None:
            work.wait()
            self._apply_due(step, optimizer, scheduler, int(self._agree_tensor[0]))
        if self._agree_buffers is None:
            torch = sys.modules["torch"]
            self._agree_buffers = [torch.zeros(1, dtype=torch.int64) for _ in range(2)]
            # Held for the life of the process: if a gloo thread dropped the last reference to a
            # tensor made in Python, freeing it would need the GIL, and at interpreter exit
            # (torch 1.13) the main thread joins that thread while holding the GIL: a deadlock.
            _KEEP_ALIVE.extend(self._agree_buffers)
        self._agree_flip ^= 1
        tensor = self._agree_buffers[self._agree_flip]
        tensor[0] = self._slot.seen_version
        self._agree_tensor = tensor
        self._agree_work = self._dist.all_reduce(
            tensor, op=self._dist.ReduceOp.MIN, group=self._group, async_op=True
        )

    def _apply_due(
        self, step: int, optimizer: Any, scheduler: Any, max_version: int | None
    ) -> None:
        queue = self._queue
        while queue and queue[0].apply_at_step <= step:
            if max_version is not None and queue[0].version > max_version:
                return
            self._apply(queue.popleft(), step, optimizer, scheduler)

    def _apply(self, control: Control, step: int, optimizer: Any, scheduler: Any) -> None:
        for i, spec in enumerate(self._specs):
            if i >= len(control.values):
                break
            new, old = control.values[i], self._values[i]
            if new == old or not spec.accepts(new):
                continue  # unchanged, or a value the gateway should never have written
            self._values[i] = new
            if optimizer is not None:
                self._set_in_optimizer(spec, old, new, optimizer, scheduler)
        self._paused = control.paused
        slot = self._slot
        checkpoint_path = None
        if control.checkpoint_seq > slot.checkpoint_done:
            slot.checkpoint_done = control.checkpoint_seq
            slot.checkpoint_step = step
            checkpoint_path = self._checkpoint(step)
        if control.stop:
            self._should_stop = True
        slot.state = (
            STATE_STOPPED if self._should_stop else STATE_PAUSED if self._paused else STATE_RUNNING
        )
        slot.applied_version = control.version
        slot.applied_step = step
        self._file.write_slot(
            self._rank, slot, applied=(control.version, step), checkpoint_path=checkpoint_path
        )

    def _set_in_optimizer(
        self, spec: _Spec, old: float, new: float, optimizer: Any, scheduler: Any
    ) -> None:
        groups = optimizer.param_groups
        current = groups[0].get(spec.name) if groups else None
        if not isinstance(current, (int, float)) or isinstance(current, bool):
            return  # not an optimizer setting (or a tuple such as betas): only in run.hparams
        value = spec.cast(new)
        if self._scale and spec.type == "float" and old != 0:
            ratio = new / old
            for group in groups:
                group[spec.name] *= ratio
                if spec.name == "lr" and "initial_lr" in group:
                    group["initial_lr"] *= ratio
            if spec.name == "lr" and scheduler is not None and hasattr(scheduler, "base_lrs"):
                scheduler.base_lrs = [b * ratio for b in scheduler.base_lrs]
            return
        self._pinned_values[spec.name] = value
        for group in groups:
            group[spec.name] = value

    def _checkpoint(self, step: int) -> str | None:
        if self._on_checkpoint is None:
            warnings.warn(
                "tensorgate: a checkpoint was asked for, but attach() got no on_checkpoint",
                stacklevel=4,
            )
            return None
        result = self._on_checkpoint(step)
        return None if result is None else str(result)

    def _wait_while_paused(self, step: int, optimizer: Any, scheduler: Any) -> None:
        """Paused: poll the control block until resumed or stopped. Every rank is paused at the
        same step and sees the same changes in the same order, so applying them here, in order,
        keeps the ranks in step; a change's apply_at_step has no meaning while time stands still."""
        f = self._file
        while self._paused and not self._should_stop:
            time.sleep(_PAUSE_POLL_S)
            if f.control_seq() != self._seen_seq:
                self._observe()
            while self._queue and self._paused and not self._should_stop:
                self._apply(self._queue.popleft(), step, optimizer, scheduler)

    # ------------------------------------------------------------------ metrics

    def _add_metric(self, name: str) -> int | None:
        index = len(self._metric_index)
        if index >= MAX_METRICS:
            if self.dropped_metrics == 0:
                warnings.warn(f"tensorgate: at most {MAX_METRICS} metric names", stacklevel=3)
            self.dropped_metrics += 1
            return None
        self._metrics.write_metric_name(index, name)
        self._metric_index[name] = index
        return index

    def _flush(self, now: float) -> None:
        """Stages the device values held since the last flush: one stack per device (each
        value reduced to its mean on its device), one non-blocking copy to a pinned buffer, one
        event. Publishes the flushes whose event has completed first, without waiting."""
        self._flushed_at = now
        pending, self._pending = self._pending, []
        if self._staged:
            self._publish_staged()
        fresh = [p for p in pending if p[0]._version == p[4]]
        if len(fresh) < len(pending):
            self._drop_stale(len(pending) - len(fresh))
        if not fresh:
            return
        torch = sys.modules["torch"]
        values = [t if t.dim() == 0 else t.float().mean() for t, *_ in fresh]
        metas = [meta for _, *meta in fresh]
        try:
            groups = [(torch.stack(values), metas)]
        except RuntimeError:  # tensors on several devices: a stack per device
            by_device: dict = {}
            for t, m in zip(values, metas):
                ts, ms = by_device.setdefault(t.device, ([], []))
                ts.append(t)
                ms.append(m)
            groups = [(torch.stack(ts), ms) for ts, ms in by_device.values()]
        for stacked, group_metas in groups:
            if stacked.dtype != torch.float32:
                stacked = stacked.float()
            if stacked.is_cuda:
                self._copy_to_host(torch, stacked, group_metas)
            else:
                self._append(group_metas, stacked.tolist())

    def _copy_to_host(self, torch: Any, stacked: Any, metas: list) -> None:
        if not self._free_pinned and self._pinned_made < _PINNED_BUFFERS:
            self._pinned_made += 1
            buffer = torch.empty(_FLUSH_MAX_VALUES, dtype=torch.float32, pin_memory=True)
            self._free_pinned.append((buffer, torch.cuda.Event()))
        if not self._free_pinned:
            self.dropped_metrics += len(metas)  # the device is far behind: drop, never wait
            return
        buffer, event = self._free_pinned.pop()
        buffer[: len(metas)].copy_(stacked, non_blocking=True)
        event.record(torch.cuda.current_stream(stacked.device))
        self._staged.append((event, buffer, metas))

    def _publish_staged(self, wait: bool = False) -> None:
        staged = self._staged
        while staged and (wait or staged[0][0].query()):
            event, buffer, metas = staged.popleft()
            if wait:
                event.synchronize()
            self._append(metas, buffer[: len(metas)].tolist())
            self._free_pinned.append((buffer, event))

    def _append(self, metas: list, values: list) -> None:
        append = self._metrics.append_metric
        for (step, now, index, _version), value in zip(metas, values):
            append(step, now, index, value)

    def _drain(self) -> None:
        """At close: stage what is held and publish everything staged. The run is over, so this
        one place waits for the device's copies."""
        if self._metrics is None:
            return
        if self._pending:
            self._flush(time.time())
        self._publish_staged(wait=True)

    def _drop_stale(self, count: int) -> None:
        self.dropped_metrics += count
        if not self._warned_stale:
            self._warned_stale = True
            warnings.warn(
                "tensorgate: a logged tensor was changed in place before it was read, so its "
                "value was dropped; log a copy (t.clone() or t.detach().clone()) of tensors the "
                "loop keeps changing",
                stacklevel=4,
            )


def _host_value(value: object) -> float:
    """A host tensor, numpy value or bool as a float (the mean when it has several elements)."""
    if hasattr(value, "detach"):  # a CPU tensor; detached, as a loss that needs grad warns
        value = value.detach()
        return float(value) if value.numel() == 1 else float(value.float().mean())
    mean = getattr(value, "mean", None)  # numpy arrays and scalars
    return float(mean()) if mean is not None and getattr(value, "size", 1) != 1 else float(value)


def attach(
    name: str,
    hparams: Mapping[str, float | int | bool],
    spec: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    on_checkpoint: Callable[[int], object] | None = None,
    scheduler: str = "override",
    runs_dir: str | None = None,
    sync_every: int = 10,
    ring_capacity: int = DEFAULT_RING_CAPACITY,
    log_every: int = 1,
) -> Run:
    """Declares a run and its hyperparameters and opens its run file.

    ``spec`` maps a hyperparameter to ``{"type": "float"|"int"|"bool", "min": x, "max": y}``
    (type defaults to that of the initial value). ``on_checkpoint(step)`` saves a checkpoint and
    may return its path. ``log_every=N`` publishes the metrics of every N-th step only (steps
    where ``step % N == 0``); ``log`` returns at once on the others. When the run file cannot be
    made (no shared memory, a full /dev/shm), training goes on detached, with a warning: ``log``
    and ``apply`` then do nothing.
    """
    if not _NAME.match(name):
        raise ValueError(f"run name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    if scheduler not in ("override", "scale"):
        raise ValueError("scheduler must be 'override' or 'scale'")
    if sync_every < 1:
        raise ValueError("sync_every must be at least 1")
    if not isinstance(log_every, int) or log_every < 1:
        raise ValueError("log_every must be a whole number of at least 1")
    spec = spec or {}
    unknown = set(spec) - set(hparams)
    if unknown:
        raise ValueError(f"spec names unknown hyperparameters: {sorted(unknown)}")
    specs = [_Spec(key, value, spec.get(key, {})) for key, value in hparams.items()]

    dist = _distributed()
    rank, world, group = 0, 1, None
    if dist is not None:
        rank, world = dist.get_rank(), dist.get_world_size()
        # One-time set-up collectives: the gloo group for the agreement, and the file's path.
        group = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else None
    path = None
    if rank == 0:
        path = _create(
            name, specs, world, sync_every, scheduler, on_checkpoint, runs_dir, ring_capacity
        )
    file = path
    if dist is not None:
        box = [path.path if path is not None else None]
        dist.broadcast_object_list(box, src=0, group=group)
        file = path if rank == 0 else _open(box[0])
        # Every rank attached, or none: a detached rank would skip the agreement all-reduces.
        torch = sys.modules["torch"]
        attached = torch.tensor([0 if file is None else 1], dtype=torch.int64)
        dist.all_reduce(attached, op=dist.ReduceOp.MIN, group=group)
        if file is not None and int(attached[0]) == 0:
            file.close()
            file = None
    return Run(
        name, specs, on_checkpoint, scheduler, file, rank, dist, group, sync_every, log_every
    )


def _create(
    name: str,
    specs: list[_Spec],
    world: int,
    sync_every: int,
    scheduler: str,
    on_checkpoint: object,
    runs_dir: str | None,
    ring_capacity: int,
) -> RunFile | None:
    directory = runs_dir or default_runs_dir()
    pid = os.getpid()
    run_id = f"{name}-{pid}-{secrets.token_hex(3)}"
    torch = sys.modules.get("torch")
    declaration = {
        "run_id": run_id,
        "name": name,
        "pid": pid,
        "start_time": process_start_time(pid),
        "host": socket.gethostname(),
        "started_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "world_size": world,
        "sync_every": sync_every,
        "scheduler": scheduler,
        "checkpoint": on_checkpoint is not None,
        "hparams": [s.declaration() for s in specs],
        "sdk": __version__,
        "torch": getattr(torch, "__version__", None),
    }
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        return RunFile.create(
            os.path.join(directory, f"{run_id}.tgrun"),
            declaration,
            [s.initial for s in specs],
            ring_capacity,
        )
    except (OSError, ValueError) as exc:
        warnings.warn(f"tensorgate: run {name!r} goes on detached: {exc}", stacklevel=3)
        return None


def _open(path: str | None) -> RunFile | None:
    if path is None:
        return None
    try:
        return RunFile.open(path)
    except (OSError, ValueError) as exc:
        warnings.warn(f"tensorgate: this rank goes on detached: {exc}", stacklevel=3)
        return None
