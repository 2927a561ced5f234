r"""The two derivations of the backward pass agree: the chain rule at concrete sizes
(`ExplicitGradients`) against the matrix forms derived at symbolic sizes, instantiated.

`residual` subtracts one from the other and simplifies the difference: a polynomial step by
`expand` (with roots, an RMS normalisation's: over one denominator, `simplify`); the
softmax's step with each weight replaced by its formula, each exp(ω̃_{m,r}) by a
positive symbol e_{m,r}, and `cancel` (a rational function). `rowsum_residual` does the same for
Σ_r a_{m,r} \bar{a}_{m,r} = Σ_j \bar{z}_{m,j} z_{m,j}.
"""

from __future__ import annotations

import sympy as sp
from sympy import Add, ImmutableMatrix

from ..notation import letters as L

__all__ = ["residual", "rowsum_residual"]


def _weights(g, head: int | None):
    (step,) = [s for s in g.forward.steps if s.name == "weights" and s.head == head]
    return step


def residual(g, step) -> ImmutableMatrix:
    """`step.formula − step.compact`, simplified (zero entries when the two agree)."""
    difference = step.formula - step.compact
    if not step.of.startswith("Omega_scaled"):
        return ImmutableMatrix(difference.applyfunc(_polynomial_or_root))
    weights = _weights(g, step.head)
    scores = sorted({e for value in weights.formula for e in value.atoms(sp.Indexed)}, key=str)
    logs = {s: sp.log(sp.Symbol(f"e_{k}", positive=True)) for k, s in enumerate(scores)}
    difference = difference.xreplace(dict(zip(weights.entries, weights.formula, strict=True)))
    return ImmutableMatrix(difference.xreplace(logs).applyfunc(sp.cancel))


def _polynomial_or_root(value: sp.Expr) -> sp.Expr:
    """`expand`; where roots remain (an RMS normalisation's), over one denominator and
    simplified."""
    value = sp.expand(value)
    if value == 0 or not any(not p.exp.is_Integer for p in value.atoms(sp.Pow)):
        return value
    return sp.simplify(sp.together(value))


def rowsum_residual(g) -> ImmutableMatrix:
    """Σ_r a_{m,r} \\bar{a}_{m,r} − Σ_j \\bar{z}_{m,j} z_{m,j}, one column per head, with \\bar{a}
    and z replaced by their formulas and expanded."""
    columns = []
    for head in range(1, g.heads + 1):
        which, label = (head, f"_{head}") if g.heads > 1 else (None, "")
        (context,) = [s for s in g.forward.steps if s.name == "context" and s.head == which]
        a = _weights(g, which).entries
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
