r"""Scalar functions SymPy lacks that attention's variants read: the logistic sigmoid.

`Sigmoid` is σ(x) = 1 / (1 + e^{−x}) as one SymPy function, so that a formula keeps it whole:
its derivative is σ(x)(1 − σ(x)) (`fdiff`), it evaluates to any precision (`evalf`), it
rewrites to exponentials (``rewrite(sympy.exp)``, which limits use), and it prints as
``\sigma\left(x\right)``; applied entry by entry to a matrix it prints σ(Z).
"""

from __future__ import annotations

import sympy as sp

__all__ = ["Sigmoid"]


class Sigmoid(sp.Function):
    r"""The logistic sigmoid $\sigma(x) = 1 / (1 + e^{-x})$ (gates, sigmoid attention).

    Example:
        >>> import sympy as sp
        >>> x = sp.Symbol("x", real=True)
        >>> sp.diff(Sigmoid(x), x)
        (1 - Sigmoid(x))*Sigmoid(x)
        >>> Sigmoid(0), sp.limit(Sigmoid(x).rewrite(sp.exp), x, -sp.oo)
        (1/2, 0)
    """

    nargs = 1
    latex_name = r"\sigma"

    @classmethod
    def eval(cls, x: sp.Expr) -> sp.Expr | None:
        if x.is_zero:
            return sp.S.Half
        if x is sp.oo:
            return sp.S.One
        if x is sp.S.NegativeInfinity:
            return sp.S.Zero
        return None

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        return self * (1 - self)

    def _eval_rewrite_as_exp(self, x: sp.Expr, **kwargs: object) -> sp.Expr:
        return 1 / (1 + sp.exp(-x))

    def _eval_evalf(self, prec: int) -> sp.Expr:
        return self.rewrite(sp.exp)._eval_evalf(prec)

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real

    def _eval_is_positive(self) -> bool | None:
        return self.args[0].is_real

    def _attention_latex(self, printer, exp: str | None = None) -> str:
        body = rf"\sigma\left({printer._print(self.args[0])}\right)"
        return body if exp is None else rf"{body}^{{{exp}}}"

    _latex = _attention_latex
