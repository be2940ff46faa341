"""The variants of one loaded model: how each precision runs it, built at load and checked.

A request's ``precision`` picks a variant:

- ``fp32`` runs the model as loaded, or as the config's ``optimization.torch`` makes it
  (TorchScript ``freeze`` or ``optimize_for_inference``, or ``torch.compile``);
- ``bf16`` and ``fp16`` run the plain model under ``torch.autocast``;
- ``int8`` runs a dynamically quantized copy (Linear, LSTM and GRU weights as int8, activations
  quantized per batch): ``quantize_dynamic`` for eager modules, ``quantize_dynamic_jit`` for
  TorchScript.

Every variant other than plain fp32 is checked when it is built: it runs on seeded inputs of the
declared specs, and each output is compared with plain fp32's element by element,
``|variant - fp32| <= tolerance * (1 + |fp32|)`` (the rule ``tensorgate export-onnx`` applies).
One outside its tolerance is ``rejected``; one this torch or device cannot build is
``unavailable``. Either way the reason is kept and the other variants serve.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._errors import BAD_PARAMETER, WorkerError
from ._loader import ModelSpec, TensorSpec

AUTOCAST: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}
INT8_METHOD = "dynamic quantization (int8 weights of Linear, LSTM, GRU)"
METHODS = {"bf16": "autocast bf16", "fp16": "autocast fp16", "int8": INT8_METHOD}
PRECISIONS = ("fp32", "bf16", "fp16", "int8")
TORCH_OPTIMIZATIONS = ("none", "freeze", "optimize_for_inference", "compile")

#: Defaults of ``validation.tolerance`` in config.json, per precision.
DEFAULT_TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 1e-2, "int8": 5e-2}

#: Rows given to each -1 dimension of the check's inputs: more than one, so batching code runs.
CHECK_ROWS = 2

VARIANT_UNAVAILABLE = "VARIANT_UNAVAILABLE"

_autocast_ok: dict[tuple[str, torch.dtype], bool] = {}


def autocast_supported(device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``torch.autocast`` really runs ``dtype`` on ``device_type``.

    torch only says so by warning and disabling itself (1.13: CPU autocast is bfloat16 only) or by
    raising, so we try it once per pair and remember.
    """
    key = (device_type, dtype)
    if key not in _autocast_ok:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with torch.autocast(device_type=device_type, dtype=dtype):
                    pass
            _autocast_ok[key] = True
        except (RuntimeError, UserWarning, AssertionError):
            _autocast_ok[key] = False
    return _autocast_ok[key]


@dataclass
class VariantOptions:
    """The ``variants`` object of a ``load`` request (from config.json)."""

    precisions: list[str]
    torch_optimization: str
    tolerance: dict[str, float]

    @classmethod
    def from_json(cls, raw: object) -> VariantOptions:
        raw = raw if isinstance(raw, dict) else {}
        precisions = [str(p) for p in raw.get("precisions") or ["fp32"]]
        unknown = [p for p in precisions if p not in PRECISIONS]
        optimization = str(raw.get("torch_optimization") or "none")
        if unknown or optimization not in TORCH_OPTIMIZATIONS:
            raise WorkerError(
                BAD_PARAMETER,
                f"variants: precisions must be among {list(PRECISIONS)} and torch_optimization "
                f"among {list(TORCH_OPTIMIZATIONS)}; got {precisions}, {optimization!r}",
            )
        tolerance = {
            **DEFAULT_TOLERANCE,
            **{k: float(v) for k, v in (raw.get("tolerance") or {}).items()},
        }
        return cls(["fp32", *[p for p in precisions if p != "fp32"]], optimization, tolerance)


@dataclass
class Variant:
    """One way of running the model, and what its check found."""

    precision: str
    method: str
    module: Callable[..., Any] | None = None
    autocast: torch.dtype | None = None
    state: str = "ready"
    reason: str | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    tolerance: float | None = None
    output: str | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def context(self, device_type: str) -> contextlib.AbstractContextManager[Any]:
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=self.autocast)

    def report(self) -> dict[str, Any]:
        """What the gateway shows of it (describe_model)."""
        out: dict[str, Any] = {
            "precision": self.precision,
            "method": self.method,
            "state": self.state,
        }
        for key in ("reason", "max_abs", "max_rel", "tolerance", "output"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


def check_inputs(spec: ModelSpec, device: torch.device) -> list[torch.Tensor]:
    """Seeded inputs of the declared specs: floats in [0, 1), integers 0 or 1, random bools."""
    generator = torch.Generator().manual_seed(0)
    tensors = []
    for s in spec.inputs:
        shape = [CHECK_ROWS if d == -1 else d for d in s.shape]
        if s.dtype.is_floating_point:
            t = torch.rand(shape, generator=generator).to(s.dtype)
        elif s.dtype == torch.bool:
            t = torch.rand(shape, generator=generator) < 0.5
        else:
            t = torch.randint(0, 2, shape, generator=generator).to(s.dtype)
        tensors.append(t.to(device))
    return tensors


def compare(
    got: list[tuple[TensorSpec, torch.Tensor]],
    expected: list[tuple[TensorSpec, torch.Tensor]],
    tolerance: float,
) -> tuple[float, float, str, bool]:
    """Largest absolute and relative error over all outputs, the worst output's name, and within."""
    max_abs = max_rel = 0.0
    worst = ""
    within = True
    for (spec, a), (_, e) in zip(got, expected):
        a64 = a.detach().to("cpu", torch.float64)
        e64 = e.detach().to("cpu", torch.float64)
        if a64.shape != e64.shape:
            return float("inf"), float("inf"), spec.name, False
        diff = (a64 - e64).abs()
        scale = e64.abs()
        if diff.numel() == 0:
            continue
        out_abs = float(diff.max())
        out_rel = float(torch.where(scale > 0, diff / scale.clamp_min(1e-300), diff).max())
        if out_abs >= max_abs:
            worst = spec.name
        max_abs, max_rel = max(max_abs, out_abs), max(max_rel, out_rel)
        if not bool((diff <= tolerance * (1 + scale)).all()):
            within = False
    return max_abs, max_rel, worst, within


class Variants:
    """Builds a loaded model's variants, checks them, and hands out the one a request names."""

    def __init__(
        self,
        model: torch.nn.Module,
        spec: ModelSpec,
        device: torch.device,
        options: VariantOptions,
        run: Callable[
            [Callable[..., Any], list[torch.Tensor], Variant], list[tuple[TensorSpec, torch.Tensor]]
        ],
    ) -> None:
        self.model = model
        self.spec = spec
        self.device = device
        self.options = options
        self._run = run
        self.by_precision: dict[str, Variant] = {}
        inputs = check_inputs(spec, device)
        plain = Variant("fp32", "plain", module=model)
        self.reference = run(model, inputs, plain)
        self.by_precision["fp32"] = self._fp32(inputs, plain)
        for precision in options.precisions:
            if precision != "fp32":
                self.by_precision[precision] = self._checked(precision, inputs)

    def get(self, precision: object) -> Variant:
        """The variant serving ``precision``; BAD_PARAMETER or VARIANT_UNAVAILABLE saying why."""
        variant = self.by_precision.get(precision)  # type: ignore[arg-type]
        if variant is None:
            offered = list(self.by_precision)
            raise WorkerError(
                BAD_PARAMETER,
                f"{self.spec.name} does not offer precision {precision!r}; it offers {offered}",
            )
        if not variant.ready:
            raise WorkerError(
                VARIANT_UNAVAILABLE,
                f"{self.spec.name} v{self.spec.version} precision {variant.precision} "
                f"({variant.method}) is {variant.state}: {variant.reason}",
            )
        return variant

    def reports(self) -> list[dict[str, Any]]:
        return [v.report() for v in self.by_precision.values()]

    def _fp32(self, inputs: list[torch.Tensor], plain: Variant) -> Variant:
        """fp32 as the config optimizes it; plain, with the reason, when that fails its check."""
        how = self.options.torch_optimization
        if how == "none":
            return plain
        variant = self._checked("fp32", inputs, method=how)
        if variant.ready:
            return variant
        plain.reason = f"{how} was not used: it is {variant.state} ({variant.reason})"
        return plain

    def _checked(
        self, precision: str, inputs: list[torch.Tensor], method: str | None = None
    ) -> Variant:
        tolerance = self.options.tolerance[precision]
        method = method or METHODS[precision]
        try:
            variant = self._build(precision, method)
        except WorkerError as exc:
            return Variant(precision, method, state="unavailable", reason=exc.message)
        except Exception as exc:  # a torch transform that fails says why in its message
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return Variant(precision, method, state="unavailable", reason=reason)
        try:
            got = self._run(variant.module, inputs, variant)  # type: ignore[arg-type]
        except WorkerError as exc:
            variant.state, variant.reason = (
                "unavailable",
                f"it fails on the check inputs: {exc.message}",
            )
            return variant
        max_abs, max_rel, worst, within = compare(got, self.reference, tolerance)
        variant.max_abs, variant.max_rel, variant.tolerance = max_abs, max_rel, tolerance
        variant.output = worst or None
        if not within:
            variant.state = "rejected"
            variant.reason = (
                f'output "{worst}" is off from fp32 by up to {max_abs:.3g} '
                f"(relative {max_rel:.3g}), past the tolerance {tolerance:g}"
            )
        return variant

    def _build(self, precision: str, method: str) -> Variant:
        if precision in AUTOCAST:
            dtype = AUTOCAST[precision]
            if not autocast_supported(self.device.type, dtype):
                raise WorkerError(
                    VARIANT_UNAVAILABLE,
                    f"torch {torch.__version__} cannot run {precision} on {self.device.type}",
                )
            return Variant(precision, METHODS[precision], module=self.model, autocast=dtype)
        if precision == "int8":
            return Variant(
                "int8",
                "dynamic quantization (int8 weights of Linear, LSTM, GRU)",
                module=self._int8(),
            )
        return Variant("fp32", method, module=self._optimized(method))

    def _int8(self) -> torch.nn.Module:
        if self.device.type != "cpu":
            raise WorkerError(
                VARIANT_UNAVAILABLE,
                f"dynamic quantization runs on CPU only; this model is on {self.device}",
            )
        from torch.ao import quantization as q

        if isinstance(self.model, torch.jit.ScriptModule):
            with warnings.catch_warnings():
                # torch 1.13's copy of the module reads .grad of non-leaf tensors and says so.
                warnings.filterwarnings("ignore", message="The .grad attribute of a Tensor")
                quantized = q.quantize_dynamic_jit(self.model, {"": q.default_dynamic_qconfig})
            found = "quantized::" in str(quantized.graph) or "quantized::" in str(
                quantized.inlined_graph
            )
        else:
            quantized = q.quantize_dynamic(
                self.model, {torch.nn.Linear, torch.nn.LSTM, torch.nn.GRU}, dtype=torch.qint8
            )
            found = any(
                type(m).__module__.startswith("torch.ao.nn.quantized") for m in quantized.modules()
            )
        if not found:
            raise WorkerError(
                VARIANT_UNAVAILABLE,
                "the model has no Linear, LSTM or GRU layer to quantize; int8 would be fp32",
            )
        return quantized

    def _optimized(self, method: str) -> Callable[..., Any]:
        if method == "compile":
            if not hasattr(torch, "compile"):
                raise WorkerError(
                    VARIANT_UNAVAILABLE,
                    f"torch {torch.__version__} has no torch.compile (it came with torch 2.0)",
                )
            return torch.compile(self.model)  # type: ignore[attr-defined]
        if not isinstance(self.model, torch.jit.ScriptModule):
            raise WorkerError(
                VARIANT_UNAVAILABLE,
                f"{method} needs a TorchScript model; "
                f"version {self.spec.version} is {self.spec.format}",
            )
        frozen = torch.jit.freeze(self.model.eval())
        return (
            torch.jit.optimize_for_inference(frozen)
            if method == "optimize_for_inference"
            else frozen
        )


__all__ = [
    "PRECISIONS",
    "VARIANT_UNAVAILABLE",
    "Variant",
    "VariantOptions",
    "Variants",
]
