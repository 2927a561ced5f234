r"""The derived matrix forms of a graph, evaluated in float64 with torch, with a rounding bound.

`derive.calculus.steps(graph)` derives each step's matrix form from its declaration (Ω = Q Kᵀ,
A = softmax(Ω̃), Ĉ = [C^{(1)} ⋯ C^{(h)}]) and `derive.calculus.backward(graph)` every gradient
(Ω̄ = Ω̃̄/√c, X̄ = Q̄ W_qᵀ + K̄ W_kᵀ + V̄ W_vᵀ, …). `Evaluation` walks those expressions with torch
in float64: products, sums, transposes, Hadamard products, the row-wise softmax, blocks of
columns and concatenations. A step SymPy finds no matrix form for (a constant mask, a mistaken
formula) is evaluated entry by entry on grids (`derive.conformance.evaluate.elementwise`); a formula
whose transpose has a matrix form (the softmax of each column) is evaluated as that transpose.

Next to every value it can carry a first-order bound on the rounding error an implementation in a
lower precision makes computing it (`Rounding`): each stored result rounded once (unit
`store`), each product's sums accumulated in `sums` precision (γ_k = k u / (1 − k u) for k terms,
plus two roundings for a scaling folded into a factor), and the errors of the operands carried
through (|A| E_B + E_A |B|; a softmax turns the error e of a score into a relative error
e + Σ_r a_r e_r of its weights, plus the rounding of the shift by the row's maximum).

Layout: every matrix is a tensor (*batch, H, rows, cols), H = h for a per-head matrix and 1
otherwise; inputs are given as (rows, cols) or (*batch, rows, cols) and values come back so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import sympy as sp
import torch
from sympy import MatrixSymbol
from sympy.matrices.expressions.matexpr import MatrixElement

from ...calculus import NoMatrixForm, backward, matrix_form
from ...calculus.forward import declared_matrix, symbols_of
from ...calculus.indices import zero_based, zero_index
from ...graph import Declaration, Graph
from ...notation import Concat, Entries, Softmax
from ...notation import letters as L
from .cache import cached
from .elementwise import concrete, element_values
from .rounding import Rounding
from .variant_forms import coefficient, columns, evaluate_variant_form

__all__ = ["Rounding", "Evaluation", "GradientForm", "derived_form", "graph_forms", "gradients"]


@functools.lru_cache(maxsize=512)
def _form(step: Declaration, shapes: tuple, relations: tuple) -> sp.MatrixExpr | None:
    declared = declared_matrix(step, relations)
    if declared is None:  # a constant step
        return None
    form = declared.rhs
    if not isinstance(form, Entries):  # Entries: no matrix form of the entry as it is written
        return form
    row, col = step.free
    if not (isinstance(row, sp.Symbol) and isinstance(col, sp.Symbol)):
        return None
    rhs = zero_based(step.element.rhs, (row, col), symbols_of(dict(shapes)))
    try:  # the matrix whose entry (col, row) is the formula, transposed
        return matrix_form(rhs, (zero_index(col), zero_index(row))).T
    except NoMatrixForm:
        return None


def derived_form(step: Declaration, relations: tuple = ()) -> sp.MatrixExpr | None:
    """The matrix form SymPy derives for a step (or for its transpose), None if it finds none."""
    return _form(step, tuple(sorted(step.shapes.items())), relations)


@functools.cache
def graph_forms(graph: Graph) -> tuple[sp.MatrixExpr | None, ...]:
    """`derived_form` of every step of a graph, kept between runs (`cache.cached`)."""
    derive = lambda: tuple(derived_form(s, graph.relations) for s in graph.declarations)  # noqa: E731
    return cached("forms", graph, derive)


@dataclass(frozen=True)
class GradientForm:
    """One gradient of `derive.calculus.backward`, as evaluated: \bar{U} = `rhs`."""

    output: str
    of: str
    lhs: sp.MatrixExpr
    rhs: sp.MatrixExpr


@functools.cache
def gradients(graph: Graph) -> tuple[GradientForm, ...]:
    """`derive.calculus.backward(graph)`'s matrix forms, kept between runs (`cache.cached`;
    the equations themselves would not survive pickling unevaluated)."""

    def derive() -> tuple[GradientForm, ...]:
        found = backward(graph)
        return tuple(GradientForm(g.output, g.of, g.matrix.lhs, g.matrix.rhs) for g in found)

    return cached("backward", graph, derive)


class Evaluation:
    """A graph's values (and optionally rounding bounds) for concrete inputs and sizes.

    Args:
        sizes: every size symbol the forms read -> its value (n, d, c, h, c_h, ρ).
        rounding: the implementation's unit roundoffs, or None for values only.
        empty_rows: ``"nan"``: a softmax row with no finite entry gives NaN (IEEE 0/0), as the
            declaration read literally; ``"zero"``: zero weights (derive's convention).
    """

    def __init__(self, sizes: dict, rounding: Rounding | None = None, empty_rows: str = "nan"):
        self.torch = torch
        self.sizes = sizes
        self.heads = int(sizes.get(L.h, 1))
        self.rounding, self.empty_rows = rounding, empty_rows
        self.values: dict[str, Any] = {}
        self.bounds: dict[str, Any] = {}
        self._batched: set[str] = set()
        self._scalars: dict[sp.Expr, float] = {}

    # -- inputs and results -------------------------------------------------------------------

    def give(self, letter: str, tensor: Any, bound: Any = None) -> None:
        """An input: (rows, cols) or (*batch, rows, cols), converted to float64."""
        value = tensor.detach().to(self.torch.float64)
        if value.ndim > 2:
            self._batched.add(letter)
        self.values[letter] = value.unsqueeze(-3)
        if self.rounding is not None:
            zero = self.torch.zeros_like(self.values[letter])
            self.bounds[letter] = zero if bound is None else bound.unsqueeze(-3)

    def __getitem__(self, letter: str) -> Any:
        value = self.values[letter]
        return value if letter.endswith("_l") else value.squeeze(-3)

    def bound(self, letter: str) -> Any:
        value = self.bounds[letter]
        return value if letter.endswith("_l") else value.squeeze(-3)

    # -- walks ----------------------------------------------------------------------------------

    def forward(self, graph: Graph) -> Evaluation:
        """Every step of `graph`, in order: its derived form, or entry by entry."""
        for step, form in zip(graph.declarations, graph_forms(graph), strict=True):
            if form is None:
                unit = 0.0 if self.rounding is None else self.rounding.store
                value, bound = element_values(
                    step, self.values, self.sizes, self.heads, bounds=self.bounds, unit=unit
                )
                if step.constant and self.rounding is not None and self.rounding.tables:
                    bound = self._table(value, bound)
                self._keep(step.output, value, None if self.rounding is None else bound)
            else:
                self._keep(step.output, *self(form))
        return self

    def _table(self, value: Any, bound: Any) -> Any:
        """A constant table of real numbers (RoPE's angles; not a mask, nor a matrix of 0 and
        ±1) computed in a coarser precision: each angle within 3 u |φ| (the frequency, the
        product, the rounding); the cos or sin taken of it is rounded to that precision too
        (`variant_forms`)."""
        torch, unit = self.torch, self.rounding.tables if self.rounding else 0.0
        finite = torch.isfinite(value)
        if bool((value[finite] == value[finite].round()).all()):
            return bound
        return bound + torch.where(finite, 3 * unit * value.abs(), 0.0)

    def backward(self, graph: Graph, upstream: Any) -> Evaluation:
        """Every gradient `derive.calculus.backward` derives, for the upstream gradient C̄."""
        self.give(L.gradient(graph.output), upstream)
        for gradient in gradients(graph):
            value, bound = self(gradient.rhs)
            if gradient.of in graph.inputs and gradient.of not in self._batched:
                value, bound = self._summed_over_batch(value, bound)
            self._keep(gradient.output, value, bound)
        return self

    def _summed_over_batch(self, value: Any, bound: Any) -> tuple[Any, Any]:
        """A weight's gradient: the sum of every sequence's (the weights are shared)."""
        dims = tuple(range(value.ndim - 3))
        if not dims:
            return value, bound
        total = value.sum(dims)
        if bound is not None and self.rounding is not None:  # (bounds come with rounding)
            terms = value.numel() // total.numel()
            bound = bound.sum(dims) + self.rounding.gamma(terms) * value.abs().sum(dims)
        return total, bound

    def _keep(self, letter: str, value: Any, bound: Any) -> None:
        self.values[letter] = value
        if self.rounding is not None:
            self.bounds[letter] = bound

    # -- one matrix expression -------------------------------------------------------------------

    def __call__(self, expr: sp.MatrixExpr) -> tuple[Any, Any]:
        torch, rounding = self.torch, self.rounding
        if isinstance(expr, MatrixSymbol):
            return self.values[str(expr.name)], self.bounds.get(str(expr.name))
        if isinstance(expr, sp.OneMatrix | sp.ZeroMatrix):
            rows, cols = (concrete(x, self.sizes) for x in expr.shape)
            fill = torch.ones if isinstance(expr, sp.OneMatrix) else torch.zeros
            value = fill(1, rows, cols, dtype=torch.float64)
            return value, None if rounding is None else 0 * value
        if isinstance(expr, sp.Transpose):
            value, bound = self(expr.arg)
            return value.mT, None if bound is None else bound.mT
        if isinstance(expr, sp.MatMul):
            return self._product(expr)
        if isinstance(expr, sp.MatAdd):
            parts = [self(term) for term in expr.args]
            value: Any = sum(part[0] for part in parts)  # tensors
            if rounding is None:
                return value, None
            spread: Any = sum(part[0].abs() for part in parts)  # k terms: k − 1 roundings
            carried: Any = sum(part[1] for part in parts)
            return value, carried + (len(parts) - 1) * rounding.store * spread
        if isinstance(expr, sp.HadamardProduct):
            (value, bound), *rest = [self(factor) for factor in expr.args]
            for other, other_bound in rest:
                if rounding is not None:
                    product = value * other
                    bound = value.abs() * other_bound + bound * other.abs()
                    bound = bound + rounding.store * product.abs()
                value = value * other
            return value, bound
        if isinstance(expr, Softmax) and expr.sink is None:
            return self.softmax(*self(expr.arg))
        if isinstance(expr, sp.MatrixSlice):
            return columns(self, expr)
        if isinstance(expr, Concat):
            value, bound = self(expr.block)
            side = lambda t: torch.cat(t.unbind(-3), dim=-1).unsqueeze(-3)  # noqa: E731
            return side(value), None if bound is None else side(bound)
        found = evaluate_variant_form(self, expr)
        if found is None:
            raise NotImplementedError(f"no evaluation for {type(expr).__name__}: {expr}")
        return found

    def _scalar(self, expr: sp.Expr) -> float:
        if expr not in self._scalars:
            sizes = {symbol: sp.sympify(value) for symbol, value in self.sizes.items()}
            self._scalars[expr] = float(expr.xreplace(sizes))
        return self._scalars[expr]

    def _coefficient(self, expr: sp.Expr) -> tuple[Any, Any]:
        """A number (1/√c_h), or per head where it reads a parameter's entry (−μ_ℓ)."""
        if expr.has(MatrixElement) or L.ell in expr.free_symbols:
            return coefficient(self, expr)
        return self._scalar(expr), 0.0

    def _product(self, expr: sp.MatMul) -> tuple[Any, Any]:
        rounding = self.rounding
        coefficient = sp.Mul(*[a for a in expr.args if not isinstance(a, sp.MatrixExpr)])
        factors = [a for a in expr.args if isinstance(a, sp.MatrixExpr)]
        value, bound = self(factors[0])
        for factor in factors[1:]:
            other, other_bound = self(factor)
            product = value @ other
            if rounding is not None:
                spread = value.abs() @ other.abs()
                bound = value.abs() @ other_bound + bound @ other.abs()
                bound = bound + rounding.gamma(value.shape[-1]) * spread
                bound = bound + rounding.store * product.abs()
            value = product
        if coefficient != 1:
            scale, scale_bound = self._coefficient(coefficient)
            unscaled = value
            value = scale * value
            if rounding is not None:
                bound = abs(scale) * bound + scale_bound * unscaled.abs()
                bound = bound + 2 * rounding.store * value.abs()
        return value, bound

    def softmax(self, scores: Any, bound: Any) -> tuple[Any, Any]:
        """Row-wise softmax; a row with no finite score is NaN (IEEE) or zero (derive's)."""
        torch = self.torch
        weights = torch.softmax(scores, dim=-1)
        finite = torch.isfinite(scores)
        if self.empty_rows == "zero":
            weights = torch.where(finite.any(-1, keepdim=True), weights, 0.0)
        if self.rounding is None:
            return weights, None
        rounding = self.rounding
        sums, store, scores_in = rounding.sums, rounding.store, 0.0
        if rounding.softmax:  # in a coarser precision: the scores rounded to it on the way in
            sums = store = rounding.softmax
            scores_in = rounding.softmax * torch.where(finite, scores.abs(), 0.0)
        top = torch.where(finite, scores, -torch.inf).amax(-1, keepdim=True)
        shift = torch.where(finite, (scores - top).abs(), 0.0)
        error = torch.where(finite, bound, 0.0) + scores_in + sums * shift
        a = torch.nan_to_num(weights)
        spread = a * (error + (a * error).sum(-1, keepdim=True))
        terms = scores.shape[-1] + 3
        return weights, spread + (terms * sums + store) * a
