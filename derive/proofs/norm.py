r"""What SymPy derives about QK-norm: the scores are bounded, so the softmax cannot saturate.

Write u_{m,j} = \check{q}_{m,j} / (γ_q)_{1,j}, the normalised query before its gains. From the
declaration, SymPy derives Σ_j u_{m,j}² = c S / (S + c ε) = c − c² ε / (S + c ε) with
S = Σ_{j'} q_{m,j'}², and checks that the subtracted term is not negative (S ≥ 0, ε > 0): every
normalised row has a squared length of at most c. The score is Σ_j (γ_q)_{1,j} (γ_k)_{1,j}
u_{m,j} v_{p,j} (the declarations put in); by the Cauchy–Schwarz inequality it is at most
max|γ_q| max|γ_k| √(Σ u²) √(Σ v²) ≤ c max|γ_q| max|γ_k| in absolute value, and the scaled
score at most √c max|γ_q| max|γ_k|, whatever X and the projections are.
"""

from __future__ import annotations

import sympy as sp
from sympy import Abs, Eq, Le, Sum

from ..graph import Graph
from ..notation import letters as L
from .fact import Fact
from .rope import scores_step

__all__ = ["score_bound", "GAIN_MAX"]

#: max_j |(γ_q)_{1,j}| and max_j |(γ_k)_{1,j}|.
GAIN_MAX = {
    which: sp.Symbol(f"gmax_{rank}{which}", positive=True) for rank, which in enumerate("qk")
}
_S = sp.Symbol("S", nonnegative=True)


def _normalised(graph: Graph, letter: str) -> tuple[sp.Expr, sp.Expr, sp.Expr | None]:
    """(u_{row,j} as \\check{q} / γ, the same from the declaration, the sum of squares S)."""
    step = graph.step(letter)
    gains = [e for e in step.element.rhs.atoms(sp.Indexed) if L.letter_of(e).startswith("G_")]
    gain = gains[0] if gains else sp.S.One  # none: Llama 4's L2 norm
    sums = list(step.element.rhs.atoms(Sum))  # none: a declaration that does not normalise
    return step.element.lhs / gain, step.element.rhs / gain, sums[0] if sums else None


def _squared_length(graph: Graph, letter: str, width: sp.Expr) -> tuple[list, bool]:
    """Σ_j u_{m,j}² derived from the declaration, and whether it is at most `width`."""
    lhs, rhs, total = _normalised(graph, letter)
    j = L.j
    squares = Sum(lhs**2, (j, 1, width))
    put = Sum(rhs**2, (j, 1, width))
    if total is None:
        return [Eq(squares, put, evaluate=False)], False
    held = (rhs**2).xreplace({total: _S})  # S holds Σ_{j'} q_{m,j'}², free of j
    entry = [e for e in rhs.atoms(sp.Indexed) if j in e.indices][0]
    outside = sp.simplify(held / entry**2)  # the factor free of j leaves the sum
    summed = sp.simplify(outside * _S)  # what remains is S itself
    split = sp.apart(sp.together(summed), _S)
    gap = sp.simplify(width - split)
    at_most = bool(gap.is_nonnegative)
    back = {_S: total}
    lines = [
        Eq(squares, put, evaluate=False),
        Eq(squares, summed.xreplace(back), evaluate=False),
        Eq(squares, split.xreplace(back), evaluate=False),
        Le(squares, width, evaluate=False),
    ]
    return lines, at_most


def score_bound(graph: Graph) -> Fact:
    """|ω_{m,p}| ≤ c max|γ_q| max|γ_k|, and |ω̃_{m,p}| ≤ √c max|γ_q| max|γ_k|."""
    step = scores_step(graph)
    suffix = "_l" if step.head else ""
    width = L.c_h if step.head else L.c
    q_lines, q_ok = _squared_length(graph, "Q_norm" + suffix, width)
    _, k_ok = _squared_length(graph, "K_norm" + suffix, width)
    u_q, _, _ = _normalised(graph, "Q_norm" + suffix)
    u_k, _, _ = _normalised(graph, "K_norm" + suffix)
    score = step.element.lhs
    (scaled_step,) = [s for s in graph.declarations if s.name == "scaled_scores"]
    scaled = scaled_step.element.lhs
    gained = all(
        any(L.letter_of(e).startswith("G_") for e in graph.step(x).element.rhs.atoms(sp.Indexed))
        for x in ("Q_norm" + suffix, "K_norm" + suffix)
    )
    bound = GAIN_MAX["q"] * GAIN_MAX["k"] if gained else sp.S.One  # no gains: 1
    lengths = [sp.sqrt(Sum(u**2, (L.j, 1, width))) for u in (u_q, u_k)]
    factors = (bound, *lengths) if gained else lengths
    schwarz = sp.Mul(*factors, evaluate=False)  # Cauchy–Schwarz, then |γ| ≤ max|γ|
    holds = q_ok and k_ok
    last = width * bound if holds else sp.nan
    lines = (
        *q_lines,
        Eq(Abs(score), Abs(step.element.rhs), evaluate=False),
        Le(Abs(score), schwarz, evaluate=False),
        Le(Abs(score), width * bound, evaluate=False),
        Eq(Abs(scaled), Abs(score) / sp.sqrt(width), evaluate=False),
        Le(Abs(scaled), sp.sqrt(width) * bound, evaluate=False),
    )
    claim = Le(Abs(scaled), sp.sqrt(width) * bound if holds else last, evaluate=False)
    return Fact(
        "score_bound",
        "Scores that cannot grow",
        lines,
        claim,
        (step.output, "Q_norm" + suffix, "K_norm" + suffix),
        "the declaration squared and summed (the root leaves the sum), its sign checked "
        "by SymPy with S ≥ 0 and ε > 0; then the Cauchy–Schwarz inequality",
    )
