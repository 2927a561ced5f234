r"""The two derivations of the backward pass agree: the chain rule at concrete sizes
(`ExplicitGradients`) against the matrix forms derived at symbolic sizes, instantiated.

`residual` subtracts one from the other and simplifies the difference: by `expand` where it
is a polynomial (with roots, an RMS normalisation's: over one denominator, `simplify`); where it
reads a step that is not a polynomial (the softmax's weights, a sigmoid), with each entry of
such a step replaced by its formula, each exp(·) by a positive symbol, and `cancel` (a rational
function). `rowsum_residual` does the same for Σ_r a_{m,r} \bar{a}_{m,r} = Σ_j \bar{z}_{m,j}
z_{m,j}.
"""

from __future__ import annotations

import sympy as sp
from sympy import Add, ImmutableMatrix

from ..notation import letters as L
from ..notation.functions import Indicator

__all__ = ["residual", "rowsum_residual"]


def _step(g, letter: str, head: int | None):
    (step,) = [s for s in g.forward.steps if s.step.output == letter and s.head == head]
    return step


def _formulas(g) -> dict:
    """Each entry of a forward step that is not a polynomial (the weights) -> its formula."""
    steps = [s for s in g.forward.steps if not s.polynomial and s.formula.has(sp.exp, sp.Function)]
    return {entry: value for s in steps for entry, value in zip(s.entries, s.formula, strict=True)}


def residual(g, step) -> ImmutableMatrix:
    """`step.formula − step.compact`, simplified (zero entries when the two agree)."""
    difference = step.formula - step.compact
    formulas = _formulas(g)
    if not difference.has(*formulas):
        return ImmutableMatrix(difference.applyfunc(_polynomial_or_root))
    for _ in range(3):  # a weight's formula may read another such step's entries
        difference = difference.xreplace(formulas)
    inside = {e for power in difference.atoms(sp.exp) for e in power.atoms(sp.Indexed)}
    logs = {
        e: sp.log(sp.Symbol(f"e_{k}", positive=True))  # exp(s) = e: a rational function
        for k, e in enumerate(sorted(inside, key=str))
    }
    return ImmutableMatrix(
        difference.xreplace(logs).applyfunc(lambda value: sp.expand(sp.cancel(value)))
    )


def _polynomial_or_root(value: sp.Expr) -> sp.Expr:
    """`expand`; where roots remain (an RMS normalisation's), over one denominator and
    simplified; where a rule is piecewise (a clamp's derivative, written by the chain rule as a
    Piecewise and by the symbolic form as an indicator), both as Piecewise, folded into one."""
    value = _one_piecewise(value)
    value = sp.expand(value)
    if value == 0 or not any(not p.exp.is_Integer for p in value.atoms(sp.Pow)):
        return value
    return sp.simplify(sp.together(value))


def _one_piecewise(value: sp.Expr) -> sp.Expr:
    """`value` with each indicator [P] written as a Piecewise and every Piecewise folded into
    one, whose branches SymPy then compares (two writings of one piecewise rule cancel)."""
    if not value.has(Indicator, sp.Piecewise):
        return value
    written = value.replace(Indicator, lambda condition: sp.Piecewise((1, condition), (0, True)))
    return sp.piecewise_fold(written)


def rowsum_residual(g) -> ImmutableMatrix:
    """Σ_r a_{m,r} \\bar{a}_{m,r} − Σ_j \\bar{z}_{m,j} z_{m,j}, one column per head, with \\bar{a}
    and z replaced by their formulas and expanded."""
    columns = []
    for head in range(1, g.heads + 1):
        which, label = (head, f"_{head}") if g.heads > 1 else (None, "")
        context = _step(g, "C_l" if which else "C", which)
        a = _step(g, "A_l" if which else "A", which).entries
        d_a = g.step("dA" + label).formula
        d_z = context.entries.applyfunc(lambda e: L.base("d" + e.base.label.name)[e.indices])
        column = []
        queries, keys = a.shape
        for m in range(queries):
            left = Add(*[a[m, r] * d_a[m, r] for r in range(keys)])
            right = Add(*[d_z[m, j] * context.formula[m, j] for j in range(context.formula.cols)])
            column.append(sp.expand(left - right))
        columns.append(column)
    return ImmutableMatrix(g.n, g.heads, lambda m, head: columns[head][m])
