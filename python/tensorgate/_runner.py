"""Running the loaded model: device transfer, precision, the forward pass and naming its outputs.

Everything runs under ``torch.inference_mode()`` (no autograd bookkeeping at all). On CUDA each
stage ends with a synchronise, because kernels are asynchronous and a stage timed without one
would report launch time, not work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import torch

from ._errors import INFERENCE_FAILED, WorkerError
from ._loader import ModelSpec, TensorSpec
from ._variants import Variant, VariantOptions, Variants

Named = list[tuple[TensorSpec, torch.Tensor]]


def name_outputs(result: Any, specs: Sequence[TensorSpec]) -> Named:
    """Pairs what the model returned (a tensor, tuple/list or dict) with the declared outputs."""
    if isinstance(result, torch.Tensor):
        tensors = [result]
    elif isinstance(result, dict):
        missing = [s.name for s in specs if s.name not in result]
        if missing:
            raise WorkerError(
                INFERENCE_FAILED,
                f"the model returned keys {sorted(result)} but not the declared outputs {missing}",
            )
        tensors = [result[s.name] for s in specs]
    elif isinstance(result, (tuple, list)):
        tensors = list(result)
    else:
        raise WorkerError(INFERENCE_FAILED, f"the model returned a {type(result).__name__}")
    if len(tensors) != len(specs):
        raise WorkerError(
            INFERENCE_FAILED,
            f"the model returned {len(tensors)} outputs but the config declares {len(specs)}",
        )
    for spec, tensor in zip(specs, tensors):
        if not isinstance(tensor, torch.Tensor):
            raise WorkerError(
                INFERENCE_FAILED, f"output {spec.name!r} is a {type(tensor).__name__}, not a tensor"
            )
    return list(zip(specs, tensors))


class Runner:
    """One loaded model on one device."""

    def __init__(self, model: torch.nn.Module, spec: ModelSpec, device: torch.device) -> None:
        self.model = model
        self.spec = spec
        self.device = device
        self.variants: Variants | None = None

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def build_variants(self, options: VariantOptions) -> Variants:
        """Builds and checks the variants the config asks for (see _variants.py) and warms them."""
        self.variants = Variants(self.model, self.spec, self.device, options, self.forward)
        for variant in self.variants.by_precision.values():
            if variant.ready and (variant.module is not self.model or variant.autocast is not None):
                self.warmup(self.spec.warmup_runs, variant)
        return self.variants

    def to_device(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Inputs on the model's device (a no-op on CPU: the arena views are used as they are)."""
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
        context = variant.context(self.device.type) if variant is not None else nullcontext()
        try:
            with torch.inference_mode(), context:
                result = module(*inputs)
            self.sync()
        except WorkerError:
            raise
        except Exception as exc:
            raise WorkerError(INFERENCE_FAILED, str(exc) or type(exc).__name__) from exc
        return name_outputs(result, self.spec.outputs)

    def run(self, variant: Variant, inputs: list[torch.Tensor]) -> Named:
        """A request's forward pass on the variant its precision picked."""
        return self.forward(variant.module or self.model, inputs, variant)

    def warmup(self, runs: int, variant: Variant | None = None) -> float:
        """Runs the model on zeros of the declared shapes (-1 -> 1); returns the milliseconds.

        The first calls pay for lazy initialisation (TorchScript profiling, allocator growth,
        oneDNN primitive creation), so that cost lands here and not on the first request.
        """
        start = time.perf_counter()
        for _ in range(runs):
            zeros = [
                torch.zeros(
                    [1 if d == -1 else d for d in s.shape], dtype=s.dtype, device=self.device
                )
                for s in self.spec.inputs
            ]
            self.forward(variant.module or self.model if variant else self.model, zeros, variant)
        return (time.perf_counter() - start) * 1000.0
