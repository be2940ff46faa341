"""Running the loaded model: device transfer, precision, the forward pass and naming its outputs.

Everything runs under ``torch.inference_mode()`` (no autograd bookkeeping at all).

On CUDA, kernels and copies are asynchronous: a stage timed on the host's clock without a
synchronise would report launch time, not work. A request's stages are therefore timed on the
device, by CUDA events recorded on the stream between them (:class:`DeviceStages`), and the host
waits once per request, for the output copies (:meth:`Runner.finish`). The forward pass's kernels
are launched while the input copy is still on its way and the output copies are queued behind the
forward pass, rather than each stage waiting for the one before it. Warm-up runs and variant checks
still synchronise after each forward pass (:meth:`Runner.forward`).
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
    """A CUDA request's stage boundaries, as events on the device's stream.

    ``record(i)`` marks boundary i (0: before the input copy, 1: after it, 2: after the forward
    pass, 3: after the output copies); once boundary 3 is reached, ``ms(a, b)`` is the device
    time between two boundaries. Four events, made once and recorded again for every request:
    the host waits for the last before it answers, so none is still pending when it is reused.

    The events go on the current stream of the model's device, where its copies and kernels run,
    which need not be the process's current device (a model on ``cuda:1``).
    """

    BEFORE_INPUTS, INPUTS_READY, COMPUTED, OUTPUTS_COPIED = range(4)

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.current_stream(device)
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]

    def record(self, boundary: int) -> None:
        self.events[boundary].record(self.stream)

    def wait(self, boundary: int) -> None:
        self.events[boundary].synchronize()

    def ms(self, start: int, end: int) -> float:
        return round(float(self.events[start].elapsed_time(self.events[end])), 3)


class Runner:
    """One loaded model on one device."""

    def __init__(self, loaded: LoadedModel, spec: ModelSpec) -> None:
        self.loaded = loaded
        self.model = loaded.module
        self.spec = spec
        self.device = loaded.device
        self.variants: Variants | None = None
        #: The model's inputs in the order it takes them.
        self.input_names = [s.name for s in spec.inputs]
        #: Stage timing on the device's clock; None on CPU, where work is done when a call returns.
        self.stages = DeviceStages(self.device) if self.device.type == "cuda" else None

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def drain(self) -> None:
        """Waits out whatever a failed request left queued on the device, so that an asynchronous
        error of its own is not reported by the next request; a failure here is not re-raised
        (the request is already failing)."""
        with contextlib.suppress(Exception):
            self.sync()

    def finish(self) -> None:
        """Waits, once per request, for everything it queued on the device (the input copy, the
        forward pass, the output copies). An asynchronous CUDA error raised by any of them
        surfaces here, and is the request's INFERENCE_FAILED."""
        if self.stages is not None:
            self.stages.record(DeviceStages.OUTPUTS_COPIED)
            self._wait(DeviceStages.OUTPUTS_COPIED)

    def device_timings(self, timings: dict[str, Any]) -> None:
        """On CUDA, replaces the host's ``h2d_ms``, ``compute_ms`` and ``d2h_ms`` with the device's
        times between the request's boundaries (valid after :meth:`finish`)."""
        stages = self.stages
        if stages is None:
            return
        timings["h2d_ms"] = stages.ms(DeviceStages.BEFORE_INPUTS, DeviceStages.INPUTS_READY)
        timings["compute_ms"] = stages.ms(DeviceStages.INPUTS_READY, DeviceStages.COMPUTED)
        timings["d2h_ms"] = stages.ms(DeviceStages.COMPUTED, DeviceStages.OUTPUTS_COPIED)

    def wait_computed(self) -> None:
        """Waits for the forward pass (CUDA only), before host code that reads the outputs
        (postprocessing), so that its time is not the forward pass's tail."""
        if self.stages is not None:
            self._wait(DeviceStages.COMPUTED)

    def _wait(self, boundary: int) -> None:
        try:
            self.stages.wait(boundary)  # type: ignore[union-attr]
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

    def to_device(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Inputs on the model's device (a no-op on CPU: the arena views are used as they are).

        On CUDA the copies are only queued: from the page-locked arena they run while the host
        goes on to launch the forward pass, which the stream orders behind them. The arena slots
        stay the request's until it is answered, after :meth:`finish`.
        """
        stages = self.stages
        if stages is None:
            return tensors
        stages.record(DeviceStages.BEFORE_INPUTS)
        moved = [t.to(self.device, non_blocking=True) for t in tensors]
        stages.record(DeviceStages.INPUTS_READY)
        return moved

    def forward(
        self,
        module: Callable[..., Any],
        inputs: list[torch.Tensor],
        variant: Variant | None = None,
        *,
        synchronise: bool = True,
    ) -> Named:
        """The forward pass of one variant; model errors become INFERENCE_FAILED.

        ``synchronise=False`` (a request's pass) only launches it on CUDA, marking its end on the
        stream; the request waits for it with its output copies (:meth:`finish`).
        """
        autocast = variant.autocast if variant is not None else None
        try:
            with torch.inference_mode():
                if autocast is None:
                    result = module(*inputs)
                else:
                    with torch.autocast(device_type=self.device.type, dtype=autocast):
                        result = module(*inputs)
            if synchronise:
                self.sync()
            elif self.stages is not None:
                self.stages.record(DeviceStages.COMPUTED)
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

    def run(self, variant: Variant, inputs: list[torch.Tensor]) -> Named:
        """A request's forward pass on the variant its precision picked, launched (on CUDA the
        request waits for it in :meth:`finish`)."""
        return self.forward(self.module_of(variant), inputs, variant, synchronise=False)

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
