r"""A declaration evaluated entry by entry, all entries at once: its formula on grids of indices.

For the steps SymPy finds no matrix form for (a constant mask such as the causal M_{m,p} = 0 if
p ≤ m, −∞ otherwise; a mistaken formula such as the softmax with the masked scores above the line
and the unmasked ones below), every index of the output gets an axis of a grid (the head ℓ, the
row m, the column p), every summation index a further axis that is summed away, and every entry
x_{a,b} is gathered from its matrix at the grid's values of a and b. Sums, products, exp, log,
⌊·⌋, mod, comparisons and Piecewise act on the whole grid at once (torch, float64, IEEE
arithmetic: exp(−∞) = 0, and 0/0 is NaN).

Layout (shared with `derive.bridge.conform.matrices`): every matrix is a tensor
(*batch, H, rows, cols), H the heads of a per-head matrix (X^{(ℓ)}), 1 otherwise.
"""

from __future__ import annotations

from typing import Any

import sympy as sp
from sympy import Indexed

from ...graph import Declaration
from ...notation import letters as L

__all__ = ["evaluate_element", "concrete"]


def concrete(size: sp.Expr, sizes: dict[sp.Symbol, Any]) -> int:
    """A symbolic size at the concrete sizes."""
    return int(sp.sympify(size).xreplace({s: sp.sympify(v) for s, v in sizes.items()}))


def evaluate_element(
    step: Declaration, values: dict[str, Any], sizes: dict[sp.Symbol, Any], heads: int
) -> Any:
    """Every entry of `step`'s output from its element-wise formula, as one tensor
    (*batch, H, rows, cols); `values` holds the matrices it reads (letter -> tensor)."""
    import torch

    rows, cols = (concrete(x, sizes) for x in step.shapes[step.output])
    row, col = step.free
    if not (isinstance(row, sp.Symbol) and isinstance(col, sp.Symbol)):
        raise ValueError(f"step {step.output}: entry {step.element.lhs} is not indexed by symbols")
    count = heads if step.head else 1
    arange = lambda k: torch.arange(1, k + 1, dtype=torch.float64)  # noqa: E731
    grid = {
        L.ell: arange(count).view(count, 1, 1),
        row: arange(rows).view(1, rows, 1),
        col: arange(cols).view(1, 1, cols),
    }
    result = _Grid(values, sizes, torch)(step.element.rhs, grid)
    return torch.as_tensor(result, dtype=torch.float64) + torch.zeros(count, rows, cols).double()


class _Grid:
    """The evaluation of one formula on a grid of index values (`env`: symbol -> tensor)."""

    def __init__(self, values: dict[str, Any], sizes: dict[sp.Symbol, Any], torch: Any) -> None:
        self.values, self.sizes, self.torch = values, sizes, torch

    def __call__(self, expr: sp.Basic, env: dict) -> Any:
        torch = self.torch
        if isinstance(expr, Indexed):
            return self._entry(expr, env)
        if expr.is_Symbol:
            if expr in env:
                return env[expr]
            if expr in self.sizes:
                return float(self.sizes[expr])
            raise ValueError(f"no value for {expr}")
        if expr is sp.S.Infinity or expr is sp.S.NegativeInfinity:
            return float(expr)
        if expr.is_Number:
            return float(expr)
        if expr is sp.true or expr is sp.false:
            return bool(expr)
        if isinstance(expr, sp.Piecewise):
            return self._piecewise(expr, env)
        if isinstance(expr, sp.Sum):
            return self._sum(expr, env)
        args = [self(arg, env) for arg in expr.args]
        if isinstance(expr, sp.Add):
            return _fold(args, lambda a, b: a + b)
        if isinstance(expr, sp.Mul):
            return _fold(args, lambda a, b: a * b)
        if isinstance(expr, sp.Pow):
            return _tensor(torch, args[0]) ** args[1]
        if isinstance(expr, sp.exp):
            return torch.exp(_tensor(torch, args[0]))
        if isinstance(expr, sp.log):
            return torch.log(_tensor(torch, args[0]))
        if isinstance(expr, sp.floor):
            return torch.floor(_tensor(torch, args[0]))
        if isinstance(expr, sp.Mod):
            return torch.remainder(_tensor(torch, args[0]), args[1])
        comparisons = {
            sp.LessThan: torch.le,
            sp.StrictLessThan: torch.lt,
            sp.GreaterThan: torch.ge,
            sp.StrictGreaterThan: torch.gt,
            sp.Equality: torch.eq,
            sp.Unequality: torch.ne,
        }
        if type(expr) in comparisons:
            return comparisons[type(expr)](_tensor(torch, args[0]), _tensor(torch, args[1]))
        if isinstance(expr, sp.And):
            return _fold(args, lambda a, b: a & b)
        if isinstance(expr, sp.Or):
            return _fold(args, lambda a, b: a | b)
        if isinstance(expr, sp.Not):
            return ~args[0]
        raise ValueError(f"cannot evaluate {type(expr).__name__} in {expr}")

    def _entry(self, entry: Indexed, env: dict) -> Any:
        """x_{a,b} at every point of the grid: gathered from the tensor of X."""
        torch = self.torch
        matrix = self.values[L.letter_of(entry)]
        indices = list(entry.indices)
        if len(indices) == 2:
            indices.insert(0, sp.S.One)  # a whole matrix: its one "head"
        rank = max((t.ndim for t in env.values()), default=3)
        gathered = []
        for index, size in zip(indices, matrix.shape[-3:], strict=True):
            value = _tensor(torch, self(index, env))
            value = value.reshape((1,) * (rank - value.ndim) + tuple(value.shape))
            gathered.append((value.long() - 1).clamp(0, size - 1))
        return matrix[(..., *gathered)]

    def _piecewise(self, expr: sp.Piecewise, env: dict) -> Any:
        torch = self.torch
        result = None
        for value, condition in reversed(expr.args):
            value = _tensor(torch, self(value, env))
            if result is None:
                result = value
                continue
            result = torch.where(_tensor(torch, self(condition, env)), value, result)
        return result

    def _sum(self, total: sp.Sum, env: dict) -> Any:
        """Each summation index gets a further axis of the grid, summed away at the end."""
        torch = self.torch
        if len(total.limits) > 1:
            inside_out = sp.Sum(total.function, total.limits[0])
            return self._sum(sp.Sum(inside_out, *total.limits[1:]), env)
        inner = {symbol: grid.unsqueeze(-1) for symbol, grid in env.items()}
        rank = max((t.ndim for t in inner.values()), default=4)
        keep = None
        for variable, low, high in total.limits:
            low, high = self(low, inner), self(high, inner)
            length = int(_tensor(torch, high).max())
            axis = torch.arange(1, length + 1, dtype=torch.float64)
            inner[variable] = axis.view((1,) * (rank - 1) + (length,))
            inside = (inner[variable] >= low) & (inner[variable] <= high)
            keep = inside if keep is None else keep & inside
        summand = _tensor(torch, self(total.function, inner))
        return torch.where(keep, summand, 0.0).sum(-1)


def _fold(items: list, combine) -> Any:
    result = items[0]
    for item in items[1:]:
        result = combine(result, item)
    return result


def _tensor(torch: Any, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(value) if isinstance(value, bool) else torch.tensor(float(value)).double()
