r"""What SymPy derives about rotary position embeddings: the score depends on p − m only.

From the declarations (the rotated queries and keys put into the score, the rotation and the
angles put in), at symbolic sizes:

1. the sums over j' of the rotation are summed out (its Kronecker deltas), each under the half of
   the range of j where it is not zero;
2. the sum over j is split where the rotation changes sign (j ≤ c/2, j > c/2) and the second
   half counted from 1, so that the pair (j, j + c/2) is one term;
3. the angles put in (the same θ_j for j and j + c/2) and each coefficient of a product
   q_{·} k_{·} simplified by `sympy.trigsimp`: cos a cos b + sin a sin b = cos(a − b), ….

What is left reads the positions only through (m − p) θ_j: checked by SymPy (the angles do not
change when m and p are both moved by τ). With every angle 0 the score is the unrotated one.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Indexed, Sum

from ..calculus import inline, under_ranges
from ..graph import Declaration, Graph
from ..notation import letters as L
from .fact import Fact

__all__ = ["relative_position", "zero_angles", "THETA", "scores_step"]

#: θ_j, the frequency of the pair (j, j + c/2): β^{−2(j−1)/c}.
THETA = sp.IndexedBase("theta", positive=True)
_TAU = sp.Symbol("tau", integer=True)


def scores_step(graph: Graph) -> Declaration:
    """The step that computes the scores (one head's, where the graph has heads)."""
    (step,) = [s for s in graph.declarations if s.name == "scores"]
    return step


def _rotation_summed(expr: sp.Expr, ranges: dict) -> sp.Expr:
    """Each Σ_{j'} of the rotation summed out (its deltas), decided under `ranges`."""
    return expr.replace(
        lambda e: isinstance(e, Sum) and e.variables == (L.j2,),
        lambda e: under_ranges(e.doit(), ranges),
    )


def _halves(summand: sp.Expr, width: sp.Expr) -> sp.Expr:
    """The summand of Σ_{j=1}^{w} split at w/2, each half decided, the second counted from 1."""
    half = width / 2
    ranges = {L.m: (1, L.n), L.p: (1, L.n)}
    low = {**ranges, L.j: (sp.S.One, half)}
    high = {**ranges, L.j: (half + 1, width)}
    first = under_ranges(_rotation_summed(summand, low), low)
    second = under_ranges(_rotation_summed(summand, high), high).xreplace({L.j: L.j + half})
    return first + second


def _theta(expr: sp.Expr, width: sp.Expr) -> sp.Expr:
    """β^{−2(j−1)/w} written θ_j."""
    frequency = L.beta ** (-2 * (L.j - 1) / width)
    return expr.replace(
        lambda e: isinstance(e, sp.cos | sp.sin),
        lambda e: type(e)(sp.factor(e.args[0] / frequency) * THETA[L.j]),
    )


def _pairs(expr: sp.Expr) -> sp.Expr:
    """Each coefficient of a product of entries simplified by `sympy.trigsimp`, then the terms
    gathered by their angle."""
    groups: dict[sp.Expr, sp.Expr] = {}
    for term in sp.Add.make_args(sp.expand(expr)):
        entries = sp.Mul(*[f for f in sp.Mul.make_args(term) if isinstance(f, Indexed)])
        groups[entries] = groups.get(entries, 0) + term / entries
    simplified = sp.Add(*[entries * sp.trigsimp(c) for entries, c in groups.items()])
    simplified = simplified.replace(
        lambda e: isinstance(e, sp.cos | sp.sin), lambda e: type(e)(sp.factor(e.args[0]))
    )
    by_angle: dict[sp.Expr, sp.Expr] = {}
    for term in sp.Add.make_args(sp.expand(simplified, deep=False)):
        trig = sp.Mul(*[f for f in sp.Mul.make_args(term) if isinstance(f, sp.cos | sp.sin)])
        by_angle[trig] = by_angle.get(trig, 0) + term / trig
    return sp.Add(*[sp.Mul(total, trig, evaluate=False) for trig, total in by_angle.items()])


def _relative(expr: sp.Expr) -> bool:
    """True when every angle stays the same with m and p both moved by τ."""
    angles = [e.args[0] for e in expr.atoms(sp.cos, sp.sin)]
    moved = {L.m: L.m + _TAU, L.p: L.p + _TAU}
    return bool(angles) and all(sp.simplify(a.xreplace(moved) - a) == 0 for a in angles)


def relative_position(graph: Graph) -> Fact:
    r"""$\omega_{m,p}$ of rotated queries and keys, derived down to a sum over the pairs
    $(j, j + c/2)$ whose angles are $(m - p)\theta_j$."""
    step = scores_step(graph)
    suffix = "_l" if step.head else ""
    width = L.c_h if step.head else L.c
    lhs = step.element.lhs
    rotations = {"Q_rot" + suffix, "K_rot" + suffix, "R"}
    composed = inline(step.element.rhs, graph, rotations)
    ((j, _, _),) = composed.limits
    halves = _halves(composed.function, width)
    decided = {L.m: (1, L.n), L.p: (1, L.n), L.j: (sp.S.One, width / 2)}
    angles = _theta(under_ranges(inline(halves, graph, {"Phi"}), decided), width)
    paired = _pairs(angles)
    last = Sum(paired, (j, 1, width / 2))
    holds = _relative(paired)
    lines = (
        Eq(lhs, composed, evaluate=False),
        Eq(lhs, Sum(halves, (j, 1, width / 2)), evaluate=False),
        Eq(lhs, last, evaluate=False),
    )
    claim = Eq(lhs, last if holds else sp.nan, evaluate=False)
    sources = (step.output, *sorted(rotations), "Phi")
    return Fact(
        "relative_position",
        "The score depends on $p - m$ only",
        lines,
        claim,
        sources,
        "the rotation and the angles put into the score, the deltas summed out under "
        "the index ranges, the sum split at c/2 and sympy.trigsimp on each pair",
    )


def zero_angles(graph: Graph, base: Graph) -> Fact:
    """With every angle 0 (φ = 0), the rotated score is the score of `base`."""
    step = scores_step(graph)
    suffix = "_l" if step.head else ""
    rotations = {"Q_rot" + suffix, "K_rot" + suffix}
    composed = inline(step.element.rhs, graph, rotations)
    phi = L.base("phi")
    still = composed.replace(lambda e: isinstance(e, Indexed) and e.base == phi, lambda e: 0)
    theirs = scores_step(base).element.rhs
    lhs = step.element.lhs
    lines = (Eq(lhs, composed, evaluate=False), Eq(lhs, still, evaluate=False))
    claim = Eq(lhs, theirs if still == theirs else sp.nan, evaluate=False)
    return Fact(
        "zero_angles",
        "With every angle 0",
        lines,
        claim,
        (step.output, *rotations),
        "the rotations put into the score, every angle set to 0",
    )
