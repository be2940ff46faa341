"""Running the loaded model: device transfer, precision, the forward pass and naming its outputs.

Everything runs under ``torch.inference_mode()`` (no autograd bookkeeping at all). On CUDA each
stage ends with a synchronise, because kernels are asynchronous and a stage timed without one
would report launch time, not work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from ._errors import INFERENCE_FAILED, WorkerError
from ._loader import LoadedModel, ModelSpec
from ._outputs import Named, name_outputs
from ._variants import Variant, VariantOptions, Variants

__all__ = ["Named", "Runner", "name_outputs"]


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

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

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
        """Inputs on the model's device (a no-op on CPU: the arena views are used as they are)."""
        if self.device.type == "cpu":
            return tensors
        moved = [t.to(self.device, non_blocking=True) for t in tensors]
        self.sync()
        return moved

    def forward(
        self,
        module: Callable[..., Any],
        inputs: list[torch.Tensor],
        variant: Variant | None = None,
    ) -> Named:
        """The forward pass of one variant, synchronised; model errors become INFERENCE_FAILED."""
        autocast = variant.autocast if variant is not None else None
        try:
            with torch.inference_mode():
                if autocast is None:
                    result = module(*inputs)
                else:
                    with torch.autocast(device_type=self.device.type, dtype=autocast):
                        result = module(*inputs)
            self.sync()
        except WorkerError:
            raise
        except Exception as exc:
            raise WorkerError(INFERENCE_FAILED, str(exc) or type(exc).__name__) from exc
        return name_outputs(result, self.spec.outputs)

    def module_of(self, variant: Variant | None) -> Callable[..., Any]:
        # Not `variant.module or self.model`: truth-testing a module calls len() on containers,
        # which compiled and scripted modules refuse.
        if variant is None or variant.module is None:
            return self.model
        return variant.module

    def run(self, variant: Variant, inputs: list[torch.Tensor]) -> Named:
        """A request's forward pass on the variant its precision picked."""
        return self.forward(self.module_of(variant), inputs, variant)

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
