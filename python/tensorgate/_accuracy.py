"""Whether a variant changes what a user sees: one rule per kind of output.

The gateway applies the same rules to ONNX exports (``src/tensor/compare.ts``); the cases in
``test/fixtures/accuracy-cases.json`` are checked by both implementations.

- ``classes``: a floating output whose config names ``labels`` (logits, probabilities): each row
  of the last dimension is one answer. The error of a row is ``max |variant - fp32|`` over the
  row divided by the row's range (``max - min`` of fp32), and the row's answer has *changed*
  when the variant's top class scores, in fp32, more than ``tolerance x range`` below fp32's
  top class (a swap of two near-tied classes is not a changed answer). Within: no changed row
  and every row's error at most the tolerance.
- ``values``: any other floating output (regressions, embeddings, boxes): ``max |variant -
  fp32|`` divided by the output's spread (``max - min`` of fp32 over the whole tensor; its
  largest magnitude when constant; 1 when all zero). Within: at most the tolerance.
- ``exact``: integer and bool outputs (labels, counts, masks): the share of elements that
  differ. Within: at most the tolerance.

Errors are relative to what the output spans, not to each element: an error of 0.01 on a logit
near zero is noise when the logits span 5, which an element-wise relative rule called 100%.
A NaN or infinity where fp32 has a finite number is an infinite error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._loader import TensorSpec


@dataclass(frozen=True)
class OutputCheck:
    output: str
    rule: str
    #: Scaled error (classes, values) or share of differing elements (exact).
    error: float
    max_abs: float
    #: Rows whose answer changed (classes) or elements that differ (exact); 0 for values.
    changed: int
    #: Rows (classes) or elements (values, exact) compared.
    count: int
    tolerance: float

    @property
    def within(self) -> bool:
        return self.error <= self.tolerance and (self.rule != "classes" or self.changed == 0)

    @property
    def severity(self) -> float:
        """How far past (>1) or within (<=1) its tolerance; picks the worst output."""
        if self.changed and self.rule == "classes":
            return math.inf
        if self.tolerance > 0:
            return self.error / self.tolerance
        return math.inf if self.error > 0 else 0.0

    def report(self) -> dict[str, object]:
        """The check as JSON (an infinite or NaN error as null)."""
        return {
            "output": self.output,
            "rule": self.rule,
            "error": _finite(self.error),
            "max_abs": _finite(self.max_abs),
            "changed": self.changed,
            "compared": self.count,
            "tolerance": self.tolerance,
        }

    def describe(self) -> str:
        if self.rule == "exact":
            return (
                f'output "{self.output}": {self.changed} of {self.count} elements differ from fp32 '
                f"(share {self.error:.3g}, tolerance {self.tolerance:g})"
            )
        text = (
            f'output "{self.output}" is off from fp32 by up to {self.max_abs:.3g}, '
            f"{self.error:.3g} of its {'range' if self.rule == 'classes' else 'spread'} "
            f"(tolerance {self.tolerance:g})"
        )
        if self.changed:
            text += f"; the top class of {self.changed} of {self.count} rows changed"
        return text


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def rule_for(spec: TensorSpec) -> str:
    if not (spec.dtype.is_floating_point or spec.dtype.is_complex):
        return "exact"
    return "classes" if spec.labels else "values"


def _nonfinite_mismatch(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether the variant has a NaN/inf where fp32 has something else."""
    bad = ~torch.isfinite(got)
    if not bool(bad.any()):
        return False
    same = (got == expected) | (torch.isnan(got) & torch.isnan(expected))
    return bool((bad & ~same).any())


def check_output(
    spec: TensorSpec, got: torch.Tensor, expected: torch.Tensor, tolerance: float
) -> OutputCheck:
    rule = rule_for(spec)
    a = got.detach().to("cpu")
    e = expected.detach().to("cpu")
    if a.shape != e.shape:
        return OutputCheck(spec.name, rule, math.inf, math.inf, e.numel(), e.numel(), tolerance)
    if rule == "exact":
        differ = int((a != e).sum()) if e.numel() else 0
        share = differ / e.numel() if e.numel() else 0.0
        max_abs = float((a.to(torch.float64) - e.to(torch.float64)).abs().max()) if differ else 0.0
        return OutputCheck(spec.name, rule, share, max_abs, differ, e.numel(), tolerance)
    a64, e64 = a.to(torch.float64), e.to(torch.float64)
    if e64.numel() == 0:
        return OutputCheck(spec.name, rule, 0.0, 0.0, 0, 0, tolerance)
    if _nonfinite_mismatch(a64, e64):
        return OutputCheck(spec.name, rule, math.inf, math.inf, 0, e64.numel(), tolerance)
    finite = torch.isfinite(e64)
    diff = torch.where(finite, (a64 - e64).abs(), torch.zeros_like(e64))
    max_abs = float(diff.max())
    if rule == "values":
        values = e64[finite]
        spread = float(values.max() - values.min()) if values.numel() else 0.0
        if spread <= 0:
            spread = float(values.abs().max()) if values.numel() else 0.0
        error = max_abs / spread if spread > 0 else max_abs
        return OutputCheck(spec.name, rule, error, max_abs, 0, e64.numel(), tolerance)
    classes = e64.shape[-1] if e64.dim() else 1
    rows_e = torch.where(finite, e64, torch.zeros_like(e64)).reshape(-1, classes)
    rows_a = torch.where(finite, a64, torch.zeros_like(a64)).reshape(-1, classes)
    span = rows_e.max(dim=1).values - rows_e.min(dim=1).values
    span = torch.where(span > 0, span, rows_e.abs().max(dim=1).values.clamp_min(1e-300))
    row_error = diff.reshape(-1, classes).max(dim=1).values / span
    top = rows_e.max(dim=1).values
    picked = rows_e.gather(1, rows_a.argmax(dim=1, keepdim=True)).squeeze(1)
    changed = int(((top - picked) > tolerance * span).sum())
    return OutputCheck(
        spec.name, rule, float(row_error.max()), max_abs, changed, rows_e.shape[0], tolerance
    )


def check_outputs(
    got: list[tuple[TensorSpec, torch.Tensor]],
    expected: list[tuple[TensorSpec, torch.Tensor]],
    tolerance: float,
) -> list[OutputCheck]:
    return [check_output(spec, a, e, tolerance) for (spec, a), (_, e) in zip(got, expected)]


def worst(checks: list[OutputCheck]) -> OutputCheck | None:
    return max(checks, key=lambda c: c.severity, default=None)


__all__ = ["OutputCheck", "check_output", "check_outputs", "rule_for", "worst"]
