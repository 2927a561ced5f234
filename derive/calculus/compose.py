"""Composing steps: one step's formula with the formulas of the steps it reads put in.

`inline(expr, graph, letters)` replaces every entry of the given letters by its declared
formula at that entry's indices (ω̂_{m,r} → ω̃_{m,r} + M_{m,r}); `composed_expression(graph)` does
the same at the matrix level, giving the whole mechanism as one expression in X and the weights.
"""

from __future__ import annotations

import functools

import sympy as sp
from sympy import Indexed, MatrixExpr, Sum

from ..graph import Graph
from ..notation import letters as L
from .forward import steps

__all__ = ["inline", "composed_expression"]


def _at(formula: sp.Eq, indices: tuple[sp.Expr, ...]) -> sp.Expr:
    """A declared formula at the given indices (the head index stays where it is)."""
    lhs = formula.lhs.indices
    free = lhs[1:] if len(lhs) == 3 else lhs
    rhs = formula.rhs
    bound = {v for s in rhs.atoms(Sum) for v in s.variables}
    clashes = bound & set().union(*(sp.sympify(k).free_symbols for k in indices))
    rhs = rhs.xreplace({v: sp.Dummy(str(v), integer=True, positive=True) for v in clashes})
    return rhs.xreplace(dict(zip(free, indices, strict=True)))


def inline(expr: sp.Expr, graph: Graph, letters: set[str]) -> sp.Expr:
    """`expr` with each entry of `letters` replaced by its step's formula, repeatedly (so that
    inlining ω̂ and M together reaches ω̃ and numbers)."""
    for _ in range(len(letters) + 1):
        entries = [e for e in expr.atoms(Indexed) if L.letter_of(e) in letters]
        if not entries:
            return expr
        found = {}
        for entry in entries:
            step = graph.step(L.letter_of(entry))
            indices = entry.indices[1:] if len(entry.indices) == 3 else entry.indices
            found[entry] = _at(step.element, indices)
        expr = expr.xreplace(found)
    return expr


@functools.cache
def composed_expression(graph: Graph) -> MatrixExpr:
    """The graph's output as one matrix expression in its inputs: each step's output symbol
    replaced by its derived matrix form, with no simplification."""
    chain = [s.matrix for s in steps(graph) if s.matrix is not None]
    definitions = {matrix.lhs: matrix.rhs for matrix in chain}
    expr = definitions[chain[-1].lhs]
    for _ in chain:  # each pass resolves one level; the chain is at most len(chain) deep
        expr = expr.xreplace(definitions)
    return expr
