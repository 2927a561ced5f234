"""Operation and FLOP counts, read off the composed matrix expression of a graph's output.

Counted on ``softmax(X W_q (X W_k)^T / √c) X W_v``: a product of k matrices is k − 1 matrix
products, a transpose is a transpose; a scalar factor (1/√c), the softmax and the mask are not
matrix products. A sub-expression that appears twice is computed once (Q feeds every head);
inside the concatenation of heads, a sub-expression that depends on the head index ℓ is computed
once per head. A product of an (a × b) and a (b × e) matrix costs 2abe FLOPs (one multiply and
one add per term), the count of ``torch.utils.flop_counter``.
"""

from __future__ import annotations

import sympy as sp
from sympy import MatMul, MatrixExpr, MatrixSymbol, Transpose

from ..graph import Graph
from ..notation import Concat, Diag
from ..notation import letters as L
from .compose import composed_expression
from .forward import steps

__all__ = ["operation_count", "flop_count", "step_flops"]


def _walk(expr: sp.Basic, heads: sp.Expr, visit, seen: set) -> None:
    """Visit each distinct matrix sub-expression once, with how many times it is computed."""
    if expr in seen:
        return
    seen.add(expr)
    per_head = heads != 1 and L.ell in expr.free_symbols
    visit(expr, heads if per_head else sp.S.One)
    inner = expr.count if isinstance(expr, Concat) else heads
    for arg in expr.args:
        if isinstance(arg, MatrixExpr):
            _walk(arg, inner, visit, seen)


def _matrices(product: MatMul) -> list[MatrixExpr]:
    """The factors of a product that cost a matrix product: a diagonal scaling (diag γ) and a
    constant pattern (the rotation R of RoPE, a signed permutation: a copy of columns) are
    not counted."""
    return [
        arg
        for arg in product.args
        if isinstance(arg, MatrixExpr)
        and not isinstance(arg, Diag)
        and not (isinstance(arg, MatrixSymbol) and str(arg.name) in L.CONSTANT_LETTERS)
    ]


def operation_count(graph: Graph) -> dict[str, int | sp.Expr]:
    """Matrix products and transposes in the composed expression of the graph's output."""
    counts: dict[str, sp.Expr] = {"matrix products": sp.S.Zero, "transposes": sp.S.Zero}

    def visit(expr: sp.Basic, times: sp.Expr) -> None:
        if isinstance(expr, MatMul):
            counts["matrix products"] += times * max(0, len(_matrices(expr)) - 1)
        elif isinstance(expr, Transpose):
            counts["transposes"] += times

    _walk(composed_expression(graph), sp.S.One, visit, set())
    return {key: int(value) if value.is_Integer else value for key, value in counts.items()}


def flop_count(graph: Graph) -> sp.Expr:
    """FLOPs of the matrix products of the graph's output, in n, d, c (and h)."""
    total = sp.S.Zero

    def visit(expr: sp.Basic, times: sp.Expr) -> None:
        nonlocal total
        if isinstance(expr, MatMul) and len(factors := _matrices(expr)) > 1:
            rows = factors[0].shape[0]  # a number times a matrix (μ Δ) is no product
            for left, right in zip(factors, factors[1:], strict=False):
                total += times * 2 * rows * left.shape[1] * right.shape[1]

    _walk(composed_expression(graph), sp.S.One, visit, set())
    return sp.expand(total.subs([(r.lhs, r.rhs) for r in graph.relations]))


def step_flops(graph: Graph) -> sp.Expr:
    """FLOPs of each step's own matrix product, summed (for a graph of separate outputs)."""
    total = sp.S.Zero
    for step in steps(graph):
        form = step.matrix.rhs if step.matrix is not None else None
        if isinstance(form, MatMul) and len(factors := _matrices(form)) > 1:
            rows = factors[0].shape[0]
            for left, right in zip(factors, factors[1:], strict=False):
                total += 2 * rows * left.shape[1] * right.shape[1]
    return sp.expand(total)
