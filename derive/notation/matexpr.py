"""Matrix expressions SymPy lacks: the row-wise softmax and the concatenation of heads."""

from __future__ import annotations

import sympy as sp
from sympy import MatrixExpr

__all__ = ["Softmax", "Concat"]


class Softmax(MatrixExpr):
    r"""Row-wise softmax of a matrix expression: $\mathrm{softmax}(Z)_{m,p} = e^{z_{m,p}} /
    \sum_r e^{z_{m,r}}$ (``dim=-1`` in torch: over the keys p)."""

    def __new__(cls, arg: MatrixExpr) -> Softmax:
        return sp.Basic.__new__(cls, sp.sympify(arg))

    @property
    def arg(self) -> MatrixExpr:
        return self.args[0]

    @property
    def shape(self) -> tuple[sp.Expr, sp.Expr]:
        return self.args[0].shape


class Concat(MatrixExpr):
    r"""Blocks side by side: $[\,B^{(1)} \cdots B^{(h)}\,]$, the block `block` (which depends on
    the head index ℓ) for ℓ = 1 … `count`, concatenated along the columns."""

    def __new__(cls, block: MatrixExpr, count: sp.Expr) -> Concat:
        return sp.Basic.__new__(cls, block, sp.sympify(count))

    @property
    def block(self) -> MatrixExpr:
        return self.args[0]

    @property
    def count(self) -> sp.Expr:
        return self.args[1]

    @property
    def shape(self) -> tuple[sp.Expr, sp.Expr]:
        rows, cols = self.args[0].shape
        return rows, self.args[1] * cols
