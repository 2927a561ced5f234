"""Rounding: the unit roundoffs of an implementation, and the bound of a function of each entry.

`Rounding` holds the unit roundoff of a stored result and that of the sums inside products
(torch accumulates float16 and bfloat16 in float32); γ_k bounds a sum of k products. `apply`
evaluates exp, log, tanh, sin, cos or the sigmoid entry by entry with a first-order bound: the
error e of the argument carried by the derivative, |f'(x)| e, the rounding of the argument
itself, u |x| |f'(x)|, and the function's own error, a few ulps of f(x) (libm's are within one or
two; three are allowed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy as sp
import torch

from ...notation.functions import Sigmoid

__all__ = ["Rounding", "apply", "exact", "FUNCTIONS"]

#: A libm function's own error, in ulps of its result.
_LIBM_ULPS = 2


@dataclass(frozen=True)
class Rounding:
    """Unit roundoffs: `store` for each stored result, `sums` for the sums inside products and
    the softmax (torch accumulates float16 and bfloat16 in float32); `softmax`, that of a
    softmax computed in a coarser precision than the rest (a float64 layer whose softmax runs in
    float32, as Hugging Face's eager layers do), 0 where it runs in the layer's own; `tables`,
    that of constant tables of real numbers the target computes in a coarser precision (RoPE's
    angles and their cos and sin, in float32 in Hugging Face's float64 models), 0 for none."""

    store: float
    sums: float
    softmax: float = 0.0
    tables: float = 0.0

    def gamma(self, terms: int) -> float:
        """γ_k: the relative error bound of a sum of k products."""
        k = terms + 2  # and a scaling folded into either factor
        return k * self.sums / (1 - k * self.sums)


def _tanh(torch: Any, x: Any) -> tuple[Any, Any]:
    value = torch.tanh(x)
    return value, 1 - value**2


def _sigmoid(torch: Any, x: Any) -> tuple[Any, Any]:
    value = torch.sigmoid(x)
    return value, value * (1 - value)


def _exp(torch: Any, x: Any) -> tuple[Any, Any]:
    value = torch.exp(x)
    return value, value


def _log(torch: Any, x: Any) -> tuple[Any, Any]:
    return torch.log(x), 1 / x


#: f -> (f(x), f'(x)) on tensors.
FUNCTIONS = {
    sp.exp: _exp,
    sp.log: _log,
    sp.tanh: _tanh,
    sp.sin: lambda torch, x: (torch.sin(x), torch.cos(x)),
    sp.cos: lambda torch, x: (torch.cos(x), -torch.sin(x)),
    Sigmoid: _sigmoid,
}


def apply(function: type, x: Any, error: Any, unit: float) -> tuple[Any, Any]:
    """f(x) entry by entry (f one of exp, log, tanh, sin, cos, the sigmoid) and its bound:
    |f'(x)| e carried, the function's own few ulps, and the rounding of its argument (u |x|)."""
    if function not in FUNCTIONS:
        raise NotImplementedError(f"no evaluation for the function {function.__name__}")
    value, slope = FUNCTIONS[function](torch, x)
    own = (_LIBM_ULPS + 1) * unit * value.abs() + unit * x.abs() * slope.abs()
    return value, exact(torch, slope.abs() * error + own)


def exact(torch: Any, bound: Any) -> Any:
    """A bound where 0 × ∞ (an exact constant times an infinite one) is no error."""
    tensor = bound if isinstance(bound, torch.Tensor) else torch.tensor(float(bound)).double()
    return torch.nan_to_num(tensor, nan=0.0, posinf=torch.inf)
