"""The forward steps of a graph, each with the matrix form SymPy derives from its declaration.

`steps(graph)` pairs each `Declaration` with its matrix-level equation, found by `matrix_form`
from the element-wise formula (never looked up by the step's name): Q = X W_q from
q_{m,j} = Σ_i x_{m,i} (W_q)_{i,j}, A = softmax(Ω̃) from the quotient of exponentials, Ĉ =
[C^{(1)} ⋯ C^{(h)}] from an entry whose column is offset by the head. A constant step (the
causal mask) is a pattern of numbers, not a product: it has no matrix form beyond its letter. A
formula the rules of `matrix_form` cannot read is shown as the matrix of its entries
(`Entries`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import sympy as sp
from sympy import Eq, MatrixSymbol
from sympy.matrices.expressions.matexpr import MatrixElement

from ..graph import Declaration, Graph
from ..graph.errors import deriving
from ..notation import Concat, Entries
from ..notation import letters as L
from .indices import zero_based, zero_index
from .matrix_form import NoMatrixForm, matrix_form

__all__ = ["Step", "steps", "symbols_of", "declared_matrix"]


@dataclass(frozen=True)
class Step:
    """One step: its declaration and the matrix form derived from it.

    Attributes:
        declaration: the step as declared (element-wise formula, shapes).
        matrix: the derived matrix-level equation (``Eq(Omega, Q*K.T)``), or None for a
            constant step (the causal mask), whose matrix is a pattern of numbers.
    """

    declaration: Declaration
    matrix: Eq | None

    name = property(lambda self: self.declaration.name)
    output = property(lambda self: self.declaration.output)
    title = property(lambda self: self.declaration.title)
    element = property(lambda self: self.declaration.element)
    shapes = property(lambda self: dict(self.declaration.shapes))
    head = property(lambda self: self.declaration.head)

    def _repr_latex_(self) -> str:
        from ..notation import latex

        parts = [latex(self.matrix)] if self.matrix is not None else []
        return "$$" + r" \qquad ".join([*parts, latex(self.element)]) + "$$"


def symbols_of(shapes: dict) -> dict[str, MatrixSymbol]:
    """Letter -> `MatrixSymbol` of that shape."""
    return {letter: L.matrix_symbol(letter, *shape) for letter, shape in shapes.items()}


def declared_matrix(step: Declaration, relations: tuple[Eq, ...] = ()) -> Eq | None:
    """The matrix-level equation of one declaration, derived by `matrix_form`."""
    if step.constant:
        return None
    symbols = symbols_of(dict(step.shapes))
    output = symbols[step.output]
    row, col = step.free
    if isinstance(row, sp.Symbol | sp.Integer) and isinstance(col, sp.Symbol | sp.Integer):
        rhs = zero_based(step.element.rhs, tuple(x for x in (row, col) if x != 1), symbols)
        rhs, indices = _vector_axes(
            rhs, tuple(zero_index(x) if x != 1 else sp.S.Zero for x in (row, col))
        )
        try:
            form = matrix_form(rhs, indices, shape=output.shape)
        except NoMatrixForm:  # the matrix of its entries, as declared
            form = Entries(step.element.rhs, (row, col), *output.shape)
        return Eq(output, form, evaluate=False)
    # a block of columns: the entry's column is (ℓ − 1) w + j, with j running over the block
    (index,) = [s for s in col.free_symbols if s not in (L.ell,) and s not in L.SIZES]
    rhs = zero_based(step.element.rhs, (row, index), symbols)
    block = matrix_form(rhs, (zero_index(row), zero_index(index)))
    width = sp.expand(col - index).coeff(L.ell)
    count = sp.simplify((output.shape[1] / width).subs([(r.lhs, r.rhs) for r in relations]))
    return Eq(output, Concat(block, count), evaluate=False)


def _vector_axes(rhs: sp.Expr, indices: tuple) -> tuple[sp.Expr, tuple]:
    """A step with one entry per row (f[m, 1], n × 1) or per column: its axis of one entry given
    an index of its own, which the vectors it reads along that axis (w_f[i, 1], d × 1) share,
    so that its matrix form is found as any other's (σ(X w_f + b_f J)); entries of a 1 × 1
    matrix stay numbers."""
    found = list(indices)
    for axis, index in enumerate(indices):
        if index != 0:
            continue
        spare = found[axis] = sp.Dummy("u", integer=True)

        def shared(element, axis=axis, spare=spare):
            shape, at = element.parent.shape, [element.i, element.j]
            if shape[axis] == 1 and shape[1 - axis] != 1 and at[axis] == 0:
                at[axis] = spare
                return element.parent[at[0], at[1]]
            return element

        rhs = rhs.replace(lambda e: isinstance(e, MatrixElement), shared)
    return rhs, tuple(found)


@functools.cache
def steps(graph: Graph) -> tuple[Step, ...]:
    """Every step of `graph` with its derived matrix form, in forward order."""
    found = []
    for declaration in graph.declarations:
        with deriving(f"find the matrix form of step {declaration.name} ({declaration.output})"):
            found.append(Step(declaration, declared_matrix(declaration, graph.relations)))
    return tuple(found)
