"""The bridge: the derived steps evaluated next to `attention`, step by step.

The only part of `derive` that touches torch and `attention`
(``import derive`` stays torch-free). `torch_steps` runs the numeric half, each step by its twin
(`derive.bridge.evaluate`), keyed like `Values`; `check_against_torch` feeds both halves the same
dyadic inputs (k/8, exact in float64) and reports, per step, whether the polynomial steps agree
exactly and how far the others are apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy as sp

from ..explicit import Values
from ..explicit.forward import ExplicitGraph
from ..explicit.instantiate import float_exact
from ..graph.registry import ROOT

__all__ = ["Comparison", "torch_steps", "dyadic_inputs", "compare", "check_against_torch"]


@dataclass(frozen=True)
class Comparison:
    """One step compared: `exact` (every entry equal as a rational) or the largest error."""

    output: str
    exact: bool
    max_abs_error: float


def torch_steps(explicit: ExplicitGraph, *given: Any, **by_letter: Any) -> dict[str, Any]:
    """Each step computed by its twin (`derive.bridge.evaluate.torch_values`), keyed like
    `ExplicitGraph.evaluate`: the inputs by letter, or positionally in the order of
    ``explicit.inputs`` (X, W_q, W_k, W_v, W_o). Returns key -> tensor, the steps only."""
    from .evaluate import torch_values

    inputs = dict(zip(explicit.inputs, given, strict=False)) | by_letter
    inputs = {k: v for k, v in inputs.items() if v is not None}
    values = torch_values(explicit, inputs)
    return {key: value for key, value in values.items() if key not in inputs}


def dyadic_inputs(ea: ExplicitGraph, *, seed: int = 0, dtype: Any = None) -> dict[str, Any]:
    """Seeded float64 inputs whose entries are k/8, -16 ≤ k ≤ 16: floats represent them exactly,
    so the polynomial steps can be compared exactly."""
    from .evaluate import dyadic

    return dyadic(ea, seed, dtype)


def compare(values: Values, tensors: dict[str, Any]) -> list[Comparison]:
    """Step by step: exact equality of rationals a float holds where the symbolic value is
    exact, else the largest absolute difference between the symbolic value (rounded once) and
    torch's."""
    report = []
    for output, matrix in values.matrices.items():
        numeric = tensors[output].detach().cpu().tolist()
        pairs = [
            (entry, number)
            for row_s, row_t in zip(matrix.tolist(), numeric, strict=True)
            for entry, number in zip(row_s, row_t, strict=True)
        ]
        error = max(abs(float(entry) - number) for entry, number in pairs)
        if all(float_exact(entry) for entry, _ in pairs):
            equal = all(entry == sp.Rational(number) for entry, number in pairs)
            report.append(Comparison(output, equal, error))
        else:
            report.append(Comparison(output, False, error))
    return report


def check_against_torch(
    name: str = ROOT,
    n: int = 3,
    d: int = 4,
    c: int = 2,
    *,
    seed: int = 0,
    digits: int = 30,
    **sizes: Any,
) -> list[Comparison]:
    """Build the variant at (n, d, c) and its own sizes (`derive.explicit_variant`; a given
    mask as ``mask=``), evaluate it and its twins on the same seeded dyadic float64 inputs, and
    compare every step (see `compare`)."""
    from ..explicit.named import explicit_variant

    explicit = explicit_variant(name, n, d, c, **sizes)
    inputs = dyadic_inputs(explicit, seed=seed)
    values = explicit.evaluate(**inputs, digits=digits)
    return compare(values, torch_steps(explicit, **inputs))
