"""Operation and FLOP counts, read off each step of a graph.

Each step is computed once (once per head for a step of head ℓ), so a matrix read by several
steps (Q feeds every head) is counted once. A step's matrix form is counted by its parts: a
product of k matrices is k − 1 matrix products, a transpose is a transpose; a scalar factor
(1/√c), the softmax, an element-wise function and the mask are not matrix products, nor is a
diagonal scaling (diag γ) or a constant pattern (RoPE's rotation R, a signed permutation). A
step SymPy finds no matrix form for (its entries, `Entries`) is counted off its element: each
sum over an index k of two matrices' entries that both read k (Σ_j q̂_{m,j} k̂_{p,j}, the
product Q̂ K̂ᵀ) is one matrix product, with a transpose where an operand is read by its columns
(a sum over the heads, Σ_{ℓ'} P_{ℓ',ℓ} ω̃^{(ℓ')}, the product of P and the heads' matrices
stacked), and an element-wise formula is no matrix product; two such sums of the same
matrices read the same way are one product (a softmax's numerator and denominator read the
same scores). A product of an (a × b) and a (b × e) matrix costs 2abe FLOPs (one multiply and
one add per term), the count of ``torch.utils.flop_counter``.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp
from sympy import Indexed, MatMul, MatrixExpr, MatrixSymbol, Sum, Transpose

from ..graph import Graph
from ..notation import Diag, Entries
from ..notation import letters as L
from .forward import Step, steps

__all__ = ["operation_count", "flop_count", "step_flops", "decode_flops", "Product"]

#: What one part of a step costs: (matrix products, their FLOPs, transposes).
Product = tuple[sp.Expr, sp.Expr, sp.Expr]

#: What an (a × b) by (b × e) product costs, from (a, b, e).
Cost = Callable[[sp.Expr, sp.Expr, sp.Expr], sp.Expr]


def _flops(rows: sp.Expr, inner: sp.Expr, cols: sp.Expr) -> sp.Expr:
    """2abe: one multiply and one add per term."""
    return 2 * rows * inner * cols


def _one_row(rows: sp.Expr, inner: sp.Expr, cols: sp.Expr) -> sp.Expr:
    """The product for one new token of a cache of m: its one row (the rows n of the
    product are the tokens), every other n the m keys it reads."""
    return _flops(
        sp.sympify(rows).xreplace({L.n: 1}),
        *(sp.sympify(x).xreplace({L.n: L.m}) for x in (inner, cols)),
    )


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


def _form_products(form: sp.Basic, cost: Cost = _flops) -> list[Product]:
    """The matrix products of a matrix form (each distinct sub-expression once) and its
    transposes (as products of no FLOPs)."""
    found: list[Product] = []
    seen: set = set()

    def walk(expr: sp.Basic) -> None:
        if expr in seen:
            return
        seen.add(expr)
        if isinstance(expr, MatMul) and len(factors := _matrices(expr)) > 1:
            rows = factors[0].shape[0]  # a number times a matrix (μ Δ) is no product
            for left, right in zip(factors, factors[1:], strict=False):
                found.append((sp.S.One, cost(rows, left.shape[1], right.shape[1]), sp.S.Zero))
        elif isinstance(expr, Transpose):
            found.append((sp.S.Zero, sp.S.Zero, sp.S.One))
        for arg in expr.args:
            if isinstance(arg, MatrixExpr):
                walk(arg)

    walk(form)
    return found


def _of_head(entry: Indexed, k: sp.Symbol) -> bool:
    """True for an entry of head k, summed over k (Σ_{ℓ'} P_{ℓ',ℓ} ω̃^{(ℓ')}_{m,p}: the heads'
    matrices stacked, h × n², multiplied by P_Lᵀ, one product per head ℓ)."""
    return len(entry.indices) == 3 and entry.indices[0] == k


def _entry_products(step: Step, cost: Cost = _flops) -> list[Product]:
    """The matrix products in a step's element (see the module docstring)."""
    shapes, found, seen = step.shapes, [], set()
    rows, cols = shapes[step.output]
    for total in step.element.rhs.atoms(Sum):
        if len(total.limits) != 1:
            continue
        ((k, low, high),) = total.limits
        entries = [f for f in sp.Mul.make_args(total.function) if isinstance(f, Indexed)]
        read = [
            e
            for e in entries
            if k in e.indices[-2:] or _of_head(e, k)
            if L.letter_of(e) not in L.CONSTANT_LETTERS
        ]
        if len(read) != 2:
            continue
        read.sort(key=lambda e: _of_head(e, k))  # a stack of heads read at k: the right one
        orientation = tuple(
            (L.letter_of(e), 0 if _of_head(e, k) else list(e.indices[-2:]).index(k)) for e in read
        )
        if orientation in seen:
            continue
        seen.add(orientation)
        (_, first), (_, second) = orientation
        transposes = sp.Integer(int(first == 0) + int(second == 1))  # Y Z: y_{a,k} z_{k,b}
        found.append((sp.S.One, cost(rows, high - low + 1, cols), transposes))
    return found


def _products(step: Step, cost: Cost = _flops) -> list[Product]:
    """The products of one step, each as often as the step is computed (h times per head)."""
    if step.matrix is None:  # a constant: a pattern of numbers
        return []
    form = step.matrix.rhs
    found = _entry_products(step, cost) if isinstance(form, Entries) else _form_products(form, cost)
    times = L.h if step.head else sp.S.One
    return [tuple(times * part for part in product) for product in found]


def _relations(graph: Graph, expr: sp.Expr) -> sp.Expr:
    return sp.expand(sp.sympify(expr).subs([(r.lhs, r.rhs) for r in graph.relations]))


def operation_count(graph: Graph) -> dict[str, int | sp.Expr]:
    """Matrix products and transposes of the graph's steps."""
    found = [product for step in steps(graph) for product in _products(step)]
    counts = {
        "matrix products": sp.Add(*[count for count, _, _ in found]),
        "transposes": sp.Add(*[transposes for _, _, transposes in found]),
    }
    return {key: int(value) if value.is_Integer else value for key, value in counts.items()}


def flop_count(graph: Graph) -> sp.Expr:
    """FLOPs of the graph's matrix products, in n, d, c (and h)."""
    total = sp.Add(*[flops for step in steps(graph) for _, flops, _ in _products(step)])
    return _relations(graph, total)


def decode_flops(graph: Graph) -> sp.Expr:
    """FLOPs of one new token generated with a cache of the m tokens before it: each product
    of the graph for that token's one row (its query, its own key and value, its row of scores
    against the m keys, its context row), every other n read as the m cached keys."""
    total = sp.Add(*[flops for step in steps(graph) for _, flops, _ in _products(step, _one_row)])
    return _relations(graph, total)


def step_flops(graph: Graph) -> sp.Expr:
    """FLOPs of each step's own matrix products, summed (for a graph of separate outputs)."""
    return flop_count(graph)
