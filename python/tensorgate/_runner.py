"""Running the loaded model: device transfer, precision, the forward pass and naming its outputs.

Everything runs under ``torch.inference_mode()`` (no autograd bookkeeping at all).

On CUDA, kernels and copies are asynchronous: a stage timed on the host's clock without a
synchronise would report launch time, not work. A request's stages are therefore timed on the
device, by CUDA events recorded on the streams between them (:class:`DeviceStages`), and the host
waits once per request, for its output copies (:meth:`Runner.finish`). Its input copies run on a
stream of their own, so that they overlap the forward pass of the request before it when the
worker has started this one early (pipelining, _worker.py); the forward pass waits for them on
the device, not on the host, and its output copies are queued behind it. Warm-up runs and
variant checks still synchronise after each forward pass (:meth:`Runner.forward`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import torch

from ._errors import INFERENCE_FAILED, WorkerError
from ._loader import LoadedModel, ModelSpec
from ._outputs import Named, name_outputs
from ._variants import Variant, VariantOptions, Variants

__all__ = ["DeviceStages", "Named", "Runner", "name_outputs"]


class DeviceStages:
    """One CUDA request's stage boundaries, as events on the streams its work runs on.

    0 and 1 enclose the input copies, on the copy stream; 2 is where the forward pass may start
    on the compute stream (its inputs copied and the pass before it done), 3 where it ends, and 4
    where the output copies behind it end. Once boundary 4 is reached, ``ms(a, b)`` is the device
    time between two boundaries. A set is taken for each request and given back when it is
    answered (:meth:`Runner.stages_for_request`), so a request begun while another is in flight
    never records over that one's events.
    """

    BEFORE_INPUTS, INPUTS_READY, COMPUTE_STARTS, COMPUTED, OUTPUTS_COPIED = range(5)

    def __init__(self) -> None:
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
        self.in_use = False

    def record(self, boundary: int, stream: torch.cuda.Stream) -> None:
        self.events[boundary].record(stream)

    def wait(self, boundary: int) -> None:
        self.events[boundary].synchronize()

    def ms(self, start: int, end: int) -> float:
        return round(float(self.events[start].elapsed_time(self.events[end])), 3)


class Runner:
    """One loaded model on one device."""

    def __init__(self, loaded: LoadedModel, spec: ModelSpec) -> None:
        self.loaded = loaded
        #: What a request's forward pass calls (the direct forward of an exported program).
        self.model = loaded.call
        self.spec = spec
        self.device = loaded.device
        self.variants: Variants | None = None
        #: The model's inputs in the order it takes them.
        self.input_names = [s.name for s in spec.inputs]
        if self.device.type == "cuda":
            # The streams of the model's device, which need not be the process's current one.
            self.compute_stream = torch.cuda.current_stream(self.device)
            self.copy_stream = torch.cuda.Stream(self.device)
        self._idle_stages: list[DeviceStages] = []

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def drain(self) -> None:
        """Waits out whatever a failed request left queued on the device, so that an asynchronous
        error of its own is not reported by the next request, and no copy of its lands in an arena
        slot after the slot is freed; a failure here is not re-raised (the request is already
        failing)."""
        with contextlib.suppress(Exception):
            self.sync()

    def stages_for_request(self) -> DeviceStages | None:
        """A free set of stage events for a request (None on CPU, where a request's work is done
        when each call returns and the host's clock times it)."""
        if self.device.type != "cuda":
            return None
        stages = self._idle_stages.pop() if self._idle_stages else DeviceStages()
        stages.in_use = True
        return stages

    def abandon(self, stages: DeviceStages | None) -> None:
        """A request that failed before its answer: its queued work waited out, its events freed."""
        self.drain()
        self._give_back(stages)

    def _give_back(self, stages: DeviceStages | None) -> None:
        if stages is not None and stages.in_use:
            stages.in_use = False
            self._idle_stages.append(stages)

    def outputs_queued(self, stages: DeviceStages | None) -> None:
        """Marks the end of a request's work on the device, right behind its output copies: a
        request begun after it queues its own work behind this mark, not before it."""
        if stages is not None:
            stages.record(DeviceStages.OUTPUTS_COPIED, self.compute_stream)

    def finish(self, stages: DeviceStages | None, timings: dict[str, Any]) -> None:
        """Waits, once per request, for everything it queued on the device (the input copies, the
        forward pass, the output copies, up to :meth:`outputs_queued`), and puts the device's
        stage times in ``timings`` (``h2d_ms``, ``compute_ms``, ``d2h_ms``, in place of the
        host's). An asynchronous CUDA error raised by any of that work surfaces here, and is the
        request's INFERENCE_FAILED."""
        if stages is None:
            return
        try:
            self._wait(stages, DeviceStages.OUTPUTS_COPIED)
            timings["h2d_ms"] = stages.ms(DeviceStages.BEFORE_INPUTS, DeviceStages.INPUTS_READY)
            timings["compute_ms"] = stages.ms(DeviceStages.COMPUTE_STARTS, DeviceStages.COMPUTED)
            timings["d2h_ms"] = stages.ms(DeviceStages.COMPUTED, DeviceStages.OUTPUTS_COPIED)
        finally:
            self._give_back(stages)

    def wait_computed(self, stages: DeviceStages | None) -> None:
        """Waits for the forward pass (CUDA only), before host code that reads the outputs
        (postprocessing), so that its time is not the forward pass's tail."""
        if stages is not None:
            self._wait(stages, DeviceStages.COMPUTED)

    @staticmethod
    def _wait(stages: DeviceStages, boundary: int) -> None:
        try:
            stages.wait(boundary)
        except Exception as exc:
            raise WorkerError(INFERENCE_FAILED, str(exc) or type(exc).__name__) from exc

    def build_variants(self, options: VariantOptions) -> Variants:
        """Builds, checks and warms the variants the config asks for (see _variants.py)."""
        self.variants = Variants(self.loaded, self.spec, options, self.forward, self._warm)
        return self.variants

    def _warm(self, variant: Variant) -> None:
        """Warms a variant that runs other code than the plain model, at every batch size a
        compiled one will see: torch.compile specialises on sizes (1 apart, then dynamic) and
        its CUDA graphs (reduce-overhead) are recorded per size."""
        if variant.module is self.model and variant.autocast is None:
            return
        runs = max(1, self.spec.warmup_runs)
        sizes = [1]
        compiled = variant.method.startswith("torch.compile")
        if compiled and self.spec.batched and self.spec.max_batch_size > 1:
            cudagraphs = "reduce-overhead" in variant.method and self.device.type == "cuda"
            limit = self.spec.max_batch_size
            wanted = range(1, limit + 1) if cudagraphs else [1, 2, limit]
            sizes = sorted({*wanted, *[n for n in self.spec.preferred_batch_sizes if n <= limit]})
            runs = max(runs, 3) if cudagraphs else runs
        for rows in sizes:
            self.warmup(runs, variant, rows)

    def to_device(
        self, tensors: list[torch.Tensor], stages: DeviceStages | None
    ) -> list[torch.Tensor]:
        """A request's inputs on the model's device (a no-op on CPU: the arena views are used as
        they are).

        On CUDA the copies are only queued, on the copy stream: from the page-locked arena they
        run while the host goes on to launch the forward pass, and while the device still runs the
        pass of a request begun before this one. The compute stream waits for them on the device.
        The arena slots stay the request's until it is answered, after :meth:`finish`.
        """
        if stages is None:
            return tensors
        copy, compute = self.copy_stream, self.compute_stream
        with torch.cuda.stream(copy):
            stages.record(DeviceStages.BEFORE_INPUTS, copy)
            moved = [t.to(self.device, non_blocking=True) for t in tensors]
            stages.record(DeviceStages.INPUTS_READY, copy)
        compute.wait_event(stages.events[DeviceStages.INPUTS_READY])
        for tensor in moved:
            # Made on the copy stream, read on the compute stream: the caching allocator must
            # not hand the memory out again before the compute stream is done with it.
            tensor.record_stream(compute)
        stages.record(DeviceStages.COMPUTE_STARTS, compute)
        return moved

    def forward(
        self,
        module: Callable[..., Any],
        inputs: list[torch.Tensor],
        variant: Variant | None = None,
        stages: DeviceStages | None = None,
    ) -> Named:
        """The forward pass of one variant; model errors become INFERENCE_FAILED.

        Without ``stages`` (warm-up, variant checks) it is synchronised. With them (a request's
        pass on CUDA) it is only launched, its end marked on the compute stream; the request waits
        for it with its output copies (:meth:`finish`).
        """
        autocast = variant.autocast if variant is not None else None
        try:
            with torch.inference_mode():
                if autocast is None:
                    result = module(*inputs)
                else:
                    with torch.autocast(device_type=self.device.type, dtype=autocast):
                        result = module(*inputs)
            if stages is None:
                self.sync()
            else:
                stages.record(DeviceStages.COMPUTED, self.compute_stream)
        except WorkerError:
            self.drain()
            raise
        except Exception as exc:
            self.drain()
            raise WorkerError(INFERENCE_FAILED, str(exc) or type(exc).__name__) from exc
        return name_outputs(result, self.spec.outputs)

    def module_of(self, variant: Variant | None) -> Callable[..., Any]:
        # Not `variant.module or self.model`: truth-testing a module calls len() on containers,
        # which compiled and scripted modules refuse.
        if variant is None or variant.module is None:
            return self.model
        return variant.module

    def run(
        self, variant: Variant, inputs: list[torch.Tensor], stages: DeviceStages | None = None
    ) -> Named:
        """A request's forward pass on the variant its precision picked: with ``stages`` (CUDA)
        only launched, the request waiting for it in :meth:`finish`; synchronised without."""
        return self.forward(self.module_of(variant), inputs, variant, stages)

    def warmup(self, runs: int, variant: Variant | None = None, rows: int = 1) -> float:
        """Runs the model on zeros of the declared shapes (-1 -> ``rows`` for the first
        dimension, 1 for others); returns the milliseconds.

        The first calls pay for lazy initialisation (allocator growth, oneDNN primitive creation,
        compilation), so that cost lands here and not on the first request.
        """
        start = time.perf_counter()
        module = self.module_of(variant)
        for _ in range(runs):
            zeros = [
                torch.zeros(
                    [
                        (rows if axis == 0 else 1) if d == -1 else d
                        for axis, d in enumerate(s.shape)
                    ],
                    dtype=s.dtype,
                    device=self.device,
                )
                for s in self.spec.inputs
            ]
            self.forward(module, zeros, variant)
        return (time.perf_counter() - start) * 1000.0
