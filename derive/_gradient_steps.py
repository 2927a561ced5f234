r"""One gradient step at concrete sizes, its compact matrix form, and the proofs that they agree.

`compact_forms` writes the matrix formulas of the backward pass in the named entries of the
forward and backward steps (per head, on the head's columns):

$$dA = dC\,V^\top,\quad dV = A^\top dC,\quad
  d\tilde\omega_{m,p} = a_{m,p}\Big(da_{m,p} - \sum_r a_{m,r}\,da_{m,r}\Big),\quad
  d\Omega = \frac{d\tilde\Omega}{\sqrt{c}},\quad dQ = d\Omega\,K,\quad dK = d\Omega^\top Q,$$
$$dW_q = X^\top dQ,\ dW_k = X^\top dK,\ dW_v = X^\top dV,\quad
  dX = dQ\,W_q^\top + dK\,W_k^\top + dV\,W_v^\top,\quad
  d\hat{C} = dC\,W_o^\top,\ dW_o = \hat{C}^\top dC,\ dC^{(\ell)} = d\hat{C}_{:,\,\ell}.$$

`residual` subtracts the compact form from the derived one (`ExplicitGradients`) and simplifies
the difference to zero; `rowsum_residual` does the same for Σ_r a_{m,r} da_{m,r} = Σ_j dc_{m,j}
c_{m,j}.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
from sympy import Add, ImmutableMatrix, Matrix, sqrt

from . import _notation as N

__all__ = ["GradientStep", "compact_forms", "residual", "rowsum_residual"]


@dataclass(frozen=True)
class GradientStep:
    """One gradient at concrete sizes.

    Attributes:
        output: its key, ``"d"`` + the forward key (``"dV"``, ``"dA_2"`` for head 2).
        of: the forward matrix it is the gradient of (``"V"``, ``"A_2"``).
        head: the head (1-based) for per-head gradients, else None.
        entries: its named entries (dv_{p,j}, ...), the left-hand sides.
        formula: each entry derived by the chain rule, in named entries of the forward steps and
            of the gradients before it (dv_{p,j} = Σ_m dc_{m,j} a_{m,p}).
        compact: the matrix form at these sizes, in the same named entries (Aᵀ dC).
    """

    output: str
    of: str
    head: int | None
    entries: ImmutableMatrix
    formula: ImmutableMatrix
    compact: ImmutableMatrix

    #: Read by `derive._values.evaluate_steps`: gradients are evaluated on Floats.
    polynomial = False
    name = "gradient"

    def _repr_latex_(self) -> str:
        from ._sections import explicit_lines

        return "$$\\begin{aligned}" + " \\\\ ".join(explicit_lines(self)) + "\\end{aligned}$$"


def _d(entries: ImmutableMatrix) -> ImmutableMatrix:
    return entries.applyfunc(lambda e: N.base("d" + e.base.label.name)[e.indices])


def _head(name: str, head: int | None, rows: int, cols: int) -> ImmutableMatrix:
    if head is None:
        return N.entries(name, rows, cols)
    return N.head_entries(name, head, rows, cols)


def _softmax_backward(a: ImmutableMatrix, da: ImmutableMatrix) -> ImmutableMatrix:
    """dω̃_{m,p} = a_{m,p} (da_{m,p} − Σ_r a_{m,r} da_{m,r})."""
    n = a.shape[0]

    def entry(m: int, p: int) -> sp.Expr:
        row_sum = Add(*[a[m, r] * da[m, r] for r in range(n)])
        return a[m, p] * (da[m, p] - row_sum)

    return ImmutableMatrix(n, n, entry)


def compact_forms(g) -> dict[str, ImmutableMatrix]:
    """The matrix form of every gradient of `g` (an `ExplicitGradients`), keyed like its steps."""
    n, d, c, w, heads = g.n, g.d, g.c, g.width, g.heads
    x = N.entries("x", n, d)
    q, k, v = (N.entries(name, n, c) for name in "qkv")
    dq, dk, dv, dc = (_d(N.entries(name, n, c)) for name in ("q", "k", "v", "ctx"))
    width = N.c_h if heads > 1 else N.c
    forms: dict[str, ImmutableMatrix] = {}
    d_v, d_q, d_k = Matrix.zeros(n, c), Matrix.zeros(n, c), Matrix.zeros(n, c)
    for head in range(1, heads + 1):
        label, which = (f"_{head}", head) if heads > 1 else ("", None)
        columns = slice((head - 1) * w, head * w)
        a = _head("a", which, n, n)
        d_context = _d(_head("ctx", which, n, w))
        d_omega = _d(_head("omega", which, n, n))
        forms["dA" + label] = d_context * v[:, columns].T
        forms["dOmega_scaled" + label] = _softmax_backward(a, _d(a))
        forms["dOmega" + label] = _d(_head("omegatilde", which, n, n)) / sqrt(width)
        d_v[:, columns] = a.T * d_context
        d_q[:, columns] = d_omega * k[:, columns]
        d_k[:, columns] = d_omega.T * q[:, columns]
        if heads > 1:
            forms["dC" + label] = _d(N.entries("ctxcat", n, c))[:, columns]
    forms |= {"dV": d_v, "dQ": d_q, "dK": d_k}
    for which in "qkv":
        forms[f"dW_{which}"] = x.T * {"q": dq, "k": dk, "v": dv}[which]
    weights = [N.entries(f"w{which}", d, c) for which in "qkv"]
    forms["dX"] = dq * weights[0].T + dk * weights[1].T + dv * weights[2].T
    if heads > 1:
        forms["dC_concat"] = dc * N.entries("wo", c, c).T
        forms["dW_o"] = N.entries("ctxcat", n, c).T * dc
    return {key: ImmutableMatrix(value) for key, value in forms.items()}


def reads_scaled_scores(step, width: sp.Expr) -> ImmutableMatrix:
    """The weights step written in ω̃ = ω/√c: exp(ω_{m,p}/√c) becomes exp(ω̃_{m,p})."""
    n = step.entries.shape[0]
    omega, scaled = _head("omega", step.head, n, n), _head("omegatilde", step.head, n, n)
    return step.formula.xreplace({o: sqrt(width) * s for o, s in zip(omega, scaled, strict=True)})


def _weights_step(g, head: int | None):
    (step,) = [s for s in g.forward.steps if s.name == "weights" and s.head == head]
    return step


def residual(g, step) -> ImmutableMatrix:
    """`step.formula − step.compact`, simplified (zero entries when the two agree).

    The softmax step: the weights a_{m,r} in the compact form become their formula in ω̃, each
    exp(ω̃_{m,r}) a positive symbol e_{m,r} (ω̃_{m,r} = log e_{m,r}), and `cancel` reduces the
    rational function. Every other step is a polynomial in named entries: `expand`.
    """
    difference = step.formula - step.compact
    if not step.of.startswith("Omega_scaled"):
        return ImmutableMatrix(difference.applyfunc(sp.expand))
    weights = _weights_step(g, step.head)
    width = N.c_h if g.heads > 1 else N.c
    in_scaled = reads_scaled_scores(weights, width)
    n = weights.entries.shape[0]
    scaled = _head("omegatilde", step.head, n, n)
    logs = {s: sp.log(sp.Symbol(f"e_{index}", positive=True)) for index, s in enumerate(scaled)}
    difference = difference.xreplace(dict(zip(weights.entries, in_scaled, strict=True)))
    return ImmutableMatrix(difference.xreplace(logs).applyfunc(sp.cancel))


def rowsum_residual(g) -> ImmutableMatrix:
    """Σ_r a_{m,r} da_{m,r} − Σ_j dc_{m,j} c_{m,j}, one column per head, with da and c replaced
    by their formulas (da_{m,r} = Σ_j dc_{m,j} v_{r,j}, c_{m,j} = Σ_r a_{m,r} v_{r,j}) and
    expanded."""
    columns = []
    for head in range(1, g.heads + 1):
        which, label = (head, f"_{head}") if g.heads > 1 else (None, "")
        a = _head("a", which, g.n, g.n)
        da = g.step("dA" + label).formula
        (context,) = [s for s in g.forward.steps if s.name == "context" and s.head == which]
        dc = _d(context.entries)
        column = []
        for m in range(g.n):
            left = Add(*[a[m, r] * da[m, r] for r in range(g.n)])
            right = Add(*[dc[m, j] * context.formula[m, j] for j in range(g.width)])
            column.append(sp.expand(left - right))
        columns.append(column)
    return ImmutableMatrix(g.n, g.heads, lambda m, head: columns[head][m])
