"""Matrix expressions SymPy lacks: the row-wise softmax, the concatenation of heads, the RMS
normalisation of rows, a diagonal matrix from a row of gains, and a matrix given by its entries."""

from __future__ import annotations

import sympy as sp
from sympy import MatrixExpr

__all__ = ["Softmax", "Concat", "GroupConcat", "RMSNorm", "Diag", "Entries"]


class Softmax(MatrixExpr):
    r"""Row-wise softmax of a matrix expression: $\mathrm{softmax}(Z)_{m,p} = e^{z_{m,p}} /
    \sum_r e^{z_{m,r}}$ (``dim=-1`` in torch: over the keys p); with a `sink` ζ (an attention
    sink's logit), $e^{z_{m,p}} / (e^{\zeta} + \sum_r e^{z_{m,r}})$."""

    def __new__(cls, arg: MatrixExpr, sink: sp.Expr | None = None) -> Softmax:
        if sink is None:
            return sp.Basic.__new__(cls, sp.sympify(arg))
        return sp.Basic.__new__(cls, sp.sympify(arg), sp.sympify(sink))

    @property
    def arg(self) -> MatrixExpr:
        return self.args[0]

    @property
    def sink(self) -> sp.Expr | None:
        """The sink's logit in each row's denominator, or None."""
        return self.args[1] if len(self.args) > 1 else None

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


class GroupConcat(MatrixExpr):
    r"""Blocks side by side, block ν the sum of the heads ℓ = `first` … `last` (expressions in
    ν): $[\,\sum_{\ell \in \text{group } 1} B^{(\ell)} \cdots\,]$, ν = 1 … `count` — the
    adjoint of heads reading a shared group's block."""

    def __new__(cls, block: MatrixExpr, count: sp.Expr, first: sp.Expr, last: sp.Expr):
        return sp.Basic.__new__(cls, block, *(sp.sympify(x) for x in (count, first, last)))

    block = property(lambda self: self.args[0])
    count = property(lambda self: self.args[1])
    first = property(lambda self: self.args[2])
    last = property(lambda self: self.args[3])

    @property
    def shape(self) -> tuple[sp.Expr, sp.Expr]:
        rows, cols = self.args[0].shape
        return rows, self.args[1] * cols


class RMSNorm(MatrixExpr):
    r"""Each row divided by its root mean square: $\mathrm{rmsnorm}(Z)_{m,j} = z_{m,j} /
    \sqrt{\sum_{j'} z_{m,j'}^2 / w + \epsilon}$, w the number of columns."""

    def __new__(cls, arg: MatrixExpr, eps: sp.Expr) -> RMSNorm:
        return sp.Basic.__new__(cls, sp.sympify(arg), sp.sympify(eps))

    @property
    def arg(self) -> MatrixExpr:
        return self.args[0]

    @property
    def shape(self) -> tuple[sp.Expr, sp.Expr]:
        return self.args[0].shape


class Diag(MatrixExpr):
    r"""The diagonal matrix whose diagonal is a row $\gamma$ (1 × w): $Z\,\mathrm{diag}(\gamma)$
    scales column j of Z by $\gamma_{1,j}$."""

    def __new__(cls, row: MatrixExpr) -> Diag:
        return sp.Basic.__new__(cls, sp.sympify(row))

    @property
    def row(self) -> MatrixExpr:
        return self.args[0]

    @property
    def shape(self) -> tuple[sp.Expr, sp.Expr]:
        return self.args[0].shape[1], self.args[0].shape[1]


class Entries(MatrixExpr):
    r"""A matrix given by its entry: $[\,e_{m,p}\,]_{m,p}$, where no matrix form was found."""

    def __new__(cls, entry: sp.Expr, indices: tuple, rows: sp.Expr, cols: sp.Expr) -> Entries:
        return sp.Basic.__new__(
            cls, sp.sympify(entry), sp.Tuple(*indices), sp.sympify(rows), sp.sympify(cols)
        )

    @property
    def entry(self) -> sp.Expr:
        return self.args[0]

    @property
    def indices(self) -> tuple:
        return tuple(self.args[1])

    def _entry(self, i: sp.Expr, j: sp.Expr, **kwargs: object) -> sp.Expr:
        """Entry (i, j), 0-based as SymPy asks; the entry is written 1-based."""
        at = zip(self.indices, (i + 1, j + 1), strict=True)
        return self.entry.xreplace({index: value for index, value in at if index.is_Symbol})

    @property
    def shape(self) -> tuple[sp.Expr, sp.Expr]:
        return self.args[2], self.args[3]
