"""The variants of one loaded model: how each precision runs it, built at load and checked.

A request's ``precision`` picks a variant:

- ``fp32`` runs the model as loaded, or as the config's ``optimization.torch`` makes it:
  ``compile`` (``torch.compile`` in ``optimization.compile_mode``), ``aoti`` (an AOTInductor
  package compiled for the model's device, cached by torch version and device), or for
  TorchScript files ``freeze`` / ``optimize_for_inference``;
- ``bf16`` and ``fp16`` run the plain model under ``torch.autocast``;
- ``int8`` runs a dynamically quantized copy (Linear, LSTM and GRU weights as int8, activations
  quantized per batch): ``quantize_dynamic`` for eager modules, ``quantize_dynamic_jit`` for
  TorchScript.

Every variant other than plain fp32 is checked when it is built: it runs on seeded inputs of the
declared specs and each output is judged against plain fp32's by the rule for its kind
(``_accuracy.py``). One that changes the answers is ``rejected``; one this torch or device
cannot build, or that fails to run, is ``unavailable``. Either way the reason is kept, and the
other variants (plain fp32 at least) serve: a variant never takes its model down.
"""

from __future__ import annotations

import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ._accuracy import OutputCheck, check_outputs, worst
from ._errors import BAD_PARAMETER, WorkerError
from ._examples import example_inputs
from ._export import aoti_package, first_line
from ._loader import LoadedModel, ModelSpec, TensorSpec, load_aoti_package
from ._sealed import is_sealed

AUTOCAST: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}
INT8_METHOD = "dynamic quantization (int8 weights of Linear, LSTM, GRU)"
METHODS = {"bf16": "autocast bf16", "fp16": "autocast fp16", "int8": INT8_METHOD}
PRECISIONS = ("fp32", "bf16", "fp16", "int8")
TORCH_OPTIMIZATIONS = ("none", "freeze", "optimize_for_inference", "compile", "aoti")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")

#: Defaults of ``validation.tolerance`` in config.json, per precision (see _accuracy.py).
DEFAULT_TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 1e-2, "int8": 5e-2}
#: The fp32 default on CUDA. Convolutions there run in TF32 by default
#: (torch.backends.cudnn.allow_tf32), 10 bits of mantissa, and a compiled program picks other
#: kernels than eager: two correct fp32 programs of the demo ResNet differ by 1.4e-3 of the logits'
#: range on an H200, while a broken model is off by far more than 5e-3.
CUDA_FP32_TOLERANCE = 5e-3

#: Rows given to a dynamic first dimension of the check's inputs: several, so batching code runs
#: and a changed answer has rows to show in.
CHECK_ROWS = 4

VARIANT_UNAVAILABLE = "VARIANT_UNAVAILABLE"

_autocast_ok: dict[tuple[str, torch.dtype], bool] = {}


def autocast_supported(device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``torch.autocast`` really runs ``dtype`` on ``device_type``.

    torch only says so by warning and disabling itself or by raising, so we try it once per pair
    and remember.
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
    #: validation.tolerance as the config sets it; tolerance_for adds the defaults.
    tolerance: dict[str, float]
    compile_mode: str = "default"
    #: Where compiled packages are kept between loads (``serve --cache-dir``); None: not kept.
    cache_dir: str | None = None

    def tolerance_for(self, precision: str, device_type: str) -> float:
        if precision in self.tolerance:
            return self.tolerance[precision]
        if precision == "fp32" and device_type == "cuda":
            return CUDA_FP32_TOLERANCE
        return DEFAULT_TOLERANCE[precision]

    @classmethod
    def from_json(cls, raw: object) -> VariantOptions:
        raw = raw if isinstance(raw, dict) else {}
        precisions = [str(p) for p in raw.get("precisions") or ["fp32"]]
        unknown = [p for p in precisions if p not in PRECISIONS]
        optimization = str(raw.get("torch_optimization") or "none")
        mode = str(raw.get("compile_mode") or "default")
        if unknown or optimization not in TORCH_OPTIMIZATIONS or mode not in COMPILE_MODES:
            raise WorkerError(
                BAD_PARAMETER,
                f"variants: precisions must be among {list(PRECISIONS)}, torch_optimization "
                f"among {list(TORCH_OPTIMIZATIONS)} and compile_mode among "
                f"{list(COMPILE_MODES)}; got {precisions}, {optimization!r}, {mode!r}",
            )
        tolerance = {k: float(v) for k, v in (raw.get("tolerance") or {}).items()}
        cache_dir = raw.get("cache_dir")
        return cls(
            ["fp32", *[p for p in precisions if p != "fp32"]],
            optimization,
            tolerance,
            mode,
            str(cache_dir) if cache_dir else None,
        )


@dataclass
class Variant:
    """One way of running the model, and what its check found."""

    precision: str
    method: str
    module: Callable[..., Any] | None = None
    autocast: torch.dtype | None = None
    state: str = "ready"
    reason: str | None = None
    check: OutputCheck | None = None
    #: Milliseconds spent building it: transform or compile, check and warm-up.
    build_ms: float | None = None
    #: For compiled packages: whether it came from the cache.
    cached: bool | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def report(self) -> dict[str, Any]:
        """What the gateway shows of it (describe_model)."""
        out: dict[str, Any] = {
            "precision": self.precision,
            "method": self.method,
            "state": self.state,
        }
        if self.reason is not None:
            out["reason"] = self.reason
        if self.check is not None:
            out.update(self.check.report())
        if self.build_ms is not None:
            out["build_ms"] = round(self.build_ms, 1)
        if self.cached is not None:
            out["cached"] = self.cached
        return out


Run = Callable[
    [Callable[..., Any], list[torch.Tensor], Variant], list[tuple[TensorSpec, torch.Tensor]]
]
Warm = Callable[[Variant], None]


class Variants:
    """Builds a loaded model's variants, checks them, and hands out the one a request names."""

    def __init__(
        self,
        loaded: LoadedModel,
        spec: ModelSpec,
        options: VariantOptions,
        run: Run,
        warm: Warm,
    ) -> None:
        self.loaded = loaded
        #: What transforms take (torch.compile, quantization, freezing) ...
        self.model = loaded.module
        #: ... and what the plain and autocast variants call (see LoadedModel.call).
        self.call = loaded.call
        self.spec = spec
        self.device = loaded.device
        self.options = options
        self._run = run
        self._warm = warm
        self.by_precision: dict[str, Variant] = {}
        inputs = list(example_inputs(spec.inputs, self.device, rows=CHECK_ROWS, seed=0))
        plain = Variant("fp32", "plain", module=self.call)
        self.reference = run(self.call, inputs, plain)
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
        variant = self._checked("fp32", inputs, method=self._method(how))
        if variant.ready:
            return variant
        plain.reason = f"{variant.method} was not used: it is {variant.state} ({variant.reason})"
        return plain

    def _method(self, how: str) -> str:
        if how == "compile":
            return f"torch.compile (mode {self.options.compile_mode})"
        if how == "aoti":
            return f"AOTInductor package for {self.device.type}"
        return how

    def _checked(
        self, precision: str, inputs: list[torch.Tensor], method: str | None = None
    ) -> Variant:
        tolerance = self.options.tolerance_for(precision, self.device.type)
        method = method or METHODS[precision]
        start = time.perf_counter()
        try:
            variant = self._build(precision, method)
        except WorkerError as exc:
            return Variant(precision, method, state="unavailable", reason=exc.message)
        except Exception as exc:  # a torch transform that fails says why in its message
            reason = f"{type(exc).__name__}: {first_line(exc)}"
            return Variant(precision, method, state="unavailable", reason=reason)
        try:
            got = self._run(variant.module, inputs, variant)  # type: ignore[arg-type]
        except WorkerError as exc:
            variant.state = "unavailable"
            variant.reason = f"it fails on the check inputs: {exc.message.strip().splitlines()[0]}"
            return variant
        variant.check = worst(check_outputs(got, self.reference, tolerance))
        if variant.check is not None and not variant.check.within:
            variant.state = "rejected"
            variant.reason = f"it changes the answers: {variant.check.describe()}"
            return variant
        try:
            self._warm(variant)
        except WorkerError as exc:
            variant.state = "unavailable"
            variant.reason = f"warm-up failed: {exc.message.strip().splitlines()[0]}"
        variant.build_ms = (time.perf_counter() - start) * 1000.0
        return variant

    def _build(self, precision: str, method: str) -> Variant:
        if precision in AUTOCAST:
            dtype = AUTOCAST[precision]
            if self.spec.format == "aoti":
                raise WorkerError(
                    VARIANT_UNAVAILABLE,
                    "an AOTInductor package runs as it was compiled; autocast cannot change it",
                )
            if not autocast_supported(self.device.type, dtype):
                raise WorkerError(
                    VARIANT_UNAVAILABLE,
                    f"torch {torch.__version__} cannot run {precision} on {self.device.type}",
                )
            return Variant(precision, METHODS[precision], module=self.call, autocast=dtype)
        if precision == "int8":
            return Variant("int8", INT8_METHOD, module=self._int8())
        how = self.options.torch_optimization
        if how == "compile":
            return Variant("fp32", method, module=self._compiled())
        if how == "aoti":
            return self._aoti(method)
        return Variant("fp32", method, module=self._frozen(how))

    def _int8(self) -> Callable[..., Any]:
        if self.device.type != "cpu":
            raise WorkerError(
                VARIANT_UNAVAILABLE,
                f"dynamic quantization runs on CPU only; this model is on {self.device}",
            )
        if not isinstance(self.model, torch.nn.Module) or self.loaded.program is not None:
            raise WorkerError(
                VARIANT_UNAVAILABLE,
                f"dynamic quantization swaps Linear, LSTM and GRU modules of eager and "
                f"TorchScript models; a {self.spec.format} model has none to swap",
            )
        with warnings.catch_warnings():
            # torch.ao.quantization announces its move to torchao on every call.
            warnings.simplefilter("ignore")
            from torch.ao import quantization as q

            if isinstance(self.model, torch.jit.ScriptModule):
                quantized = q.quantize_dynamic_jit(self.model, {"": q.default_dynamic_qconfig})
                found = "quantized::" in str(quantized.graph) or "quantized::" in str(
                    quantized.inlined_graph
                )
            else:
                quantized = q.quantize_dynamic(
                    self.model,
                    {torch.nn.Linear, torch.nn.LSTM, torch.nn.GRU},
                    dtype=torch.qint8,
                )
                found = any(
                    type(m).__module__.startswith("torch.ao.nn.quantized")
                    for m in quantized.modules()
                )
        if not found:
            raise WorkerError(
                VARIANT_UNAVAILABLE,
                "the model has no Linear, LSTM or GRU layer to quantize; int8 would be fp32",
            )
        return quantized

    def _compiled(self) -> Callable[..., Any]:
        if isinstance(self.model, torch.jit.ScriptModule):
            raise WorkerError(
                VARIANT_UNAVAILABLE,
                "torch.compile does not take TorchScript modules: serve the model as a "
                "torch.export program or eager code (tensorgate export makes a .pt2)",
            )
        if not isinstance(self.model, torch.nn.Module):
            raise WorkerError(VARIANT_UNAVAILABLE, "an AOTInductor package is compiled already")
        # The worker only infers: Inductor may treat the weights as constants ("freezing": folded,
        # and on CPU convolutions' weights prepacked for oneDNN), 1.7x on the demo ResNet at batch
        # 1 against 0.9x without. One worker serves one model, so the global setting is its own.
        torch._inductor.config.freezing = True
        # Compiling is lazy: failures surface on the check's first call, as unavailable.
        return torch.compile(self.model, mode=self.options.compile_mode)

    def _aoti(self, method: str) -> Variant:
        if self.spec.format == "aoti":
            raise WorkerError(VARIANT_UNAVAILABLE, "the model is an AOTInductor package already")
        package = aoti_package(
            self.loaded, self.spec, self.options.cache_dir, sealed=is_sealed(self.spec.file)
        )
        try:
            module = load_aoti_package(package.path, self.device, len(self.spec.inputs))
        finally:
            if not package.kept:
                shutil.rmtree(Path(package.path).parent, ignore_errors=True)
        if package.cached:
            method += " (from the cache)"
        return Variant("fp32", method, module=module, cached=package.cached)

    def _frozen(self, how: str) -> Callable[..., Any]:
        if not isinstance(self.model, torch.jit.ScriptModule):
            raise WorkerError(
                VARIANT_UNAVAILABLE,
                f"{how} needs a TorchScript model; version {self.spec.version} is "
                f"{self.spec.format} (optimization compile or aoti suits it)",
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            frozen = torch.jit.freeze(self.model.eval())
            if how == "optimize_for_inference":
                return torch.jit.optimize_for_inference(frozen)
        return frozen


__all__ = [
    "COMPILE_MODES",
    "PRECISIONS",
    "TORCH_OPTIMIZATIONS",
    "VARIANT_UNAVAILABLE",
    "Variant",
    "VariantOptions",
    "Variants",
]
