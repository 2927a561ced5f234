r"""A declaration evaluated entry by entry, all entries at once: its formula on grids of indices.

For the steps SymPy finds no matrix form for (a constant mask such as the causal M_{m,p} = 0 if
p ≤ m, −∞ otherwise; RoPE's angles; a gradient given by its entries; a mistaken formula such as
the softmax with the masked scores above the line and the unmasked ones below), every index of
the output gets an axis of a grid (the head ℓ, the row m, the column p), every summation index a
further axis that is summed away, and every entry x_{a,b} is gathered from its matrix at the
grid's values of a and b. Sums, products, powers, exp, log, tanh, sin, cos, the sigmoid, ⌊·⌋,
mod, Kronecker's δ, Iverson's bracket [P], max, min, |·|, the step θ, sign, comparisons and
Piecewise act on the whole grid at once (torch, float64, IEEE arithmetic: exp(−∞) = 0, and
0/0 is NaN).

Beside each value it carries a first-order bound on the rounding error of an implementation in
a lower precision, as `derive.conformance.evaluate.matrices` does for matrix forms: each operation's
result rounded once (u = `Rounding.store`), a sum of k terms within γ_k of the sum of their
magnitudes, a libm function within two ulps, and the operands' errors carried through by the
derivative (|f'(x)| e for f(x); Σ_i e_i Π_{j≠i} |x_j| for a product). Indices, masks and other
constants are exact.

Layout (shared with `derive.conformance.evaluate.matrices`): every matrix is a tensor
(*batch, H, rows, cols), H the heads of a per-head matrix (X^{(ℓ)}), 1 otherwise.
"""

from __future__ import annotations

from typing import Any

import sympy as sp
import torch
from sympy import Indexed
from sympy.matrices.expressions.matexpr import MatrixElement

from ...graph import Declaration
from ...notation import letters as L
from ...notation.functions import Indicator
from .rounding import FUNCTIONS, apply, exact

__all__ = ["evaluate_element", "element_values", "entries_values", "concrete"]


def concrete(size: sp.Expr, sizes: dict[sp.Symbol, Any]) -> int:
    """A symbolic size at the concrete sizes (only its own symbols looked up: it is called for
    every bound of every block of columns)."""
    expr = sp.sympify(size)
    if expr.is_Integer:
        return int(expr)
    return int(expr.xreplace({s: sp.sympify(sizes[s]) for s in expr.free_symbols if s in sizes}))


def evaluate_element(
    step: Declaration, values: dict[str, Any], sizes: dict[sp.Symbol, Any], heads: int
) -> Any:
    """Every entry of `step`'s output from its element-wise formula, as one tensor
    (*batch, H, rows, cols); `values` holds the matrices it reads (letter -> tensor)."""
    return element_values(step, values, sizes, heads)[0]


def element_values(
    step: Declaration,
    values: dict[str, Any],
    sizes: dict[sp.Symbol, Any],
    heads: int,
    *,
    bounds: dict[str, Any] | None = None,
    unit: float = 0.0,
) -> tuple[Any, Any]:
    """`evaluate_element` with the rounding bound of every entry (`bounds`: those of the
    matrices it reads, zero where absent; `unit`: the unit roundoff, 0 for values alone)."""
    row, col = step.free
    if not (isinstance(row, sp.Symbol) and isinstance(col, sp.Symbol)):
        raise ValueError(f"step {step.output}: entry {step.element.lhs} is not indexed by symbols")
    shape = step.shapes[step.output]
    return _on_grid(
        step.element.rhs, (row, col), shape, step.head, values, sizes, heads, bounds, unit
    )


def entries_values(
    entry: sp.Expr,
    indices: tuple,
    shape: tuple,
    values: dict[str, Any],
    sizes: dict[sp.Symbol, Any],
    heads: int,
    *,
    bounds: dict[str, Any] | None = None,
    unit: float = 0.0,
) -> tuple[Any, Any]:
    """A matrix given by its entry (`derive.notation.Entries`): per head where the entry reads
    the head ℓ; an index that is a number (``(1, p)``: a row) stays at that number."""
    head = L.ell in entry.free_symbols
    return _on_grid(entry, indices, shape, head, values, sizes, heads, bounds, unit)


def _on_grid(
    rhs: sp.Expr,
    indices: tuple,
    shape: tuple,
    head: bool,
    values: dict[str, Any],
    sizes: dict[sp.Symbol, Any],
    heads: int,
    bounds: dict[str, Any] | None,
    unit: float,
) -> tuple[Any, Any]:
    rows, cols = (concrete(x, sizes) for x in shape)
    count = heads if head else 1
    arange = lambda k: torch.arange(1, k + 1, dtype=torch.float64)  # noqa: E731
    grid = {L.ell: arange(count).view(count, 1, 1)}
    for axis, (index, length) in enumerate(zip(indices, (rows, cols), strict=True)):
        if isinstance(index, sp.Symbol):
            view = [1, 1, 1]
            view[axis + 1] = length
            grid[index] = arange(length).view(*view)
    value, bound = _Grid(values, bounds or {}, sizes, torch, unit)(rhs, grid)
    zeros = torch.zeros(count, rows, cols).double()
    return _tensor(torch, value) + zeros, _tensor(torch, bound) + zeros


class _Grid:
    """The evaluation of one formula on a grid of index values (`env`: symbol -> tensor): each
    node gives (value, bound)."""

    def __init__(self, values: dict, bounds: dict, sizes: dict, torch: Any, unit: float):
        self.values, self.bounds, self.sizes, self.torch = values, bounds, sizes, torch
        self.u = unit

    def __call__(self, expr: sp.Basic, env: dict) -> tuple[Any, Any]:
        torch, u = self.torch, self.u
        if isinstance(expr, Indexed):
            return self._entry(expr, env)
        if isinstance(expr, MatrixElement):
            return self._element(expr, env)
        if expr.is_Symbol:
            if expr in env:
                return env[expr], 0.0
            if expr in self.sizes:
                return float(self.sizes[expr]), 0.0
            raise ValueError(f"no value for {expr}")
        if expr is sp.S.Infinity or expr is sp.S.NegativeInfinity or expr.is_Number:
            return float(expr), 0.0
        if expr is sp.true or expr is sp.false:
            return bool(expr), 0.0
        if isinstance(expr, sp.NumberSymbol):  # π: rounded once
            return float(expr), u * abs(float(expr))
        if isinstance(expr, sp.Piecewise):
            return self._piecewise(expr, env)
        if isinstance(expr, sp.Sum | sp.Product):
            return self._sum(expr, env)
        if isinstance(expr, Indicator):  # Iverson's bracket [P]: exact
            return _tensor(torch, self(expr.args[0], env)[0]).double(), 0.0
        if isinstance(expr, sp.KroneckerDelta):
            (a, _), (b, _) = (self(arg, env) for arg in expr.args)
            return (_tensor(torch, a) == _tensor(torch, b)).double(), 0.0
        pairs = [self(arg, env) for arg in expr.args]
        if isinstance(expr, sp.Max | sp.Min | sp.Abs | sp.Heaviside | sp.sign):
            return self._piecewise_linear(expr, pairs)
        args = [value for value, _ in pairs]
        if isinstance(expr, sp.Add):  # k terms: (k − 1) roundings, each within u of Σ|x_i|
            value = _fold(args, lambda a, b: a + b)
            spread = _fold([_tensor(torch, a).abs() for a in args], lambda a, b: a + b)
            rounded = (len(args) - 1) * u * spread
            return value, exact(torch, sum(e for _, e in pairs) + rounded)
        if isinstance(expr, sp.Mul):
            return self._product(pairs)
        if isinstance(expr, sp.Pow):
            (base, error), (power, _) = pairs
            value = _tensor(torch, base) ** power
            carried = abs(power) * _tensor(torch, base).abs() ** (power - 1) * error
            return value, exact(torch, carried + 2 * u * value.abs())
        if type(expr) in FUNCTIONS:
            ((x, error),) = pairs
            return apply(type(expr), _tensor(torch, x), _tensor(torch, error), u)
        return self._exact_operation(expr, args)

    def _piecewise_linear(self, expr: sp.Basic, pairs: list) -> tuple[Any, Any]:
        """max, min and |·| (each 1-Lipschitz: the operands' largest error carries over, and
        nothing is rounded); the step θ and sign, exact (their value at a rounded operand is
        taken as theirs at the exact one: an operand within its error of 0 is not told apart)."""
        torch = self.torch
        values = [_tensor(torch, value) for value, _ in pairs]
        errors = [_tensor(torch, error) for _, error in pairs]
        if isinstance(expr, sp.Heaviside):  # θ(0) as SymPy's, 1/2 unless a second argument says
            at_zero = values[1] if len(values) > 1 else 0.5
            return torch.heaviside(values[0], _tensor(torch, at_zero).to(values[0].dtype)), 0.0
        if isinstance(expr, sp.sign):
            return torch.sign(values[0]), 0.0
        if isinstance(expr, sp.Abs):
            return values[0].abs(), errors[0]
        pick = torch.maximum if isinstance(expr, sp.Max) else torch.minimum
        return _fold(values, pick), _fold(errors, torch.maximum)

    def _exact_operation(self, expr: sp.Basic, args: list) -> tuple[Any, Any]:
        """Operations on indices and conditions: exact."""
        torch = self.torch
        if isinstance(expr, sp.floor):
            return torch.floor(_tensor(torch, args[0])), 0.0
        if isinstance(expr, sp.ceiling):  # YaRN's correction range rounded outwards
            return torch.ceil(_tensor(torch, args[0])), 0.0
        if isinstance(expr, sp.Mod):
            return torch.remainder(_tensor(torch, args[0]), args[1]), 0.0
        comparisons = {
            sp.LessThan: torch.le,
            sp.StrictLessThan: torch.lt,
            sp.GreaterThan: torch.ge,
            sp.StrictGreaterThan: torch.gt,
            sp.Equality: torch.eq,
            sp.Unequality: torch.ne,
        }
        if type(expr) in comparisons:
            compare = comparisons[type(expr)]
            return compare(_tensor(torch, args[0]), _tensor(torch, args[1])), 0.0
        if isinstance(expr, sp.And):
            return _fold(args, lambda a, b: a & b), 0.0
        if isinstance(expr, sp.Or):
            return _fold(args, lambda a, b: a | b), 0.0
        if isinstance(expr, sp.Not):
            return ~args[0], 0.0
        raise ValueError(f"cannot evaluate {type(expr).__name__} in {expr}")

    def _product(self, pairs: list) -> tuple[Any, Any]:
        torch, u = self.torch, self.u
        values = [_tensor(torch, v) for v, _ in pairs]
        value = _fold(values, lambda a, b: a * b)
        carried: Any = 0.0
        for i, (_, error) in enumerate(pairs):
            others = [values[j].abs() for j in range(len(values)) if j != i]
            carried = carried + _fold([_tensor(torch, error), *others], lambda a, b: a * b)
        rounded = max(len(values) - 1, 0) * u * value.abs()
        return value, exact(torch, carried + rounded)

    def _entry(self, entry: Indexed, env: dict) -> tuple[Any, Any]:
        """x_{a,b} at every point of the grid: gathered from the tensor of X, and its bound."""
        torch = self.torch
        letter = L.letter_of(entry)
        matrix = self.values[letter]
        indices = list(entry.indices)
        if len(indices) == 2:
            indices.insert(0, sp.S.One)  # a whole matrix: its one "head"
        rank = max((t.ndim for t in env.values()), default=3)
        gathered = []
        for index, size in zip(indices, matrix.shape[-3:], strict=True):
            value = _tensor(torch, self(index, env)[0])
            value = value.reshape((1,) * (rank - value.ndim) + tuple(value.shape))
            gathered.append((value.long() - 1).clamp(0, size - 1))
        bound = self.bounds.get(letter)
        at = (..., *gathered)
        return matrix[at], 0.0 if bound is None else bound[at]

    def _element(self, element: MatrixElement, env: dict) -> tuple[Any, Any]:
        """M[i, j] (0-based, as SymPy's matrix forms write them, ``Mu[0, l − 1]``)."""
        letter = str(element.parent.name)
        if letter.endswith("_l"):
            raise ValueError(f"{element}: an entry of a per-head matrix needs its head")
        one_based = L.base(L.name_of(letter))[element.i + 1, element.j + 1]
        return self._entry(one_based, env)

    def _piecewise(self, expr: sp.Piecewise, env: dict) -> tuple[Any, Any]:
        torch = self.torch
        result = bound = None
        for value, condition in reversed(expr.args):
            value, error = (_tensor(torch, x) for x in self(value, env))
            if result is None:
                result, bound = value, error
                continue
            chosen = _tensor(torch, self(condition, env)[0])
            result = torch.where(chosen, value, result)
            bound = torch.where(chosen, error, bound)
        return result, bound

    def _sum(self, total: sp.Sum | sp.Product, env: dict) -> tuple[Any, Any]:
        """Σ (or ∏) over its limits (SymPy lists the innermost first; an inner limit may read an
        outer index): each index a further axis of the grid, summed (multiplied) away in turn;
        an empty range is 0 (1)."""
        product = isinstance(total, sp.Product)
        return self._nested(total.function, list(reversed(total.limits)), env, product)

    def _nested(
        self, function: sp.Expr, limits: list, env: dict, product: bool = False
    ) -> tuple[Any, Any]:
        torch = self.torch
        if not limits:
            return self(function, env)
        (variable, low, high), rest = limits[0], limits[1:]
        inner = {symbol: grid.unsqueeze(-1) for symbol, grid in env.items()}
        rank = max((t.ndim for t in inner.values()), default=4)
        low, high = self(low, inner)[0], self(high, inner)[0]
        length = max(int(_tensor(torch, high).max()), 0)
        axis = torch.arange(1, length + 1, dtype=torch.float64)
        inner[variable] = axis.view((1,) * (rank - 1) + (length,))
        keep = (inner[variable] >= low) & (inner[variable] <= high)
        summand, error = (_tensor(torch, x) for x in self._nested(function, rest, inner, product))
        if product:  # ∏: each factor's error relative, carried through the others
            factors = torch.where(keep, summand, 1.0)
            value = factors.prod(-1)
            relative = torch.where(keep, error / summand.abs().clamp_min(1e-300), 0.0).sum(-1)
            k = length + 1
            return value, exact(torch, value.abs() * (relative + k * self.u))
        value = torch.where(keep, summand, 0.0).sum(-1)
        spread = torch.where(keep, summand.abs(), 0.0).sum(-1)
        carried = torch.where(keep, error, 0.0).sum(-1)
        k = length + 1
        gamma = k * self.u / (1 - k * self.u)
        return value, exact(torch, carried + gamma * spread)


def _fold(items: list, combine) -> Any:
    result = items[0]
    for item in items[1:]:
        result = combine(result, item)
    return result


def _tensor(torch: Any, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(value) if isinstance(value, bool) else torch.tensor(float(value)).double()
