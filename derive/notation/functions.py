r"""Scalar functions SymPy lacks that attention's variants read: the logistic sigmoid, and
Iverson's bracket.

`Sigmoid` is σ(x) = 1 / (1 + e^{−x}) as one SymPy function, so that a formula keeps it whole:
its derivative is σ(x)(1 − σ(x)) (`fdiff`), it evaluates to any precision (`evalf`), it
rewrites to exponentials (``rewrite(sympy.exp)``, which limits use), and it prints as
``\sigma\left(x\right)``; applied entry by entry to a matrix it prints σ(Z).
"""

from __future__ import annotations

import sympy as sp

__all__ = ["Sigmoid", "Indicator", "indicators", "is_index_condition"]


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
        """SymPy's hook that evaluates ``Sigmoid(x)`` where it has an exact value.

        Args:
            x: the argument.

        Returns:
            1/2 at 0, 1 at ∞, 0 at −∞; None elsewhere (``Sigmoid(x)`` stays as it is).
        """
        if x.is_zero:
            return sp.S.Half
        if x is sp.oo:
            return sp.S.One
        if x is sp.S.NegativeInfinity:
            return sp.S.Zero
        return None

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        """SymPy's hook for the derivative with respect to the argument.

        Args:
            argindex: which argument (1-based); σ has one, so 1, the default.

        Returns:
            σ(x)(1 − σ(x)), in ``Sigmoid(x)`` itself.
        """
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


class Indicator(sp.Function):
    r"""Iverson's bracket $[P]$: 1 where the condition $P$ holds, 0 where it does not.

    The derivation writes a condition on indices this way inside a sum ($\sum_{\ell=1}^{n}
    [p < \ell \le m]\, x_{\ell}$), where SymPy's ``Piecewise`` would be carried out of the
    sum that binds its index (``piecewise_fold`` folds through a ``Sum`` whatever its
    condition reads). Its derivative is 0: a condition on indices does not vary with an entry,
    and one on values (``[x > 0]``, ReLU's) is constant but at its kink, where the derivative
    taken is the almost-everywhere one (the documents state it).

    Example:
        >>> import sympy as sp
        >>> m, p = sp.symbols("m p", integer=True, positive=True)
        >>> Indicator(sp.Le(p, m)).xreplace({m: 3, p: 2})
        1
    """

    nargs = 1
    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, condition: sp.Basic) -> sp.Expr | None:
        """SymPy's hook that evaluates ``Indicator(P)`` where `P` is decided.

        Args:
            condition: the condition P.

        Returns:
            1 where P is ``sympy.true``, 0 where it is ``sympy.false``; None otherwise
            (``Indicator(P)`` stays as it is).
        """
        if condition is sp.true:
            return sp.S.One
        if condition is sp.false:
            return sp.S.Zero
        return None

    def _eval_derivative(self, symbol: sp.Basic) -> sp.Expr:
        return sp.S.Zero

    def _eval_is_real(self) -> bool:
        return True

    def _eval_power(self, power: sp.Expr) -> sp.Expr | None:
        return self if power.is_positive else None  # [P]^k = [P]

    def _attention_latex(self, printer, exp: str | None = None) -> str:
        body = rf"\left[{printer._print(self.args[0])}\right]"
        return body if exp is None else rf"{body}^{{{exp}}}"

    _latex = _attention_latex


def is_index_condition(condition: sp.Basic) -> bool:
    """A condition on integers only (indices and sizes: p < ℓ ≤ m), no entry or value."""
    return not condition.atoms(sp.Indexed) and all(s.is_integer for s in condition.free_symbols)


def indicators(expr: sp.Expr) -> sp.Expr:
    """`expr` with every ``Piecewise`` written with Iverson's brackets:
    Piecewise((e_1, P_1), (e_2, P_2), (e_3, True)) = e_1 [P_1] + e_2 [¬P_1 ∧ P_2] + e_3 [¬P_1 ∧
    ¬P_2], innermost first (a Piecewise with no last ``True`` is 0 where none holds)."""
    if not expr.has(sp.Piecewise):
        return expr

    def bracketed(piecewise: sp.Piecewise) -> sp.Expr:
        terms, before = [], sp.true
        for value, condition in piecewise.args:
            here = sp.And(before, condition)
            terms.append(value * Indicator(here) if here is not sp.true else value)
            before = sp.And(before, sp.Not(condition))
            if before is sp.false:
                break
        return sp.Add(*terms)

    return expr.replace(lambda e: isinstance(e, sp.Piecewise), bracketed)
