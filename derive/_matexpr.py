"""Matrix expressions SymPy lacks (row-wise softmax, concatenation of heads), and the entry of a
matrix product in the seed's 1-based indices."""

from __future__ import annotations

import sympy as sp
from sympy import MatrixExpr, Sum
from sympy.matrices.expressions.matexpr import MatrixElement

__all__ = ["Softmax", "Concat", "entry_of"]


class Softmax(MatrixExpr):
    r"""Row-wise softmax of a matrix expression: $\mathrm{softmax}(Z)_{m,p} = e^{z_{m,p}} /
    \sum_r e^{z_{m,r}}$ (``axis=1`` in the seed, the last axis in torch)."""

    def __new__(cls, arg: MatrixExpr) -> Softmax:
        return sp.Basic.__new__(cls, sp.sympify(arg))

    @property
    def arg(self) -> MatrixExpr:
        return self.args[0]

    @property
    def shape(self) -> tuple[sp.Expr, sp.Expr]:
        return self.args[0].shape


class Concat(MatrixExpr):
    r"""The heads side by side: $\hat{C} = [\,C^{(1)} \cdots C^{(h)}\,]$ (`heads` blocks of `head`'s
    shape, concatenated along the columns)."""

    def __new__(cls, head: MatrixExpr, heads: sp.Expr) -> Concat:
        return sp.Basic.__new__(cls, head, sp.sympify(heads))

    @property
    def shape(self) -> tuple[sp.Expr, sp.Expr]:
        rows, cols = self.args[0].shape
        return rows, self.args[1] * cols


def entry_of(
    product: MatrixExpr, row: sp.Symbol, col: sp.Symbol, index: sp.Symbol, names: dict
) -> sp.Expr:
    """Entry (row, col) of a matrix product, expanded by SymPy, with 1-based indices.

    SymPy returns ``Sum(A[row-1, _k] * B[_k, col-1], (_k, 0, K-1))``; the dummy becomes the
    1-based `index` running 1..K and each `MatrixElement` M[a, b] the seed's entry m[a+1, b+1]
    (`names` maps each matrix symbol to the `IndexedBase` of its entries).
    """
    expanded = product[row - 1, col - 1]
    if isinstance(expanded, Sum):
        ((dummy, low, high),) = expanded.limits
        body = expanded.function.xreplace({dummy: index - 1})
        expanded = Sum(body, (index, low + 1, high + 1))

    def rename(element: sp.Expr) -> sp.Expr:
        return names[element.parent][element.i + 1, element.j + 1]

    return expanded.replace(lambda e: isinstance(e, MatrixElement), rename)
