r"""What SymPy derives about latent attention: a head's scores read the latent, not the keys.

The score of head ℓ with its query and key put in, down to X, W_q, U and W_uk (the split into
heads, the projections), the columns of head ℓ named as its blocks W_q^{(ℓ)}, W_uk^{(ℓ)}, and
the matrix form found by `matrix_form`: Ω^{(ℓ)} = X W_q^{(ℓ)} (W_uk^{(ℓ)})^⊤ U^⊤. The d × d_u
product W_q^{(ℓ)} (W_uk^{(ℓ)})^⊤ can be computed once ("absorbed"), and the scores then read the
cached latent U directly: K is never decompressed.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Indexed, MatMul

from ..calculus import inline, matrix_form
from ..calculus.forward import symbols_of
from ..calculus.indices import zero_based, zero_index
from ..graph import Graph
from ..notation import letters as L
from .fact import Fact
from .rope import scores_step

__all__ = ["absorption"]


def _blocks(expr: sp.Expr, width: sp.Expr) -> sp.Expr:
    """Each entry (W)_{a,(ℓ−1) c_h + j} of a weight as the entry (W^{(ℓ)})_{a,j} of its block."""

    def block(entry: Indexed) -> Indexed:
        row, col = entry.indices
        return entry.base[L.ell, row, sp.expand(col - (L.ell - 1) * width)]

    return expr.replace(
        lambda e: (
            isinstance(e, Indexed) and len(e.indices) == 2 and sp.expand(e.indices[1]).has(L.ell)
        ),
        block,
    )


def absorption(graph: Graph) -> Fact:
    r"""$\Omega^{(\ell)} = X W_q^{(\ell)} (W_{uk}^{(\ell)})^\top U^\top$, derived."""
    step = scores_step(graph)
    lhs = step.element.lhs
    composed = inline(step.element.rhs, graph, {"Q_l", "K_l", "Q", "K"})
    named = _blocks(composed, L.c_h)
    whole = graph.shapes  # each block W^{(ℓ)} has c_h of its matrix's columns
    letters = {L.letter_of(e) for e in named.atoms(Indexed)}
    shapes = {
        x: (whole[x.removesuffix("_l")][0], L.c_h) if x.endswith("_l") else whole[x]
        for x in letters
    }
    symbols = symbols_of(shapes)
    row, col = step.free
    zero = zero_based(sp.expand(named), (row, col), symbols)
    form = matrix_form(zero, (zero_index(row), zero_index(col)))
    omega = L.matrix_symbol("Omega_l", L.n, L.n)
    factors = form.args if isinstance(form, MatMul) else (form,)
    read = [str(f.arg.name) + "^T" if isinstance(f, sp.Transpose) else str(f.name) for f in factors]
    expected = form if read == ["X", "W_q_l", "W_uk_l^T", "U^T"] else sp.nan
    lines = (
        Eq(lhs, step.element.rhs, evaluate=False),
        Eq(lhs, composed, evaluate=False),
        Eq(lhs, named, evaluate=False),
        Eq(omega, form, evaluate=False),
    )
    claim = Eq(omega, expected, evaluate=False)  # X, the absorbed blocks, then the latent
    return Fact(
        "absorption",
        "Scores from the latent",
        lines,
        claim,
        (step.output, "Q_l", "K_l", "Q", "K"),
        "the split and the projections put into the score, head ℓ's columns named as "
        "its blocks, and the matrix form found by matrix_form",
    )
